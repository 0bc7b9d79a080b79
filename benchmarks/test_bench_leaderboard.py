"""Building the leaderboard from a large results store, and the per-run bookkeeping of the
local executor.

Targets (issue "sweeps beyond one machine"): the leaderboard of a 10,000-run store in under
5 s; scheduling plus the store write of one run under 1 s. Run with
``python -m pytest benchmarks/test_bench_leaderboard.py``.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from ssilbench.leaderboard.render import render
from ssilbench.leaderboard.table import build_table
from ssilbench.runs.records import RunOutcome, RunRecord
from ssilbench.runs.spec import RunSpec
from ssilbench.runs.store import ResultsStore

NORM = {"name": "paper", "low": 0.0, "high": 10.0}
# The shape of the paper's Procgen study: 4 methods x 16 games x 16 budgets x 10 seeds.
METHODS = ["bc", "idm_labeling", "lapo", "lapo_plus"]
GAMES = [f"game{i:02d}" for i in range(16)]
BUDGETS = [str(2**k) for k in range(4, 20)]
SEEDS = range(10)


def _spec(method: str, game: str, budget: str, seed: int) -> RunSpec:
    return RunSpec(method=method, env=f"procgen:{game}", budget=budget, seed=seed, steps=120000,
                   eval_every=500, config={}, options={})  # fmt: skip


@pytest.fixture(scope="module")
def big_store(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("store")
    rng = random.Random(0)
    records = []
    for method in METHODS:
        for game in GAMES:
            for budget in BUDGETS:
                for seed in SEEDS:
                    spec = _spec(method, game, budget, seed)
                    score = rng.random()
                    records.append(RunRecord.of(
                        spec, attempts=1, n_labeled=int(budget),
                        score=score, final_score=score, max_score=score,
                        report="max", normaliser=NORM, metrics={"return": 10 * score},
                        timeline=[{"step": 120000, "score": score}], stages={},
                        versions={"ssilbench": "0.1.0", "git": "abc", "torch": "2.13.0"},
                        device="cuda:0 (H100)",
                    ))  # fmt: skip
    with ResultsStore(directory) as store:
        store.put_rows(records)
    return directory


def _leaderboard(directory: Path, fmt: str) -> str:
    with ResultsStore(directory, create=False) as store:
        return render(build_table(store.rows("done")), fmt)


@pytest.mark.parametrize("fmt", ["md", "html"])
def test_leaderboard_of_10000_runs(benchmark, big_store, fmt):
    text = benchmark.pedantic(_leaderboard, args=(big_store, fmt), rounds=3, iterations=1)
    assert "procgen:all" in text


def test_store_write_per_run(benchmark, tmp_path):
    """The bookkeeping a local sweep does around each run: claim it, then record it."""
    outcome = RunOutcome(n_labeled=16, score=0.5, final_score=0.5, max_score=0.5,
                         report="final", normaliser=NORM, timeline=[{"step": 1, "score": 0.5}],
                         metrics={}, stages={})  # fmt: skip
    seeds = iter(range(10**9))
    with ResultsStore(tmp_path) as store:

        def one_run() -> None:
            spec = _spec("bc", "game00", "16", next(seeds))
            began = time.perf_counter()
            assert store.start(spec, "bc", spec.env, "cpu", {"ssilbench": "0.1.0"})
            store.finish(spec.run_id, outcome, time.perf_counter() - began)

        benchmark.pedantic(one_run, rounds=200, iterations=1)
