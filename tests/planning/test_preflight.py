"""Before a sweep trains: every missing dataset, extra and simulator listed in one message
(exit 2, nothing recorded), the cost estimate and the question a terminal is asked (--yes
skips it; no answers start nothing), and the thread count ``--threads auto`` chooses."""

from __future__ import annotations

import importlib
import io
import json
import sqlite3
import textwrap
from pathlib import Path

import pytest

from ssilbench.errors import DatasetError, PluginError, PreflightError
from ssilbench.testing import cli_exit_code

NEEDY_PLUGIN = """
from pathlib import Path

from ssilbench.api import DatasetError, EnvSpec, Environment, Normaliser, PluginError, Task
from ssilbench.api import hookimpl


class NeedyTask(Task):
    def __init__(self, name, options):
        self.name = name
        self.spec = EnvSpec(env_id=f"needy:{name}", obs_shape=(3,), obs_dtype="float32",
                            obs_kind="vector", num_actions=2, horizon=5, eval_episodes=1,
                            eval_every=10, default_steps=10, default_arch="lc",
                            normaliser=Normaliser(name="raw", low=0.0, high=1.0))

    def dataset(self, root):
        from ssilbench.kit import TransitionStore
        path = Path(root) / "needy" / self.name
        if not path.exists():
            raise DatasetError(f"No needy:{self.name} dataset at {path}: import it with "
                               f"'ssilbench data import needy --from DIR --tasks {self.name}'.")
        return TransitionStore.open(path)

    def check_rollouts(self):
        raise PluginError("The needy environments need the 'needysim' package: install it "
                          "with pip install 'needy[sim]'.")

    def make_vec_env(self, num_envs, seed):
        raise NotImplementedError


class NeedyEnvironment(Environment):
    description = "an environment whose data and simulator are never here"
    task_class = NeedyTask
    downloads = "needy_plugin:downloads.toml"

    def tasks(self):
        return ["alpha", "beta", "gamma"]


@hookimpl
def ssilbench_register_environments(registry):
    registry.add("needy", "needy_plugin:NeedyEnvironment", "data and simulator missing")
"""

NEEDY_MANIFEST = """
format = "ssilbench.downloads"
version = 1
family = "needy"
title = "Needy data"
[[files]]
name = "alpha.zip"
url = "https://example.org/alpha.zip"
size = 2000000000
tasks = ["alpha"]
[[files]]
name = "beta.zip"
url = "https://example.org/beta.zip"
size = 500000000
tasks = ["beta"]
[[files]]
name = "gamma.zip"
url = "https://example.org/gamma.zip"
tasks = ["gamma"]
"""

SWEEP = ["--method", "bc", "--env", "maze:10x10", "--budgets", "16", "--steps", "60", "-q"]


@pytest.fixture
def needy(tmp_path, monkeypatch):
    """The plugin package ``needy_plugin`` (with a download manifest) importable here."""
    package = tmp_path / "modules" / "needy_plugin"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(textwrap.dedent(NEEDY_PLUGIN))
    (package / "downloads.toml").write_text(NEEDY_MANIFEST)
    monkeypatch.syspath_prepend(str(tmp_path / "modules"))
    monkeypatch.delenv("SSILBENCH_PLUGINS", raising=False)
    return tmp_path


def _rows(results: Path) -> list[tuple]:
    path = results / "results.sqlite"
    if not path.exists():
        return []
    db = sqlite3.connect(path)
    try:
        return db.execute("SELECT run_id, status, finished_at FROM runs ORDER BY run_id").fetchall()
    finally:
        db.close()


# --- preflight ----------------------------------------------------------------------------


