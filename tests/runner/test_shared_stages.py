"""Shared stages across a sweep: trained once by concurrent workers, scheduled first, and
shown (with their cost) by ``run --dry-run`` and ``plan`` before anything runs."""

from __future__ import annotations

import json
import sqlite3

from ssilbench.planning.plan import build_plan
from ssilbench.plugins import load_plugins
from ssilbench.runner.schedule import leaders_first
from ssilbench.runs.spec import Sweep
from ssilbench.train.memo import StageCache

PLUGINS = load_plugins()
LAPO = ["--method", "lapo,lapo_plus", "--env", "maze:10x10", "-o", "state=image",
        "-c", "size=small", "--steps", "60"]  # fmt: skip


def _tree(path) -> dict[str, int]:
    """Every file under ``path`` with its size and modification time (to see writes)."""
    if not path.exists():
        return {}
    return {
        str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in path.rglob("*") if p.is_file()
    }


def _stage_rows(text: str) -> dict[tuple[str, str], list[str]]:
    """(method, stage) -> [runs, trainings, cached] from the dry run's table."""
    rows = [line.split() for line in text.splitlines() if line.startswith("  lapo")]
    return {(r[0], r[1]): r[3:6] for r in rows}


def test_shared_stages_are_scheduled_before_the_runs_that_reuse_them(tmp_path):
    sweep = Sweep(methods=["lapo_plus", "bc", "lapo"], envs=["maze:10x10"],
                  budgets=["16", "64"], seeds=[0, 1], steps=60, options={"state": "image"},
                  config={"size": "small"})  # fmt: skip
    plan = build_plan(PLUGINS, sweep, tmp_path / "data")
    units = [[i] for i in range(len(plan.runs))]
    ordered = [plan.runs[u[0]] for u in leaders_first(plan, units)]
    # the first unit trains the world model every lapo and lapo_plus run shares; the first
    # lapo run trains the game's latent policy (one per game, as the paper's runs); then the
    # others
    leaders = [(s.method, s.seed, s.budget) for s in ordered[:2]]
    assert leaders == [("lapo_plus", 0, "16"), ("lapo", 0, "16")]
    assert sorted(map(id, ordered)) == sorted(map(id, plan.runs))
    # one latent policy per seed (latent_policy_seed=null): the first lapo run of each seed
    per_seed = sweep.model_copy(update={"config": {"size": "small",
                                                   "lapo.latent_policy_seed": None}})  # fmt: skip
    plan = build_plan(PLUGINS, per_seed, tmp_path / "data")
    ordered = [plan.runs[u[0]] for u in leaders_first(plan, units)]
    leaders = [(s.method, s.seed, s.budget) for s in ordered[:3]]
    assert leaders == [("lapo_plus", 0, "16"), ("lapo", 0, "16"), ("lapo", 1, "16")]


def test_two_workers_train_the_world_model_once(cli):
    done = cli.run(*LAPO, "--budgets", "64", "--seeds", "0", "--workers", "2", "--no-rollouts",
                   "-q")  # fmt: skip
    assert done.returncode == 0, done.stderr
    entries = StageCache(cli.results / "cache").entries()
    assert [e.meta["stage"] for e in entries].count("world_model") == 1
    db = sqlite3.connect(cli.results / "results.sqlite")
    stages = [json.loads(row[0]) for row in db.execute("SELECT stages FROM runs")]
    db.close()
    reused = ["reused" in s["world_model"] for s in stages]
    assert sorted(reused) == [False, True], stages
    listing = cli("cache", "ls", "--results", str(cli.results))
    assert listing.stdout.count("world_model") == 1, listing.stdout


def test_a_dry_run_prints_the_plan_and_writes_nothing(cli):
    before = _tree(cli.tmp)
    shown = cli.run("--method", "bc,idm_labeling", "--env", "maze:10x10", "--budgets", "16,64",
                    "--seeds", "0,1", "--dry-run")  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert _tree(cli.tmp) == before  # no dataset built, no store, no cache, no timings
    assert "8 run(s): 0 already recorded, 8 to run" in shown.stdout
    assert "Datasets a run builds first: maze:10x10." in shown.stdout
    for stage in ("bc            policy", "idm_labeling  idm", "idm_labeling  policy"):
        assert stage in shown.stdout
    # nothing kept, nothing shipped (tests/conftest.py), nothing measured: no training estimate
    assert "Estimated compute: training" not in shown.stdout
    assert (
        "No step times kept or shipped for this device for: bc, idm_labeling (add "
        "--measure to measure them here"
    ) in shown.stdout


def test_a_dry_run_counts_shared_stages_once_and_sees_them_cached(cli):
    args = [*LAPO, "--budgets", "16,64", "--seeds", "0,1", "--no-rollouts"]
    planned = cli("plan", *args, "--measure", "--results", str(cli.results), "--data-root",
                  str(cli.data))  # fmt: skip
    assert planned.returncode == 0, planned.stderr
    rows = _stage_rows(planned.stdout)
    # 8 runs; one world model for all of them, one latent policy per seed
    assert rows["lapo", "world_model*"] == ["4", "1", "0"]
    assert rows["lapo_plus", "world_model*"] == ["4", "0", "0"]  # lapo's first run trains it
    assert rows["lapo", "latent_policy*"] == ["4", "1", "0"]
    assert rows["lapo_plus", "policy"] == ["4", "4", "0"]
    assert (cli.results / "timings.json").is_file()  # plan keeps what it measured
    assert cli.run(*LAPO, "--budgets", "16", "--seeds", "0", "--no-rollouts", "-q").returncode == 0
    again = cli.run(*args, "--dry-run")
    assert "2 already recorded, 6 to run" in again.stdout
    rows = _stage_rows(again.stdout)
    assert rows["lapo", "world_model*"] == ["3", "1", "1"]  # trained: in the cache
    assert rows["lapo", "latent_policy*"] == ["3", "1", "1"]  # the game's: trained, cached


def test_plan_takes_the_arguments_of_run_but_is_always_a_dry_run(cli):
    shown = cli("plan", "--help")
    assert shown.returncode == 0
    assert "--dry-run" not in shown.stdout and "--budgets" in shown.stdout


def test_a_dry_run_finds_recorded_runs_by_design_where_their_dataset_is_not_built_yet(cli):
    # A store moved to another machine (or a data root cleared) holds runs whose datasets
    # are not built there yet: the plan must not count them as runs to train.
    args = ["--method", "bc", "--env", "maze:10x10", "--budgets", "16,64", "--seeds", "0",
            "--steps", "20", "--no-rollouts"]  # fmt: skip
    assert cli.run(*args[:5], "16", *args[6:], "-q").returncode == 0
    elsewhere = cli.tmp / "elsewhere"
    shown = cli("plan", *args, "--results", str(cli.results), "--data-root", str(elsewhere))
    assert shown.returncode == 0, shown.stderr
    assert "2 run(s): 1 already recorded, 1 to run" in shown.stdout
    assert "1 of the recorded runs are matched by design" in shown.stdout
    assert not elsewhere.exists()  # still a dry run: nothing built
    # With the dataset built, the run ids match and no run is matched by design alone.
    here = cli("plan", *args, "--results", str(cli.results), "--data-root", str(cli.data))
    assert "2 run(s): 1 already recorded, 1 to run" in here.stdout
    assert "matched by design" not in here.stdout
