"""Watching runs: curves recorded by real sweeps (ctx.log_metric included, in-process and in a
pool, the results unchanged), the `curves` command, and loggers (the hook, TensorBoard event
files, W&B and MLflow offline). The progress shown while runs train is tested in
test_watching_progress.py."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from ssilbench.cli import cli
from ssilbench.cli.progress import duration, run_status
from ssilbench.errors import PluginError, UnknownNameError
from ssilbench.loggers.base import (
    Curve,
    LiveRun,
    LoggedRun,
    LoggerAdapter,
    RunLogger,
    make_loggers,
)
from ssilbench.loggers.tensorboard import TensorBoardLogger, read_events
from ssilbench.planning.plan import build_plan
from ssilbench.runner.observer import RunView, SweepObserver
from ssilbench.runner.sweep import run_sweep
from ssilbench.runs.spec import RunSpec, Sweep
from ssilbench.runs.store import ResultsStore

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

CPU = torch.device("cpu")
MAZE = {"envs": ["maze:10x10"], "options": {"state": "position", "data": "states"},
        "config": {"arch": "mlp5"}, "eval_every": 100, "rollouts": False}  # fmt: skip


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("data")


class Recorder(SweepObserver):
    """Keeps every live event and recorded run."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[dict] = []
        self.started: dict[str, RunView] = {}  # each run's view, kept after it ends
        self.ended: list = []

    def run_started(self, run_id: str, label: str, total: int, spec=None) -> None:
        super().run_started(run_id, label, total, spec)
        self.started[run_id] = self.runs[run_id]

    def run_event(self, event: dict) -> None:
        self.events.append(event)
        super().run_event(event)

    def run_ended(self, run_id: str, record) -> None:
        self.ended.append(record)
        super().run_ended(run_id, record)


def _sweep(plugins, data, folder, method="idm_labeling", observer=None, **kw):
    sweep = Sweep(methods=[method], budgets=["16", "0.5"], seeds=[0], steps=200, **MAZE)
    with ResultsStore(folder) as store:
        summary = run_sweep(build_plan(plugins, sweep, data), plugins, store, CPU,
                            on_progress=observer, **kw)  # fmt: skip
        assert summary.ok and summary.done == 2, summary
        return {r.run_id: r for r in store.rows("done", curves=True)}


def test_a_sweep_records_curves_and_log_metric_without_changing_results(plugins, data, tmp_path):
    watched = Recorder()
    runs = _sweep(plugins, data, tmp_path / "watched", observer=watched)
    plain = _sweep(plugins, data, tmp_path / "plain", stack=False)
    for run_id, run in runs.items():
        # Watched, stacked or alone: the same numbers, and the same curves.
        assert (run.metrics, run.timeline, run.stages) == (
            plain[run_id].metrics, plain[run_id].timeline, plain[run_id].stages)  # fmt: skip
        assert run.curves == plain[run_id].curves
        series = {(c["stage"], c["name"]): c for c in run.curves}
        assert {("idm", "loss"), ("policy", "loss"), ("policy", "eval/test_accuracy")} <= set(
            series
        )
        assert series[("idm", "loss")]["steps"][0] == 1
        assert series[("policy", "loss")]["steps"][-1] == 200
        # idm_labeling logs how sure its IDM is of D_U's labels (ctx.log_metric).
        [confidence] = series[("idm", "label_confidence")]["values"]
        assert 0 < confidence <= 1
    kinds = {(e["kind"], e.get("stage", e.get("phase"))) for e in watched.events}
    assert {("progress", "idm"), ("progress", "policy"), ("eval", "policy")} <= kinds
    # No stopping rule: every run takes its declared steps, so its time left is no bound.
    assert not any(view.may_stop_early for view in watched.started.values())
    # Each run says what it does between its steps: its data first, then each evaluation.
    for run_id in runs:
        phases = [e["phase"] for e in watched.events if e["run_id"] == run_id
                  and e["kind"] == "phase"]  # fmt: skip
        assert phases[0] == "preparing data" and "evaluating" in phases, phases
    assert {r.run_id for r in watched.ended} == set(runs)
    assert all(r.curves for r in watched.ended)


