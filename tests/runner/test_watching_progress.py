"""Watching runs: the progress shown while they train. Plain lines when stderr is not a
terminal (a log, SLURM), each naming its run and giving the sweep's count and time left
within WIDTH columns; the live display; phases in words; and the time left, paced from each
stage's first event."""

from __future__ import annotations

import io
import socket

import pytest

from ssilbench.cli.progress import WIDTH, PlainProgress, fit, run_status
from ssilbench.runner.observer import RunView, SweepObserver
from ssilbench.runs.spec import RunSpec

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

LONG = ("idm_labeling (arch=impala, idm_batch_size=full, labels=hard) on procgen:bigfish, "
        "N_L=0.25, seed 7")  # fmt: skip


def test_plain_lines_name_every_run_with_the_sweep_eta_and_shorten_the_config_first(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr("ssilbench.cli.progress.time.time", lambda: clock[0])
    out = io.StringIO()
    progress = PlainProgress(4, out, every=3600)  # rounds drawn below, not by its thread
    progress.run_started("r1", LONG, 25_000_000)
    progress.run_event({"run_id": "r1", "kind": "phase", "phase": "preparing data"})
    progress("start", LONG)  # a unit starts: said at once
    progress.round()
    progress.run_event({"run_id": "r1", "kind": "progress", "stage": "policy", "step": 1,
                        "total": 25_000_000})  # its first step  # fmt: skip
    clock[0] += 100
    progress.run_event({"run_id": "r1", "kind": "progress", "stage": "policy",
                        "step": 5_000_000, "total": 25_000_000, "loss": 0.23125})  # fmt: skip
    progress.run_event({"run_id": "r1", "kind": "eval", "stage": "policy", "step": 1_000_000,
                        "result": {"score": 0.8125}})  # fmt: skip
    progress("done", "bc on maze:10x10, N_L=16, seed 0")
    progress.round()
    progress.run_event({"run_id": "r1", "kind": "phase", "phase": "evaluating",
                        "detail": "policy"})  # fmt: skip
    progress.round()
    progress.run_ended("r1", None)  # as the sweep does: recorded, then said
    progress("done", LONG)
    progress.close()
    lines = out.getvalue().splitlines()
    assert all(len(line) <= WIDTH for line in lines), lines
    # The sweep's runs ended and its time left: nothing known, then 1.2 of 4 runs in 100 s
    # (3:53 left at that pace) but r1's own 20M steps left at its pace (6:40), then 2 of 4.
    assert [line[9:24] for line in lines] == ["[0/4 eta ?] sta", "[0/4 eta ?] idm"] + [
        "[1/4 eta 6:40] ", "[1/4 eta 6:40] ", "[1/4 eta 6:40] ", "[2/4 eta 1:40] "]  # fmt: skip
    assert lines[0].endswith("] start: idm_labeling (arch=impala, idm_batch_size=f..) "
                             "procgen:bigfish N=0.25 s7")  # fmt: skip
    # Method, env, N_L and seed in every line; the config shortened first.
    assert lines[1].endswith("] idm_labeling (arch=impala, idm_ba..) procgen:bigfish N=0.25 s7 | "
                             "preparing data")  # fmt: skip
    assert lines[2].endswith("] done: bc on maze:10x10, N_L=16, seed 0")
    # No room for the loss and evaluation beside this label: they are left out.
    assert lines[3].endswith("] idm_labeling (arch=imp..) procgen:bigfish N=0.25 s7 | "
                             "training policy 5M/25M")  # fmt: skip
    assert lines[4].endswith(" N=0.25 s7 | evaluating policy 5M/25M")
    assert lines[5].endswith("] done: idm_labeling (arch=impala, idm_batch_size..) "
                             "procgen:bigfish N=0.25 s7")  # fmt: skip
    assert fit("x" * 100, ["y" * 10], 40) == "x" * 25 + ".. | " + "y" * 10
    assert fit("bc on maze:10x10, N_L=16, seed 0", "s") == "bc on maze:10x10, N_L=16, seed 0 | s"
    # Less and less room: the config is shortened first (80), then the last parts go (70:
    # the loss, then the evaluation), then method and env are cut (40).
    parts = ["training policy", "1k/3k", "eta 0:09", "eval 0.188@1.5k", "loss 0.126"]
    assert fit("bc (arch=mlp5) on maze:10x10, N_L=16, seed 0", parts, 80) == (
        "bc (arch=..) maze:10x10 N=16 s0 | training policy 1k/3k eta 0:09 eval 0.188@1.5k"
    )
    assert fit("bc (arch=mlp5) on maze:10x10, N_L=16, seed 0", parts, 70) == (
        "bc (arch=mlp5) maze:10x10 N=16 s0 | training policy 1k/3k eta 0:09"
    )
    assert fit("bc (arch=mlp5) on maze:10x10, N_L=16, seed 0", parts, 40) == (
        "bc maz.. N=16 s0 | training policy 1k/3k"
    )


def test_phases_in_words(monkeypatch):
    observer = SweepObserver()
    for i in range(2):
        observer.run_started(f"r{i}", f"bc on maze:10x10, N_L=16, seed {i}", 1000)
    observer.run_event({"run_id": "r0", "kind": "progress", "stage": "idm", "step": 10,
                        "total": 1000, "pid": 4242})  # fmt: skip
    observer.run_event({"run_id": "r1", "kind": "phase", "phase": "waiting", "detail": "idm",
                        "holder": {"host": socket.gethostname(), "pid": 4242}})  # fmt: skip
    view = observer.runs["r1"]
    assert run_status(view, holder=observer.holder_of(view.holder)) == (
        "waiting for shared idm (held by bc on maze:10x10, N_L=16, seed 0) 0/1k"
    )
    assert observer.holder_of({"host": "elsewhere", "pid": 7}) == "elsewhere pid 7"
    observer.run_event({"run_id": "r1", "kind": "phase", "phase": "labelling",
                        "detail": "40,000 rows"})  # fmt: skip
    assert run_status(view) == "labelling 40,000 rows 0/1k"
    observer.run_event({"run_id": "r1", "kind": "phase", "phase": "preparing data"})
    assert run_status(view) == "preparing data"
    observer.run_event({"run_id": "r1", "kind": "phase", "phase": "queued",
                        "detail": "stacked group 2 of 3"})  # fmt: skip
    assert run_status(view) == "queued (stacked group 2 of 3)"


def test_a_run_queued_behind_its_group_does_not_stretch_the_sweep_eta(monkeypatch):
    """A run whose group waits makes no steps: its pace from before (a first stage, then
    queued for the next) would put the sweep's end days away. Only training runs' own time
    left bounds the sweep's."""
    clock = [1000.0]
    monkeypatch.setattr("ssilbench.cli.progress.time.time", lambda: clock[0])
    monkeypatch.setattr("ssilbench.runner.telemetry.time.time", lambda: clock[0])
    progress = PlainProgress(2, io.StringIO(), every=3600)
    progress.began = clock[0]
    for i in range(2):
        progress.run_started(f"r{i}", f"bc on maze:10x10, N_L=16, seed {i}", 200_000)
        progress.run_event({"run_id": f"r{i}", "kind": "progress", "stage": "idm",
                            "step": 1_000, "total": 200_000})  # fmt: skip
    clock[0] += 60
    for i in range(2):
        progress.run_event({"run_id": f"r{i}", "kind": "progress", "stage": "idm",
                            "step": 3_000, "total": 200_000})  # fmt: skip
    progress.run_event({"run_id": "r1", "kind": "phase", "phase": "queued",
                        "detail": "stacked group 2 of 2"})  # fmt: skip
    clock[0] += 3_600  # r0 trains its group on; r1 waits, its step frozen at 3,000
    progress.run_event({"run_id": "r0", "kind": "progress", "stage": "idm",
                        "step": 120_000, "total": 200_000})  # fmt: skip
    stale = progress.runs["r1"].eta(clock[0])
    assert stale is not None and stale > 100 * 3_600  # its own pace: 3,660 s per 2,000 steps
    # The sweep's pace: 0.6 and 0.015 of the two runs' steps in 3,660 s, less the 999 steps
    # each had before its first event here.
    before = 999 / 200_000
    share = (0.6 + 0.015 - 2 * before) / (2 - 2 * before)
    assert progress.sweep_eta(clock[0]) == pytest.approx(3_660 * (1 - share) / share)


def test_steps_restored_from_a_checkpoint_do_not_count_as_the_sweep_s_pace(monkeypatch):
    """Two runs: one resumed at 60,000 of its 100,000 steps, one not begun. In a minute the
    resumed run makes 10,000 steps: the sweep has 1.4 runs' work to do and has done 0.1 of
    it, so it has 13 minutes left, not the 2 that 0.7 of 2 runs done would say."""
    clock = [1000.0]
    monkeypatch.setattr("ssilbench.cli.progress.time.time", lambda: clock[0])
    monkeypatch.setattr("ssilbench.runner.telemetry.time.time", lambda: clock[0])
    progress = PlainProgress(2, io.StringIO(), every=3600)
    progress.began = clock[0]
    progress.run_started("r0", "bc on maze:10x10, N_L=16, seed 0", 100_000)
    progress.run_event({"run_id": "r0", "kind": "progress", "stage": "policy",
                        "step": 60_001, "total": 100_000})  # fmt: skip
    clock[0] += 60
    progress.run_event({"run_id": "r0", "kind": "progress", "stage": "policy",
                        "step": 70_001, "total": 100_000})  # fmt: skip
    assert progress.sweep_eta(clock[0]) == pytest.approx(60 * 1.3 / 0.1, rel=1e-3)
    # Recorded, the resumed run counts the 0.4 it did here: r1, not begun, is the 1.0 left.
    clock[0] += 4 * 60 - 60
    progress("done", "r0")
    progress.run_ended("r0", None)
    assert progress.sweep_eta(clock[0]) == pytest.approx(240 * 1.0 / 0.4, rel=1e-3)


def test_plain_progress_counts_many_queued_runs_on_one_line():
    """A stacked unit of runs on their own datasets trains in groups one after the other:
    beyond a few, the runs waiting for their group are one line, not one each."""
    out = io.StringIO()
    progress = PlainProgress(10, out, every=3600)
    _claimed(progress, 10)
    for i in range(1, 10):
        progress.run_event({"run_id": f"r{i}", "kind": "phase", "phase": "queued",
                            "detail": f"stacked group {1 + i % 3} of 3"})  # fmt: skip
    progress.round()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert "seed 0 | training policy 12k/200k" in lines[0]
    assert lines[1].endswith(" 9 runs queued behind another group of their stacked unit")
    out.seek(0)
    out.truncate()
    for i in range(4, 10):  # three left queued: drawn one by one, as runs preparing data are
        progress.run_event({"run_id": f"r{i}", "kind": "progress", "stage": "policy",
                            "step": 10, "total": 200_000})  # fmt: skip
    progress.round()
    lines = out.getvalue().splitlines()
    assert sum("| queued (stacked group" in line for line in lines) == 3, lines
    assert len(lines) == 10 and "queued behind" not in out.getvalue()


def _claimed(progress: SweepObserver, n: int) -> None:
    """``n`` runs claimed (a stacked unit's, say); the first one trains."""
    for i in range(n):
        progress.run_started(f"r{i}", f"bc on maze:10x10, N_L=16, seed {i}", 200_000)
    progress.run_event({"run_id": "r0", "kind": "progress", "stage": "policy", "step": 12_000,
                        "total": 200_000, "loss": 0.25})  # fmt: skip


def test_plain_progress_counts_runs_without_a_step_as_waiting_instead_of_drawing_them():
    out = io.StringIO()
    progress = PlainProgress(70, out, every=3600)
    _claimed(progress, 70)
    progress.round()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert "bc on maze:10x10, N_L=16, seed 0 | training policy 12k/200k loss 0.25" in lines[0]
    assert lines[1].endswith(" 69 more claimed, not heard from yet")
    progress.round()  # a round with every run training has no waiting line
    out.truncate(0)
    for i in range(1, 70):
        progress.run_event({"run_id": f"r{i}", "kind": "progress", "stage": "policy",
                            "step": 10, "total": 200_000})  # fmt: skip
    progress.round()
    assert "waiting" not in out.getvalue() and len(out.getvalue().splitlines()) == 70


def test_the_live_display_draws_training_runs_and_counts_the_waiting_ones():
    from rich.console import Console

    from ssilbench.cli.progress import LiveProgress

    screen = io.StringIO()
    console = Console(file=screen, width=120, force_terminal=False, color_system=None)
    progress = LiveProgress(70, console)
    _claimed(progress, 70)
    progress("claimed", "bc")
    console.print(progress.render())
    text = screen.getvalue()
    assert "0 done · 1 running · 69 waiting · 0 failed" in text
    assert text.count("bc on maze:10x10") == 1 and "seed 0" in text


def test_the_live_display_gives_the_sweep_the_time_left_the_plain_lines_give(monkeypatch):
    from rich.console import Console

    from ssilbench.cli.progress import LiveProgress

    clock = [1000.0]
    monkeypatch.setattr("ssilbench.cli.progress.time.time", lambda: clock[0])
    monkeypatch.setattr("ssilbench.runner.telemetry.time.time", lambda: clock[0])
    screen = io.StringIO()
    console = Console(file=screen, width=160, force_terminal=False, color_system=None)
    live, plain = LiveProgress(3, console), PlainProgress(3, io.StringIO(), every=3600)
    for display in (live, plain):
        display.began = clock[0]
        display("skipped", "bc on maze:10x10, N_L=16, seed 2")  # recorded already
        display.run_started("r0", "bc on maze:10x10, N_L=16, seed 0", 100_000)
        display.run_event({"run_id": "r0", "kind": "progress", "stage": "policy",
                           "step": 50_001, "total": 100_000})  # resumed  # fmt: skip
    clock[0] += 60
    for display in (live, plain):
        display.run_event({"run_id": "r0", "kind": "progress", "stage": "policy",
                           "step": 60_001, "total": 100_000})  # fmt: skip
    # 0.1 of the 1.5 runs' work left at the start, in a minute: 14 minutes to go.
    assert plain.sweep_eta(clock[0]) == pytest.approx(60 * 1.4 / 0.1, rel=1e-3)
    console.print(live.render())
    assert "eta 14:00" in screen.getvalue().splitlines()[0]


def test_run_status_estimates_the_time_left():
    view = RunView("r", "label", total=1000, stage="idm", step=250, started=0.0)
    assert run_status(view, now=100.0) == "training idm 250/1k eta 5:00"
    view.may_stop_early = True  # a stopping rule may end it sooner: the estimate is a bound
    assert run_status(view, now=100.0) == "training idm 250/1k eta <=5:00"


def test_the_sweep_knows_from_a_run_s_spec_whether_its_total_is_a_bound():
    observer = SweepObserver()
    for stop_early in ("paper", True, False):
        spec = RunSpec(method="bc", config={}, env="maze:10x10", options={}, budget="16",
                       seed=0, steps=300, eval_every=300, stop_early=stop_early)  # fmt: skip
        observer.run_started(spec.run_id, "label", spec.steps, spec)
        assert observer.runs[spec.run_id].may_stop_early is bool(stop_early)
    observer.run_started("r", "label", 300)  # no spec: nothing says a rule applies
    assert not observer.runs["r"].may_stop_early


def test_the_time_left_is_paced_from_the_stage_s_first_event(monkeypatch):
    """A run resumed at step 12k, queued 10 minutes before it started, or in its second
    stage: the pace counts only the steps this stage has made since it was first seen."""
    clock = [1000.0]
    monkeypatch.setattr("ssilbench.runner.telemetry.time.time", lambda: clock[0])
    observer = SweepObserver()
    observer.run_started("r", "vm_idm on maze:50x50, N_L=1.0, seed 0", 200_000)
    clock[0] += 600  # waiting for a worker
    observer.run_event({"run_id": "r", "kind": "progress", "stage": "idm", "step": 12_000,
                        "total": 200_000})  # fmt: skip
    view = observer.runs["r"]
    assert view.eta(clock[0]) is None  # no pace yet
    clock[0] += 60
    observer.run_event({"run_id": "r", "kind": "progress", "stage": "idm", "step": 14_000,
                        "total": 200_000})  # fmt: skip
    assert view.eta(clock[0]) == pytest.approx(60 / 2_000 * 186_000)
    clock[0] += 30
    observer.run_event({"run_id": "r", "kind": "progress", "stage": "policy", "step": 100,
                        "total": 1_000})  # fmt: skip
    clock[0] += 9
    observer.run_event({"run_id": "r", "kind": "progress", "stage": "policy", "step": 400,
                        "total": 1_000})  # fmt: skip
    assert view.eta(clock[0]) == pytest.approx(9 / 300 * 600)


def test_run_prints_plain_progress_in_a_log(cli, monkeypatch):
    """`run` with stderr not a terminal (a log, SLURM): a line at once when the run starts,
    then periodic lines naming the run, its phase, step and loss, each with the sweep's
    count and time left, every line within WIDTH columns."""
    monkeypatch.setenv("SSILBENCH_PROGRESS_EVERY", "0.05")
    result = cli.run("--method", "bc", "--env", "maze:10x10", "--budgets", "16",
                     "--steps", "3000", "--no-rollouts", "--threads", "1")  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    # Every progress line (a time stamp first) fits; the summary after them names the folder.
    progress = [line for line in lines if line[:2].isdigit() and line[2] == ":"]
    assert progress[0].endswith("[0/1 eta ?] start: bc on maze:10x10, N_L=16, seed 0")
    running = [line for line in progress if " s0 | training policy " in line
               or "seed 0 | training policy " in line]  # fmt: skip
    assert running and all(" loss " in line or " eval " in line for line in running), lines
    assert all(len(line) <= WIDTH and " [0/1 eta " in line for line in progress[:-1])
    assert progress[-1].endswith("[1/1 eta 0:00] done: bc on maze:10x10, N_L=16, seed 0")


def test_a_bad_progress_interval_is_refused(cli, monkeypatch):
    monkeypatch.setenv("SSILBENCH_PROGRESS_EVERY", "soon")
    result = cli.run("--method", "bc", "--env", "maze:10x10", "--budgets", "16", "--steps", "20")
    assert result.returncode == 2
    assert "SSILBENCH_PROGRESS_EVERY='soon' is not a number of seconds" in result.stderr


def test_the_observer_from_its_old_module_warns_and_is_the_same_class() -> None:
    import ssilbench.runner.telemetry as telemetry

    for name, moved in (("SweepObserver", SweepObserver), ("RunView", RunView)):
        with pytest.warns(DeprecationWarning, match="ssilbench.runner.observer"):
            assert getattr(telemetry, name) is moved
    with pytest.raises(AttributeError):
        telemetry.NoSuchName  # noqa: B018
