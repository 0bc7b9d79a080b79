"""The ``ssilbench`` command's package and the library under it: shared options declared
once, RunOptions' checks, executors made from settings, the store's stale-run rule, and
``run`` called as a library."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import ssilbench.cli
from ssilbench.errors import UnknownNameError, UsageError
from ssilbench.planning.options import ExecutorSettings, RunOptions
from ssilbench.planning.values import comma_list, parse_seeds

PACKAGE = Path(ssilbench.cli.__file__).parent
SWEEP = {"methods": "bc", "envs": "maze:10x10", "budgets": "16"}


def test_shared_options_are_declared_once():
    # app.py's group takes --data-root too, only to hand it to the commands' own option.
    source = "".join(path.read_text() for path in sorted(PACKAGE.glob("*.py"))
                     if path.name != "app.py")  # fmt: skip
    for flag in ("--results", "--data-root", "--sweep", "--quick", "--device", "--option"):
        declared = re.findall(rf'click\.option\(\s*(?:"-\w",\s*)?"{flag}"', source)
        assert len(declared) == 1, flag


def test_the_groups_data_root_is_every_commands_default(tmp_path):
    from click.testing import CliRunner

    given = tmp_path / "elsewhere"
    runner = CliRunner()
    listed = runner.invoke(ssilbench.cli.cli, ["--data-root", str(given), "list", "--json"])
    assert listed.exit_code == 0, listed.output
    assert json.loads(listed.output)["data_root"] == str(given)
    own = runner.invoke(ssilbench.cli.cli, ["--data-root", str(given), "list", "--json",
                                            "--data-root", str(tmp_path)])  # fmt: skip
    assert json.loads(own.output)["data_root"] == str(tmp_path)  # the command's own wins
    nested = ssilbench.cli.app.data_root_defaults(ssilbench.cli.cli, "D")
    assert nested["run"] == {"data_root": "D"} and nested["data"]["download"] == {"data_root": "D"}


def test_the_package_keeps_modules_small():
    for path in PACKAGE.glob("*.py"):
        assert len(path.read_text().splitlines()) <= 500, path.name


def test_every_command_is_registered():
    assert set(ssilbench.cli.cli.commands) == {
        "analyze", "cache", "curves", "data", "eval", "expert", "leaderboard", "list", "plan",
        "plot", "report", "results", "run", "status"}  # fmt: skip
    assert set(ssilbench.cli.cli.commands["plan"].params[i].name for i in range(3)) <= {
        "sweep_file", "quick", "blocks"}  # fmt: skip
    assert "dry_run" not in {p.name for p in ssilbench.cli.cli.commands["plan"].params}


def _options(tmp_path: Path, **flags) -> RunOptions:
    return RunOptions.of(results=tmp_path / "results", data_root=tmp_path / "data", **flags)


@pytest.mark.parametrize(
    "flags, message",
    [
        ({"sweep_file": "s.toml", "methods": "bc", "seeds": "0"},
         "--sweep takes methods, environments and budgets from the file; drop --method, "
         "--seeds."),
        ({**SWEEP, "quick": True}, "--quick needs --sweep FILE."),
        ({**SWEEP, "blocks": "a"}, "--blocks needs --sweep FILE."),
        ({"methods": "bc"},
         "Missing --env: give --method and --env (and --budgets where an environment family "
         "declares no paper protocol), or --sweep FILE."),
        ({**SWEEP, "steps": 0}, "--steps must be a positive integer, got 0."),
        ({**SWEEP, "steps_scale": 0.0},
         "--steps-scale must be a positive fraction of the default steps, e.g. 0.01; got 0.0."),
        ({**SWEEP, "steps": 10, "steps_scale": 0.5}, "Give --steps or --steps-scale, not both."),
    ],
)  # fmt: skip
def test_run_options_refuse_flags_that_do_not_fit(tmp_path, flags, message):
    with pytest.raises(UsageError) as info:
        _options(tmp_path, **flags)
    assert str(info.value) == message


@pytest.mark.parametrize(
    "settings, workers, message",
    [
        (ExecutorSettings(ray_address="h:1"), 1,
         "--ray-address only apply to --executor ray; drop it or choose that executor."),
        (ExecutorSettings("ray", slurm_time=5, slurm_partition="gpu"), 1,
         "--slurm-partition, --slurm-time only apply to --executor slurm; drop them or choose "
         "that executor."),
        (ExecutorSettings(gpus_per_run=1.0), 1, "only apply to --executor ray or slurm"),
        (ExecutorSettings("ray"), 2, "--workers is for --executor local; with ray"),
        (ExecutorSettings("slurm", gpus_per_run=0.5), 1,
         "--gpus-per-run must be a whole number for SLURM, got 0.5."),
    ],
)  # fmt: skip
def test_executor_flags_are_checked_with_the_run_options(tmp_path, settings, workers, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _options(tmp_path, **SWEEP, executor=settings, workers=workers)


def test_run_options_expand_paths_and_parse_the_lists():
    options = RunOptions.of(results="~/r", data_root="~/d", methods="bc,vm_idm,bc",
                         envs="maze:10x10", budgets="16,64", seeds="1,0,1")  # fmt: skip
    assert options.results == Path.home() / "r" and options.data_root == Path.home() / "d"
    sweep = options.sweep()
    assert sweep.methods == ["bc", "vm_idm"] and sweep.seeds == [1, 0]
    assert sweep.budgets == ["16", "64"] and sweep.envs == ["maze:10x10"]
    # Seeds not given: the family's paper protocol's, or 0 (planning/plan.py: experiment).
    assert RunOptions.of(results="r", data_root="d", **SWEEP).sweep().seeds is None


def test_list_values_name_their_flag():
    assert comma_list(" a, b ,a,", "method", "--method bc") == ["a", "b"]
    with pytest.raises(UsageError, match="The method list is empty: write e.g. --method bc."):
        comma_list(" , ", "method", "--method bc")
    with pytest.raises(UsageError, match="Seed 'x' is not an integer"):
        parse_seeds("0,x")


def test_make_executor_builds_what_the_settings_ask_for(tmp_path, monkeypatch):
    import shutil

    from ssilbench.runner.executors import RayExecutor, SlurmExecutor, make_executor

    # Executors check their prerequisites when they are made: a Ray head that answers, and
    # sbatch (here, as on a SLURM login node).
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    assert make_executor(ExecutorSettings(), tmp_path) is None
    with socket.socket() as head:
        head.bind(("127.0.0.1", 0))
        head.listen()
        address = f"127.0.0.1:{head.getsockname()[1]}"
        ray = make_executor(ExecutorSettings("ray", ray_address=address, gpus_per_run=0.5),
                            tmp_path)  # fmt: skip
        assert ray == RayExecutor(address, 1.0, 0.5)
    slurm = make_executor(
        ExecutorSettings("slurm", slurm_partition="gpu", gpus_per_run=1.0, cpus_per_run=2.5),
        tmp_path,
    )
    assert slurm == SlurmExecutor(tmp_path / "slurm", "gpu", 60, 1, 2, 64, None)


def test_a_run_left_by_a_gone_process_of_this_host_is_stale_for_store_and_status():
    from dataclasses import replace

    from ssilbench.cli.status import progress_lines
    from ssilbench.runs.records import RunRecord, is_stale
    from ssilbench.runs.spec import RunSpec

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    here = socket.gethostname()
    spec = RunSpec(method="bc", config={}, env="maze:10x10", options={}, budget="16", seed=0,
                   steps=60, eval_every=30)  # fmt: skip
    row = RunRecord.of(spec, status="running", host=here, pid=gone.pid)
    assert is_stale(row)
    assert not is_stale(replace(row, pid=os.getpid()))
    assert not is_stale(replace(row, host=f"not-{here}"))
    assert not is_stale(replace(row, status="done"))
    assert progress_lines([row], None, 0.0)[0] == "0 done, 0 running, 0 failed, 1 interrupted"


def test_status_shows_where_the_last_checkpoints_of_running_runs_are(tmp_path):
    from ssilbench.cli.status import progress_lines
    from ssilbench.runs.records import RunRecord
    from ssilbench.runs.spec import RunSpec
    from ssilbench.train.checkpoint import save_atomic

    specs = [RunSpec(method="idm_labeling", config={}, env="maze:10x10", options={},
                     budget="16", seed=seed, steps=60, eval_every=30)
             for seed in range(3)]  # fmt: skip
    rows = [RunRecord.of(s, status="running", host="elsewhere", pid=1, started_at=40.0)
            for s in specs]  # fmt: skip
    folder = tmp_path / "checkpoints"
    save_atomic({"used": 30}, folder / specs[0].run_id / "idm.pt")
    save_atomic({"used": 10}, folder / specs[0].run_id / "policy.pt")
    save_atomic({"used": 20}, folder / specs[1].run_id / "idm.pt")
    (folder / specs[1].run_id / "policy.pt").write_bytes(b"half a file")  # left out
    lines = progress_lines(rows, None, 100.0, folder)
    assert lines[1].startswith("  running    3  idm_labeling on maze:10x10  for 60 s")
    assert lines[2] == "           last checkpoints: idm 20-30, policy 10 (steps; 2 of 3 runs)"
    # Without checkpoints, or without the folder, the group is one line.
    assert len(progress_lines(rows, None, 100.0, tmp_path / "none")) == 2
    assert len(progress_lines(rows, None, 100.0)) == 2


def test_status_paces_stacked_bursts_from_their_start_and_shows_where_interrupted_runs_resume(
    tmp_path,
):
    from ssilbench.cli.status import progress_lines
    from ssilbench.runs.records import RunRecord
    from ssilbench.runs.spec import RunSpec
    from ssilbench.train.checkpoint import save_atomic

    def spec(seed: int, budget: str = "16") -> RunSpec:
        return RunSpec(method="bc", config={}, env="maze:50x50", options={}, budget=budget,
                       seed=seed, steps=200_000, eval_every=200_000)  # fmt: skip

    # Ten stacked runs started together at t=0 and finished within 2 s of t=400; at t=465,
    # 95 runs to go. Their finishing spacing (2 s) is no rate: 10 runs took 465 s.
    done = [RunRecord.of(spec(i), started_at=0.0, finished_at=400.0 + i / 5) for i in range(10)]
    stopped = [RunRecord.of(spec(i, "0.5"), status="interrupted", started_at=0.0)
               for i in range(95)]  # fmt: skip
    folder = tmp_path / "checkpoints"
    for i, steps in ((0, 25_000), (1, 30_000)):
        save_atomic({"used": steps}, folder / stopped[i].run_id / "policy.pt")
    lines = progress_lines(done + stopped, None, 465.0, folder)
    assert lines[0] == "10 done, 0 running, 0 failed, 95 interrupted"
    assert lines[1] == "  interrupted   95  bc on maze:50x50"
    assert lines[2] == "           last checkpoints: policy 25,000-30,000 (steps; 2 of 95 runs)"
    assert lines[3] == "about 74 min to go: 95 runs at the last hour's 1.3 runs/min"
    # Runs started over an hour ago are paced over the hour.
    old = [RunRecord.of(spec(i), started_at=-7200.0, finished_at=100.0 * i) for i in range(4)]
    assert progress_lines(old + stopped, None, 465.0)[-1] == (
        "about 1425 min to go: 95 runs at the last hour's 0.1 runs/min"
    )


def test_analysis_files_are_named_from_safe_characters():
    from ssilbench.studies.analysis_output import file_names

    assert file_names("procgen", "bc (arch=lc)", "idm.v2", "complexity") == (
        "procgen-bc_arch_lc_-vs-idm_v2",
        "complexity",
    )


def test_run_as_a_library_plans_then_executes(tmp_path, monkeypatch):
    from ssilbench.plugins import load_plugins
    from ssilbench.runner.launch import execute_run, prepare_run

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    plugins = load_plugins()
    with pytest.raises(UnknownNameError, match="Did you mean 'vm_idm'"):
        prepare_run(plugins, _options(tmp_path, **{**SWEEP, "methods": "vm_idn"}, dry_run=True))
    assert not (tmp_path / "results").exists()
    prepared = prepare_run(plugins, _options(tmp_path, **SWEEP, steps=60, threads=1))
    assert len(prepared.plan.runs) == 1 and prepared.executor is None
    report = execute_run(prepared, plugins, ())
    assert report.ok and report.done == 1
    again = execute_run(prepare_run(plugins, prepared.options), plugins, ())
    assert again.done == 0 and again.skipped == 1


@pytest.mark.parametrize("columns", [80, 200])
def test_list_never_cuts_a_word_at_any_width(tmp_path, monkeypatch, columns):
    from click.testing import CliRunner

    monkeypatch.setenv("COLUMNS", str(columns))
    shown = CliRunner().invoke(ssilbench.cli.cli, ["list", "--data-root", str(tmp_path)])
    assert shown.exit_code == 0, shown.output
    assert max(len(line) for line in shown.output.splitlines()) <= columns
    tokens = shown.output.split()  # lines may break between words, never inside one
    listed = CliRunner().invoke(ssilbench.cli.cli, ["list", "--json", "--data-root", str(tmp_path)])
    names = [entry["name"] for entry in json.loads(listed.output)["entries"]]
    for word in ("'ssilbench[procgen]'", str(tmp_path), *names):
        assert any(word in token for token in tokens), word