def test_a_stage_that_stops_early_takes_its_unspent_steps_out_of_the_total(plugins, data, tmp_path):
    # The rule checks at step 500 of each 550-step stage; the IDM stops there, and the run's
    # progress then counts to the steps it will take, not to the 1,100 declared.
    watched = Recorder()
    sweep = Sweep(methods=["idm_labeling"], budgets=["0.5"], seeds=[0], steps=1100,
                  stop_early=True, **MAZE)  # fmt: skip
    with ResultsStore(tmp_path) as store:
        summary = run_sweep(build_plan(plugins, sweep, data), plugins, store, CPU,
                            on_progress=watched)  # fmt: skip
        [run] = store.rows("done")
    assert summary.ok
    idm, policy = run.stages["idm"], run.stages["policy"]
    assert idm["stopped_early"] and idm["used"] == 500
    progress = [e for e in watched.events if e["kind"] == "progress"]
    assert progress[0]["stage"] == "idm" and progress[0]["total"] == 1100
    first_policy = next(e for e in progress if e["stage"] == "policy")
    assert first_policy["total"] == 1100 - 50
    assert progress[-1]["step"] == progress[-1]["total"] == idm["used"] + policy["used"]
    # What the display makes of them: the policy stage's time left is that of its own steps.
    view = RunView(run.run_id, "idm_labeling")
    for event in progress[: progress.index(first_policy) + 1]:
        view.apply(event)
    view.apply({**first_policy, "step": first_policy["step"] + 10})
    assert view.total == 1050
    assert view.eta(view.origin[1] + 10.0) == pytest.approx(10.0 / 10 * (1050 - view.step))
    # Under a stopping rule the sweep's view says so (from the spec), and the time left
    # shows as a bound.
    assert watched.started[run.run_id].may_stop_early
    view.may_stop_early = True
    left = duration(view.eta(view.origin[1] + 10.0))
    assert f" eta <={left} " in run_status(view, now=view.origin[1] + 10.0)


def test_events_come_back_from_pool_workers(plugins, data, tmp_path):
    from ssilbench.runner.units import PoolSetup
    from ssilbench.runner.worker import RunStorage

    watched = Recorder()
    setup = PoolSetup(plugin_flags=(), data_root=data, device="cpu", storage=RunStorage())
    runs = _sweep(plugins, data, tmp_path, "bc", observer=watched, workers=2, setup=setup)
    assert {e["run_id"] for e in watched.events} == set(runs)
    assert all(r.curves for r in runs.values())


@pytest.fixture(scope="module")
def store(plugins, data, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("store")
    _sweep(plugins, data, folder, "bc")
    return folder


def test_curves_command_draws_png_and_svg(store, tmp_path):
    runner = CliRunner()
    png = tmp_path / "c.png"
    result = runner.invoke(cli, ["curves", "--results", str(store), "--out", str(png)])
    assert result.exit_code == 0, result.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = tmp_path / "c.svg"
    args = ["curves", "--results", str(store), "--budget", "16", "--series", "loss",
            "--out", str(svg)]  # fmt: skip
    assert runner.invoke(cli, args).exit_code == 0
    text = svg.read_text()
    assert text.lstrip().startswith("<?xml") and "</svg>" in text
    assert (
        "policy/loss" in text
        and "bc (arch=mlp5) on maze:10x10" in text
        and "N_L=16, seed 0" in text
    )
    assert "N_L=0.5" not in text


@pytest.mark.parametrize(
    "args, message",
    [
        (["--series", "nope"], "--series nope: not recorded"),
        (["--method", "vm_idm"], "No finished run"),
        (["--run", "ab"], "at least 6 characters"),
        (["--out", "x.pdf"], "must end in .png or .svg"),
    ],
)
def test_curves_command_errors(store, tmp_path, args, message):
    out = ["--out", str(tmp_path / "c.png")] if "--out" not in args else []
    result = CliRunner().invoke(cli, ["curves", "--results", str(store), *args, *out])
    assert result.exit_code != 0 and message in str(result.exception), result.output


def test_the_html_page_shows_the_curves(store):
    from ssilbench.leaderboard.curves import store_curves_section

    section = store_curves_section(store)
    assert "<h2>Training curves</h2>" in section and "policy/loss" in section
    assert section.count("<polyline") == 2  # a line per budget (one seed each)


def _logged(store: Path) -> list[LoggedRun]:
    with ResultsStore.open_read_only(store) as s:
        return [LoggedRun.of(r) for r in s.rows("done", curves=True)]


def test_tensorboard_event_files_read_back(store, tmp_path):
    logger = TensorBoardLogger(tmp_path)
    run = _logged(store)[0]
    logger.run_finished(run)
    [path] = (tmp_path / "tensorboard" / run.short_name).glob("events.out.tfevents.*")
    events = read_events(path)
    assert events[0]["file_version"] == "brain.Event:2"
    loss = {e["step"]: e["scalars"]["policy/loss"] for e in events
            if "policy/loss" in e.get("scalars", {})}  # fmt: skip
    [curve] = [c for c in run.curves if c.tag == "policy/loss"]
    assert sorted(loss) == curve.steps
    assert loss[curve.steps[-1]] == pytest.approx(curve.values[-1], rel=1e-6)
    assert any("final/test_accuracy" in e.get("scalars", {}) for e in events)
    tensorboard = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    acc = tensorboard.EventAccumulator(str(path))
    acc.Reload()
    assert [e.step for e in acc.Scalars("policy/loss")] == curve.steps


def test_a_corrupted_event_file_is_refused(store, tmp_path):
    TensorBoardLogger(tmp_path).run_finished(_logged(store)[0])
    [path] = (tmp_path / "tensorboard").glob("*/events.out.tfevents.*")
    data = bytearray(path.read_bytes())
    data[40] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="bad record"):
        read_events(path)