def test_every_missing_piece_is_listed_in_one_message(needy, capsys):
    """Three tasks without data, their simulator missing, and a maze budget too large: one
    message with all of them, exit 2, and nothing recorded in the store already there."""
    results, data = needy / "results", needy / "data"
    common = ["--results", str(results), "--data-root", str(data)]
    assert cli_exit_code("run", *SWEEP, *common) == 0
    before = _rows(results)
    capsys.readouterr()
    code = cli_exit_code("-p", "needy_plugin", "run", "--method", "bc",
                         "--env", "needy:all,maze:10x10", "--budgets", "16,5000",
                         "--steps", "60", "-q", *common)  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("error: The sweep cannot start"), err
    assert "(1 simulator or extra, 3 datasets, 1 label budget)" in err
    # The simulator's message once, for the three tasks that share it.
    assert err.count("need the 'needysim' package") == 1
    assert "needy:alpha, needy:beta, needy:gamma: The needy environments need" in err
    # The three datasets under one family line, the download with its known sizes, and the
    # plugin's own message once for the tasks whose messages differ only by the task.
    assert "needy: 3 tasks (alpha, beta, gamma)" in err
    assert f"download them: ssilbench data download needy --data-root {data}" in err
    assert "3 files, 2.5 GB + 1 of unpublished size" in err
    assert "needy:alpha (the other 2 alike): No needy:alpha dataset" in err
    assert "No needy:beta dataset" not in err
    assert "maze:10x10: Label budget N_L=5000 is larger than the dataset" in err
    assert "Traceback" not in err
    assert _rows(results) == before


def test_the_preflight_error_keeps_each_problem(needy, plugins):
    from ssilbench.planning.plan import build_plan
    from ssilbench.plugins import load_plugins
    from ssilbench.runs.spec import Sweep

    loaded = load_plugins(("needy_plugin",))
    sweep = Sweep(methods=["bc"], envs=["needy:alpha", "needy:beta"], budgets=["1"], seeds=[0])
    with pytest.raises(PreflightError) as caught:
        build_plan(loaded, sweep, needy / "data")
    kinds = [type(p) for p in caught.value.problems]
    assert kinds == [PluginError, PluginError, DatasetError, DatasetError]
    # Only the tasks asked for are downloaded: --games names them.
    assert "ssilbench data download needy --games alpha,beta --data-root" in str(caught.value)
    # Without rollouts no simulator is needed; two datasets remain.
    no_sim = sweep.model_copy(update={"rollouts": False})
    with pytest.raises(PreflightError, match=r"\(2 datasets\)"):
        build_plan(loaded, no_sim, needy / "data")
    # One problem alone keeps its own error and message.
    one = no_sim.model_copy(update={"envs": ["needy:gamma"]})
    with pytest.raises(DatasetError, match="No needy:gamma dataset"):
        build_plan(loaded, one, needy / "data")


def test_procgen_all_without_data_lists_every_game_at_once(tmp_path, capsys):
    code = cli_exit_code("run", "--method", "bc", "--env", "procgen:all", "--budgets", "16",
                         "--no-rollouts", "--results", str(tmp_path / "r"),
                         "--data-root", str(tmp_path / "d"))  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2, err
    assert "(16 datasets)" in err
    assert "procgen: 16 tasks (bigfish, bossfight, caveflyer, chaser, climber, coinrun" in err
    assert "procgen:bigfish (the other 15 alike): No procgen:bigfish dataset" in err
    assert "ssilbench data import procgen --from DIR" in err
    assert _rows(tmp_path / "r") == []


def test_a_refused_sweep_leaves_no_results_folder_behind(needy, capsys):
    """Data missing: exit 2, and the results folders the command made for the sweep (nested,
    here) are gone again; a folder that was already there stays, with what it holds."""
    nested = needy / "new" / "results"
    args = ["-p", "needy_plugin", "run", "--method", "bc", "--env", "needy:alpha", "--budgets",
            "16", "--steps", "60", "-q", "--data-root", str(needy / "data")]  # fmt: skip
    assert cli_exit_code(*args, "--results", str(nested)) == 2
    assert "No needy:alpha dataset" in capsys.readouterr().err
    assert not (needy / "new").exists()
    kept = needy / "kept"
    kept.mkdir()
    (kept / "notes.txt").write_text("mine")
    assert cli_exit_code(*args, "--results", str(kept / "results")) == 2
    assert sorted(p.name for p in kept.iterdir()) == ["notes.txt"]


def test_a_dry_run_lists_missing_data_and_writes_nothing(needy, capsys):
    data = needy / "data"
    code = cli_exit_code("-p", "needy_plugin", "run", "--method", "bc", "--env",
                         "needy:alpha,needy:beta,maze:10x10", "--budgets", "1", "--no-rollouts",
                         "--dry-run", "--results", str(needy / "r"),
                         "--data-root", str(data))  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    assert "Datasets a run builds first: maze:10x10." in out
    assert "Datasets a run cannot make" in out and "needy: 2 tasks (alpha, beta)" in out
    assert not data.exists() and not (needy / "r").exists()


