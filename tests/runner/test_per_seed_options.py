"""Options that follow the run's seed (``Environment.per_seed_options``): the grid's
``data_seed``, so that each seed of the stochastic-expert study draws its own dataset, as the
paper's code does. Planned per seed, stacked as one setup, pooled as one leaderboard cell."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ssilbench.leaderboard.table import build_table
from ssilbench.planning.plan import build_plan, resolve, resolve_plan
from ssilbench.runner.schedule import groups
from ssilbench.runner.sweep import run_sweep
from ssilbench.runs.spec import Sweep
from ssilbench.runs.store import ResultsStore
from ssilbench.testing import cli_exit_code

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

CPU = torch.device("cpu")
CONFIG = {"arch": "mlp5", "standardise": "all"}


def grid_sweep(seeds: list[int], options: dict | None = None, steps: int = 60) -> Sweep:
    options = {"p_right": 0.5, **(options or {})}
    return Sweep(methods=["bc"], envs=["grid:20x20"], budgets=["0.1"], seeds=seeds, steps=steps,
                 eval_every=steps, config=CONFIG, options=options)  # fmt: skip


def test_each_seed_takes_its_own_dataset_unless_the_sweep_fixes_one(plugins):
    per_seed = resolve(plugins, grid_sweep([0, 1, 2]))
    assert [s.options["data_seed"] for s in per_seed] == [0, 1, 2]
    assert all(s.seeded == ["data_seed"] for s in per_seed)
    assert "seeded" in per_seed[0].document()

    fixed = resolve(plugins, grid_sweep([0, 1, 2], {"data_seed": 0}))
    assert [s.options["data_seed"] for s in fixed] == [0, 0, 0]
    assert all(s.seeded == [] for s in fixed)
    # An empty 'seeded' is left out of the spec: runs of every other family keep their ids.
    assert "seeded" not in fixed[0].document()
    # Seed 0 draws the same data either way, but the two setups are different experiments.
    assert per_seed[0].options == fixed[0].options and per_seed[0].run_id != fixed[0].run_id
    # What a setup's runs share: everything but the options that follow the seed.
    assert len({s.cohort for s in per_seed}) == 1
    assert per_seed[1].shared_options() == {
        k: v for k, v in per_seed[1].options.items() if k != "data_seed"
    }


def test_the_seeds_of_one_setup_stack_into_one_unit(plugins):
    plan = resolve_plan(plugins, grid_sweep([0, 1, 2]))
    assert groups(plan, list(range(len(plan.runs)))) == [[0, 1, 2]]
    assert len({plan.task_key(s) for s in plan.runs}) == 3  # three datasets


def recorded(plugins, data: Path, folder: Path, sweep: Sweep, stack: bool) -> dict:
    with ResultsStore(folder) as store:
        summary = run_sweep(build_plan(plugins, sweep, data), plugins, store, CPU, stack=stack)
        assert summary.ok, summary
        rows = store.rows("done")
    return {r.seed: r for r in rows}


def test_per_seed_runs_are_the_same_stacked_or_alone_and_pool_into_one_cell(plugins, tmp_path):
    data = tmp_path / "data"
    sweep = grid_sweep([0, 1, 2])
    stacked = recorded(plugins, data, tmp_path / "stacked", sweep, stack=True)
    alone = recorded(plugins, data, tmp_path / "alone", sweep, stack=False)
    for seed in (0, 1, 2):
        assert stacked[seed].run_id == alone[seed].run_id
        assert stacked[seed].metrics == alone[seed].metrics
        assert stacked[seed].timeline == alone[seed].timeline
    # Three datasets, one environment label and one cell of three seeds.
    assert len({r.spec.data for r in stacked.values()}) == 3
    assert {r.env_label for r in stacked.values()} == {"grid:20x20"}
    [table] = build_table(stacked.values(), metric="score").tables
    [row] = table.cells.values()
    assert row["0.1"].n == 3


def test_a_dry_run_counts_the_datasets_a_task_builds(tmp_path, capsys):
    code = cli_exit_code("run", "--method", "bc", "--env", "grid:20x20", "--budgets", "0.1",
                         "--seeds", "0,1,2", "--no-rollouts", "--dry-run",
                         "--results", str(tmp_path / "r"),
                         "--data-root", str(tmp_path / "d"))  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    assert "Datasets a run builds first: grid:20x20 (3 datasets)." in out


def maze_sweep(options: dict) -> Sweep:
    return Sweep(methods=["bc"], envs=["maze:10x10"], budgets=["0.5"], seeds=[0, 1], steps=60,
                 eval_every=60, config={"arch": "lc"},
                 options={"state": "position", "data": "states", **options})  # fmt: skip


def test_an_option_follows_the_seed_only_where_the_family_says_it_matters(plugins):
    # The maze's no-op draws follow the seed with no-ops only (the paper's code draws each
    # seed's no-ops); a maze without them plans exactly as before: no 'seeded', no option.
    noisy = resolve(plugins, maze_sweep({"noop": 0.5}))
    assert [s.options["noop_seed"] for s in noisy] == [0, 1]
    assert all(s.seeded == ["noop_seed"] for s in noisy)
    for options in ({}, {"noop": 0.5, "noop_seed": "maze"}):
        plain = resolve(plugins, maze_sweep(options))
        assert all(s.seeded == [] and "noop_seed" not in s.options for s in plain)
    fixed = resolve(plugins, maze_sweep({"noop": 0.5, "noop_seed": 3}))
    assert [s.options["noop_seed"] for s in fixed] == [3, 3] and fixed[0].seeded == []


def test_a_bad_noop_seed_exits_2_naming_the_option(tmp_path, capsys):
    code = cli_exit_code("run", "--method", "bc", "--env", "maze:10x10", "--budgets", "4",
                         "-o", "noop=0.5", "-o", "noop_seed=-1", "--no-rollouts", "--dry-run",
                         "--results", str(tmp_path / "r"),
                         "--data-root", str(tmp_path / "d"))  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    # One problem in the option's own type, not one per type pydantic tried.
    assert "'noop_seed' takes maze | integer: Input should be greater than or equal to 0" in err
    assert "literal" not in err and err.count("noop_seed") == 2  # the problem and the key list
    assert not (tmp_path / "r").exists()