PLUGIN = """
from ssilbench.api import RunLogger, hookimpl

SEEN = []


class JsonLogger(RunLogger):
    def run_finished(self, run):
        folder = self.log_dir / "jsonlog"
        folder.mkdir(exist_ok=True)
        (folder / (run.run_id + ".json")).write_text(__import__("json").dumps(
            {"label": run.label, "tags": [c.tag for c in run.curves], "score": run.score}))


@hookimpl
def ssilbench_register_loggers(registry):
    registry.add("jsonlog", "jsonlog_plugin:JsonLogger", "runs as JSON files")
"""


def test_a_third_party_logger_and_tensorboard_from_run(cli):
    cli.write_plugin("jsonlog_plugin", PLUGIN)
    logs = cli.tmp / "logs"
    result = cli("-p", "jsonlog_plugin", "run", "--method", "bc", "--env", "maze:10x10",
                 "--budgets", "16", "--steps", "60", "-q", "--results", str(cli.results),
                 "--data-root", str(cli.data), "--log", "jsonlog,tensorboard",
                 "--log-dir", str(logs))  # fmt: skip
    assert result.returncode == 0, result.stderr
    [written] = (logs / "jsonlog").glob("*.json")
    doc = json.loads(written.read_text())
    assert doc["label"] == "bc on maze:10x10, N_L=16, seed 0"
    assert "policy/loss" in doc["tags"] and "policy/eval/score" in doc["tags"]
    # The live file was replaced by the complete one: the curves, the hyper-parameters and
    # the session's end.
    [events] = (logs / "tensorboard").glob("*/events.out.tfevents.*")
    assert not events.name.endswith(".live")
    read = read_events(events)
    assert any("policy/loss" in e.get("scalars", {}) for e in read)
    [hparams] = [e["hparams"] for e in read if "hparams" in e]
    assert hparams["method"] == "bc" and hparams["steps"] == 60
    assert read[-1]["session_end"] == 1


def _live_losses(logs: Path) -> tuple[Path | None, list[dict]]:
    """The live TensorBoard event file under ``logs`` and its events (none yet: None)."""
    found = list((logs / "tensorboard").glob("*/events.out.tfevents.*.live"))
    return (found[0], read_events(found[0])) if found else (None, [])


def test_tensorboard_holds_a_killed_run_s_first_losses_and_its_hyperparameters(cli):
    """A run killed while it trains: its live event file holds its hyper-parameters and
    the losses logged so far (TensorBoard shows it while it trains)."""
    logs = cli.tmp / "logs"
    args = [sys.executable, "-m", "ssilbench", "run", "--method", "bc", "--env", "maze:10x10",
            "--budgets", "16", "--steps", "1000000", "--no-rollouts", "--threads", "1", "-q",
            "--results", str(cli.results), "--data-root", str(cli.data), "--log", "tensorboard",
            "--log-dir", str(logs)]  # fmt: skip
    run = subprocess.Popen(args, env=cli.env(), cwd=cli.tmp, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        losses: list[tuple[int, float]] = []
        while len(losses) < 2 and time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.2)
            path, events = _live_losses(logs)
            losses = [(e["step"], e["scalars"]["policy/loss"]) for e in events
                      if "policy/loss" in e.get("scalars", {})]  # fmt: skip
    finally:
        run.kill()
        _, stderr = run.communicate(timeout=30)
    assert len(losses) >= 2, stderr
    path, events = _live_losses(logs)  # read again after the kill: nothing was lost
    assert path is not None and path.parent.name.startswith("bc_maze-10x10_16_s0_")
    [hparams] = [e["hparams"] for e in events if "hparams" in e]
    assert {k: hparams[k] for k in ("method", "env", "budget", "seed", "steps", "rollouts")} == {
        "method": "bc", "env": "maze:10x10", "budget": "16", "seed": 0, "steps": 1_000_000,
        "rollouts": False}  # fmt: skip
    assert "config.arch" in hparams and "options.state" in hparams
    after = [(e["step"], e["scalars"]["policy/loss"]) for e in events
             if "policy/loss" in e.get("scalars", {})]  # fmt: skip
    assert after[: len(losses)] == losses and after[0][0] == 1
    assert [step for step, _ in after] == sorted({step for step, _ in after})
    assert all(math.isfinite(loss) and loss > 0 for _, loss in after)
    assert ("running",) in [row[1:2] for row in cli.rows()]  # never recorded