# --- the estimate and the question --------------------------------------------------------


@pytest.fixture
def asking(monkeypatch):
    """A terminal that answers ``answer``, and every sweep long enough to ask about."""
    from ssilbench.runner import launch

    run_cli = importlib.import_module("ssilbench.cli.run")  # the module, not the command

    monkeypatch.setattr(launch, "CONFIRM_OVER_S", 0.0)
    monkeypatch.setattr(launch, "PROBE_SHARE", 1e9)  # measure even for these tiny sweeps

    def answer(text: str | None) -> None:
        monkeypatch.setattr(run_cli, "interactive", lambda: text is not None)
        monkeypatch.setattr("sys.stdin", io.StringIO(text or ""))

    return answer


def test_answering_no_starts_nothing_and_loses_nothing(tmp_path, capsys, asking):
    common = ["--results", str(tmp_path / "r"), "--data-root", str(tmp_path / "d")]
    assert cli_exit_code("run", *SWEEP, "--yes", *common) == 0
    before = _rows(tmp_path / "r")
    assert len(before) == 1
    asking("n\n")
    capsys.readouterr()
    code = cli_exit_code("run", *SWEEP, "--seeds", "0,1", *common)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "Stages to train:" in captured.err and "Estimated compute: training" in captured.err
    assert "Start 1 run(s)? [y/N]" in captured.out + captured.err
    assert "Not started: nothing was run or recorded." in captured.err
    assert _rows(tmp_path / "r") == before
    # The step times measured for the estimate are kept for the next one.
    assert (tmp_path / "r" / "timings.json").is_file()

    asking("y\n")
    assert cli_exit_code("run", *SWEEP, "--seeds", "0,1", *common) == 0
    assert len(_rows(tmp_path / "r")) == 2


def test_yes_skips_the_question(tmp_path, capsys, asking):
    asking("")  # a terminal with nothing to read: a question would abort with 130
    common = ["--results", str(tmp_path / "r"), "--data-root", str(tmp_path / "d")]
    assert cli_exit_code("run", *SWEEP, "-y", *common) == 0
    err = capsys.readouterr().err
    assert "[y/N]" not in err and len(_rows(tmp_path / "r")) == 1
    assert not (tmp_path / "r" / "timings.json").exists()  # no estimate was made


def test_without_a_terminal_the_sweep_starts(tmp_path, capsys, asking):
    """No TTY (CI, a batch job): nothing is asked and nothing measured; with step times kept
    by 'plan' the estimate is printed on one line before the sweep starts."""
    common = ["--results", str(tmp_path / "r"), "--data-root", str(tmp_path / "d")]
    asking(None)
    assert cli_exit_code("run", *SWEEP, *common) == 0
    err = capsys.readouterr().err
    assert "[y/N]" not in err and "starting (no terminal" not in err
    assert not (tmp_path / "r" / "timings.json").exists()
    assert cli_exit_code("plan", "--measure", *SWEEP, "--seeds", "1", *common) == 0
    capsys.readouterr()
    assert cli_exit_code("run", *SWEEP, "--seeds", "1", *common) == 0
    err = capsys.readouterr().err
    assert "1 run(s) to train on cpu" in err and "starting (no terminal to ask)" in err
    assert len(_rows(tmp_path / "r")) == 2


def test_the_estimate_is_skipped_where_measuring_would_cost_too_much(tmp_path, plugins):
    from ssilbench.planning.options import RunOptions
    from ssilbench.runner.launch import estimate_run, prepare_run

    options = RunOptions.of(results=tmp_path / "r", data_root=tmp_path / "d", methods="bc",
                         envs="maze:10x10", budgets="16", steps=60)  # fmt: skip
    prepared = prepare_run(plugins, options)
    # 60 steps to train, 4 to measure: more than 5% of the sweep.
    assert estimate_run(prepared, plugins, measure=True) is None
    assert not (tmp_path / "r" / "timings.json").exists()


# --- threads ------------------------------------------------------------------------------


