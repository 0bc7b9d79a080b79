"""The ``notebook`` kind of the docs' checked examples: a Python session (``>>>`` lines and
what they print) run as a doctest in a folder whose ``results`` store holds the guide's
example runs, recorded through the store's own API."""

from __future__ import annotations

import doctest
from pathlib import Path

import pytest

from ssilbench.runs.records import RunOutcome
from ssilbench.runs.spec import RunSpec
from ssilbench.runs.store import ResultsStore

# The guide's example store: maze:10x10, two methods, N_L = 16 and 64, seeds 0 and 1 (the
# scores by seed), and one failed run.
SCORES = {("bc", "16"): [0.25, 0.5], ("bc", "64"): [0.5, 0.75],
          ("idm_labeling", "16"): [0.5, 0.75], ("idm_labeling", "64"): [0.75, 1.0]}  # fmt: skip
NORM = {"name": "maze", "low": 0.0, "high": 1.0, "source": "optimal path"}


def _spec(method: str, budget: str, seed: int) -> RunSpec:
    return RunSpec(method=method, config={}, env="maze:10x10", options={}, budget=budget,
                   seed=seed, steps=100, eval_every=50)  # fmt: skip


def fill_example_store(directory: Path) -> None:
    with ResultsStore(directory) as store:
        for (method, budget), scores in SCORES.items():
            for seed, score in enumerate(scores):
                spec = _spec(method, budget, seed)
                store.start(spec, method, spec.env, "cpu", {})
                store.finish(spec.run_id, RunOutcome(
                    n_labeled=int(budget), score=score, final_score=score, max_score=score,
                    report="final", normaliser=NORM, timeline=[],
                    metrics={"test_accuracy": score}, stages={},
                ), wall_time=2.0)  # fmt: skip
        failed = _spec("bc", "256", 0)
        store.start(failed, "bc", failed.env, "cpu", {})
        store.fail(failed.run_id, "RuntimeError: out of memory", 1.0)


def check_notebook(block: str, args: list[str], where: str, capsys, tmp: Path) -> None:
    if "to_dataframe" in block or "_frame(" in block:
        pytest.importorskip("pandas")  # the notebook extra; the dev extra installs it
    fill_example_store(tmp / "results")
    test = doctest.DocTestParser().get_doctest(block, {}, where, where, 0)
    assert test.examples, f"{where}: no '>>>' line"
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    runner = doctest.DocTestRunner(optionflags=flags)
    report: list[str] = []
    runner.run(test, out=report.append)
    assert runner.failures == 0, f"{where}:\n" + "".join(report)