class Calls(RunLogger):
    """Keeps what a logger is told, in order."""

    def __init__(self, log_dir: Path) -> None:
        super().__init__(log_dir)
        self.calls: list[tuple] = []

    def run_hparams(self, run: LiveRun) -> None:
        self.calls.append(("hparams", run.run_id, run.short_name, run.hparams))

    def run_metrics(self, run_id: str, step: int, values: dict[str, float]) -> None:
        self.calls.append(("metrics", run_id, step, values))

    def run_failed(self, run_id: str) -> None:
        self.calls.append(("failed", run_id))


def test_loggers_get_hyperparameters_then_live_points_and_nothing_after_the_end(tmp_path):
    calls = Calls(tmp_path)
    observer = SweepObserver([LoggerAdapter(calls)])
    spec = RunSpec(method="bc", config={"arch": "mlp5", "sizes": [8, 8]}, env="maze:10x10",
                   options={"state": "position"}, budget="16", seed=3, steps=500,
                   eval_every=100)  # fmt: skip
    observer.run_started(spec.run_id, "bc on maze:10x10, N_L=16, seed 3", 500, spec)
    for event in ({"kind": "phase", "phase": "preparing data"},
                  {"kind": "progress", "stage": "policy", "step": 1, "total": 500, "loss": 2.5},
                  {"kind": "progress", "stage": "policy", "step": 90, "total": 500},
                  {"kind": "phase", "phase": "evaluating", "detail": "policy"},
                  {"kind": "eval", "stage": "policy", "step": 100,
                   "result": {"score": 0.25, "return": None, "test_accuracy": 0.5}}):  # fmt: skip
        observer.run_event({"run_id": spec.run_id, **event})
    observer.run_ended(spec.run_id, None)
    observer.run_event({"run_id": spec.run_id, "kind": "progress", "stage": "policy",
                        "step": 200, "total": 500, "loss": 1.0})  # fmt: skip
    assert calls.calls == [
        ("hparams", spec.run_id, f"bc_maze-10x10_16_s3_{spec.run_id[:8]}",
         {"method": "bc", "env": "maze:10x10", "budget": "16", "seed": 3, "steps": 500,
          "eval_every": 100, "stop_early": False, "rollouts": True, "config.arch": "mlp5",
          "config.sizes": "[8, 8]", "options.state": "position"}),
        ("metrics", spec.run_id, 1, {"policy/loss": 2.5}),
        ("metrics", spec.run_id, 100, {"policy/eval/score": 0.25,
                                       "policy/eval/test_accuracy": 0.5}),
        ("failed", spec.run_id),
    ]  # fmt: skip