def _choice(plugins, tmp_path, monkeypatch, cores=8, **given):
    from ssilbench.planning.options import RunOptions
    from ssilbench.planning.plan import resolve_plan
    from ssilbench.runner import launch

    monkeypatch.setattr(launch, "_usable_cores", lambda: cores)
    options = RunOptions.of(results=tmp_path, data_root=tmp_path, budgets="16", dry_run=True,
                         **{"methods": "bc", "envs": "maze:10x10", **given})  # fmt: skip
    import torch

    plan = resolve_plan(plugins, options.sweep())
    return launch.choose_threads(plan, plugins, options, torch.device("cpu"))


def test_auto_threads_follow_the_documented_rule(plugins, tmp_path, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    small = _choice(plugins, tmp_path, monkeypatch)
    assert small.threads == 1 and "small networks" in small.reason and "mlp5" in small.reason
    large = _choice(plugins, tmp_path, monkeypatch, envs="procgen:bigfish")
    assert large.threads == 8 and "impala on procgen:bigfish" in large.reason
    shared = _choice(plugins, tmp_path, monkeypatch, envs="procgen:bigfish", workers=3)
    assert shared.threads == 2 and "cores / 3 workers" in shared.reason
    # An image maze with the 5-layer CNN at 50x50 is large; at 10x10 it is small.
    big_maze = _choice(plugins, tmp_path, monkeypatch, envs="maze:50x50",
                       options=("state=image",), config=("arch=cnn5",))  # fmt: skip
    assert big_maze.threads == 8
    # A method whose networks cannot be counted: its observations decide (LAPO on Procgen).
    lapo = _choice(plugins, tmp_path, monkeypatch, methods="lapo", envs="procgen:bigfish")
    assert lapo.threads == 8 and "observations (12288 numbers)" in lapo.reason
    assert _choice(plugins, tmp_path, monkeypatch, threads=3).threads == 3
    assert _choice(plugins, tmp_path, monkeypatch, threads="torch") is None
    assert _choice(plugins, tmp_path, monkeypatch, threads="torch", workers=2).threads == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "5")
    assert _choice(plugins, tmp_path, monkeypatch, envs="procgen:bigfish").threads == 5


def test_forward_flops_count_linear_and_convolution_layers(plugins):
    import torch

    from ssilbench.runner.launch import SMALL_FLOPS, forward_flops

    state = torch.random.get_rng_state()
    # mlp5 on 4 inputs: 4x100 + 4 x 100x100 + 100x4 multiply-adds, 2 FLOPs each.
    assert forward_flops(plugins, "mlp5", (4,), 4) == 2 * (400 + 4 * 10_000 + 400)
    assert forward_flops(plugins, "impala", (3, 64, 64), 15) > 50 * SMALL_FLOPS
    assert forward_flops(plugins, "uva", (3, 64, 64), 15) is None  # unified: not sized alone
    assert torch.equal(torch.random.get_rng_state(), state)  # planning changes no run


def test_threads_are_checked_and_recorded(cli):
    """The thread count a run trained with is what its device column says, also when
    workers trained it (this process then sets the same count)."""
    from ssilbench.testing import run_records

    bad = cli.run(*SWEEP, "--threads", "many")
    assert bad.returncode == 2 and "error: Invalid value for '--threads'" in bad.stderr
    done = cli.run("--method", "bc", "--env", "maze:10x10", "--budgets", "16,32", "--steps",
                   "60", "--workers", "2", "--threads", "2", "-q")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert {r["device"].split(", ")[-1] for r in run_records(cli.results)} == {"2 threads)"}


# --- list and the error prefix --------------------------------------------------------------


