"""A small results store and the ways to look at it, shared by the store-safety tests: two
done runs and one left running by a process that is gone, every file of a folder by its hash
(what 'unchanged' compares), and the command line run in this process."""

from __future__ import annotations

import hashlib
from pathlib import Path

from ssilbench.cli import main
from ssilbench.runs.records import RunOutcome
from ssilbench.runs.spec import RunSpec
from ssilbench.runs.store import ResultsStore

DEAD_PID = 2**31 - 1  # above any kernel's pid_max: no such process
OUTCOME = RunOutcome(
    n_labeled=16,
    score=0.75,
    final_score=0.75,
    max_score=0.8,
    report="final",
    normaliser={"name": "success rate", "low": 0.0, "high": 1.0, "source": ""},
    timeline=[{"step": 30, "score": 0.5}, {"step": 60, "score": 0.75}],
    metrics={"test_accuracy": 0.9},
    stages={"policy": {"declared": 60, "used": 60, "stopped_early": None}},
)


def spec(seed: int = 0) -> RunSpec:
    return RunSpec(method="bc", config={}, env="maze:10x10", options={}, budget="16",
                   seed=seed, steps=60, eval_every=30)  # fmt: skip


def make_store(directory: Path) -> Path:
    """Two done runs and one left running by a process that is gone; returns the folder."""
    with ResultsStore(directory) as store:
        for seed in (0, 1, 2):
            store.start(spec(seed), "bc", "maze:10x10", "cpu", {"ssilbench": "0"})
        for seed in (0, 1):
            store.finish(spec(seed).run_id, OUTCOME, wall_time=2.0)
        store.db.execute("UPDATE runs SET pid = ? WHERE status = 'running'", (DEAD_PID,))
    return directory


def files(directory: Path) -> dict[str, str]:
    """Every file under ``directory`` (side files included) -> its sha256."""
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}  # fmt: skip


def cli(capsys, *args: str) -> tuple[int, str, str]:
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err