def test_wandb_runs_live_with_their_config(tmp_path, monkeypatch):
    """The W&B logger's calls, on a stand-in for the wandb package (not installed here):
    a run opened at its claim with its hyper-parameters, points with increasing steps, the
    points after the last live one and the final numbers when recorded."""
    import types

    opened: list[dict] = []

    class Handle:
        def __init__(self, **kw) -> None:
            self.kw, self.logged, self.summary, self.exit = kw, [], {}, None
            opened.append(self.__dict__)

        def log(self, values, step):
            self.logged.append((step, values))

        def finish(self, exit_code=0):
            self.exit = exit_code

    fake = types.SimpleNamespace(init=lambda **kw: Handle(**kw), __version__="0.21.0")
    monkeypatch.setitem(sys.modules, "wandb", fake)
    from ssilbench.loggers.external import WandbLogger

    logger = WandbLogger(tmp_path)
    live = LiveRun("r" * 40, "bc on maze:10x10, N_L=16, seed 0", "bc", "maze:10x10", "16", 0,
                   {"method": "bc", "config.lr": 0.1})  # fmt: skip
    logger.run_hparams(live)
    logger.run_metrics(live.run_id, 10, {"policy/loss": 1.0})
    logger.run_metrics(live.run_id, 5, {"policy/eval/score": 0.5})  # late: W&B would drop it
    run = LoggedRun(live.run_id, live.label, "bc", "maze:10x10", "16", 0, {}, {}, 0.75, 0.75,
                    {"test_accuracy": 0.5}, [], [Curve("policy", "loss", [1, 10, 20],
                                                       [2.0, 1.0, 0.5])])  # fmt: skip
    logger.run_finished(run)
    [handle] = opened
    assert handle["kw"]["config"] == live.hparams and handle["kw"]["reinit"] == "create_new"
    assert handle["logged"] == [(10, {"policy/loss": 1.0}), (20, {"policy/loss": 0.5})]
    assert handle["summary"] == {"final/test_accuracy": 0.5, "final/score": 0.75}
    assert handle["exit"] == 0
    # A wandb that keeps one run open at a time gets each run whole when it is recorded.
    opened.clear()
    fake.__version__ = "0.18.7"
    older = WandbLogger(tmp_path)
    older.run_hparams(live)
    assert opened == []
    older.run_finished(run)
    [handle] = opened
    assert handle["kw"]["reinit"] is True and [s for s, _ in handle["logged"]] == [1, 10, 20]


def test_an_unknown_logger_is_refused_before_any_run(cli):
    result = cli.run("--method", "bc", "--env", "maze:10x10", "--budgets", "16", "--steps", "20",
                     "--log", "tensorbord")  # fmt: skip
    assert result.returncode == 2
    assert "tensorbord" in result.stderr and "tensorboard" in result.stderr
    assert not (cli.results / "results.sqlite").exists() or "done" not in str(cli.rows())


def test_unknown_name_error_type(plugins, tmp_path):
    with pytest.raises(UnknownNameError):
        make_loggers(plugins, ["nope"], tmp_path)


@pytest.mark.parametrize("name", ["wandb", "mlflow"])
def test_a_missing_logger_package_says_what_to_install(plugins, tmp_path, monkeypatch, name):
    import sys

    monkeypatch.setitem(sys.modules, name, None)  # importing it now raises ImportError
    with pytest.raises(PluginError, match=rf'pip install "ssilbench\[{name}\]"'):
        make_loggers(plugins, [name], tmp_path)


def test_wandb_offline(store, tmp_path, plugins, monkeypatch):
    pytest.importorskip("wandb", reason="the wandb extra is not installed")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    for key in ("WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR"):  # not the home folder
        monkeypatch.setenv(key, str(tmp_path / key.lower()))
    [logger] = make_loggers(plugins, ["wandb"], tmp_path)
    run = _logged(store)[0]
    logger.run_finished(run)
    logger.close()
    offline = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(offline) == 1 and list(offline[0].glob("*.wandb"))


def test_mlflow_file_store(store, tmp_path, plugins):
    pytest.importorskip("mlflow", reason="the mlflow extra is not installed")
    from mlflow.tracking import MlflowClient

    [logger] = make_loggers(plugins, ["mlflow"], tmp_path)
    run = _logged(store)[0]
    logger.run_finished(run)
    logger.close()
    client = MlflowClient(tracking_uri=(tmp_path / "mlruns").resolve().as_uri())
    [found] = client.search_runs([client.get_experiment_by_name("ssilbench").experiment_id])
    assert found.data.tags["ssilbench.run_id"] == run.run_id
    history = client.get_metric_history(found.info.run_id, "policy/loss")
    [curve] = [c for c in run.curves if c.tag == "policy/loss"]
    assert [m.step for m in history] == curve.steps


def test_a_log_dir_that_cannot_be_made_says_so(plugins, tmp_path):
    from ssilbench.errors import UsageError

    taken = tmp_path / "taken"
    taken.write_text("a file, not a folder")
    with pytest.raises(UsageError, match=r"Cannot create the log directory .*--log-dir DIR"):
        make_loggers(plugins, ["tensorboard"], taken / "logs")


def test_the_curves_section_escapes_names_and_averages_seeds():
    from ssilbench.leaderboard.curves import RunCurves, curves_section

    evil = "<script>alert(1)</script>"
    runs = [RunCurves(f"r{seed}", "label", evil, "maze:10x10", "16", seed,
                      {"policy/loss": ([1, 2], [1.0 + seed, 0.5 + seed])})
            for seed in (0, 1)]  # fmt: skip
    html = curves_section(runs)
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert html.count("<polyline") == 1  # the mean of the two seeds
    assert curves_section([]) == ""