def test_list_shows_tasks_extras_and_datasets(cli, monkeypatch):
    listing = cli("list", "--json", "--data-root", str(cli.data))
    assert listing.returncode == 0, listing.stderr
    shown = json.loads(listing.stdout)
    envs = {e["name"]: e for e in shown["entries"] if e["kind"] == "environment"}
    procgen, maze = envs["procgen"], envs["maze"]
    assert len(procgen["tasks"]) == 16 and procgen["tasks"][0] == "bigfish"
    assert procgen["extra"]["extra"] == "procgen"
    assert procgen["extra"]["install"] == "pip install 'ssilbench[procgen]'"
    assert {d["status"] for d in procgen["datasets"].values()} == {"absent"}
    assert "ssilbench data import procgen" in procgen["datasets"]["bigfish"]["message"]
    assert maze["extra"] is None and maze["tasks"] == ["10x10", "20x20", "50x50"]
    assert maze["datasets"]["10x10"] == {"status": "built on first use"}
    assert {e["extra"] for e in shown["extras"]} >= {"procgen", "pusht", "libero", "plot"}
    assert not cli.data.exists()  # listing builds nothing

    assert cli("data", "build", "maze:10x10", "--data-root", str(cli.data)).returncode == 0
    monkeypatch.setenv("COLUMNS", "250")  # rich wraps cells to the terminal's width
    text = cli("list", "--data-root", str(cli.data), timeout=120)
    assert text.returncode == 0
    assert "16: bigfish, bossfight, caveflyer, chaser, …" in text.stdout
    assert "[procgen]" in text.stdout and "ssilbench[pusht]" in text.stdout
    assert "1 of 3 present (10x10), 2 built on first use" in text.stdout


def test_extras_report_what_is_missing(monkeypatch):
    from ssilbench.cli import listing

    requires = [
        "torch>=2.2",
        'gym-pusht==0.1.8; extra == "pusht"',
        'zarr>=2.18; extra == "pusht"',
        'oldsim==1; python_version < "3.0" and extra == "sim"',
        'pytest; extra == "dev"',
    ]
    monkeypatch.setattr(listing.metadata, "requires", lambda dist: requires)
    monkeypatch.setattr(listing, "_declared_extras", lambda dist: ["pusht", "sim", "uva"])
    monkeypatch.setattr(listing, "_installed", lambda name: name != "zarr")
    extras = {e.name: e for e in listing.distribution_extras("ssilbench")}
    assert set(extras) == {"pusht", "sim", "uva"}  # dev is for working on it, not using it
    assert extras["pusht"].missing == ["zarr"] and not extras["pusht"].installed
    assert extras["sim"].packages == [] and extras["sim"].installed  # not for this Python
    assert extras["uva"].installed and extras["uva"].install == "pip install 'ssilbench[uva]'"


def test_every_refusal_starts_with_the_same_prefix(tmp_path, capsys):
    unknown = ["run", "--method", "bcc", "--env", "maze:10x10", "--budgets", "16", "--results",
               str(tmp_path / "r"), "--data-root", str(tmp_path / "d")]  # fmt: skip
    for args in (["run", "--workers", "0"], ["nosuchcommand"], unknown):
        assert cli_exit_code(*args) == 2
        err = capsys.readouterr().err
        assert "Error:" not in err and err.splitlines()[-1].startswith("error: "), err


def test_a_sweep_file_lists_every_missing_piece_too(tmp_path, capsys):
    sweep = tmp_path / "games.toml"
    sweep.write_text(
        textwrap.dedent("""
        name = "games"
        [[block]]
        methods = ["bc"]
        envs = ["procgen:bigfish", "procgen:coinrun"]
        budgets = [16]
        seeds = [0]
        steps = 10
        rollouts = false
    """)
    )
    code = cli_exit_code("run", "--sweep", str(sweep), "--results", str(tmp_path / "r"),
                         "--data-root", str(tmp_path / "d"))  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"error: Sweep file {sweep}: The sweep cannot start" in err
    assert "procgen: 2 tasks (bigfish, coinrun)" in err and "Traceback" not in err


def test_a_run_is_the_same_after_the_estimate(tmp_path, capsys, asking):
    """Measuring step times for the estimate trains in this process; the runs after it give
    the same numbers as runs started with --yes (no estimate)."""
    from ssilbench.testing import run_records

    def results(folder: str, *extra: str) -> list[tuple]:
        common = ["--results", str(tmp_path / folder), "--data-root", str(tmp_path / "d")]
        assert cli_exit_code("run", *SWEEP, "--seeds", "3", *extra, *common) == 0
        return [(r["run_id"], r["metrics"], r["timeline"]) for r in run_records(tmp_path / folder)]

    asking("y\n")
    estimated = results("asked")
    assert "Start 1 run(s)? [y/N]" in capsys.readouterr().err
    assert (tmp_path / "asked" / "timings.json").is_file()  # it did measure
    assert estimated == results("yes", "--yes")
