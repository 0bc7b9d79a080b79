"""What a leaderboard table's numbers stand on, beside the versions behind each cell: the
dataset(s) of its runs and where each came from, their step budget against the paper's, and
whether the runs follow the family's paper protocol (its budgets, seeds and steps) or a
custom one. The normaliser has its own line (``Normalised score: ...``).

Runs record the dataset and the paper protocol with their versions
(``ssilbench.runner.worker.setup_provenance``); runs recorded before that say "unknown".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ssilbench.runs.records import RunRecord

UNKNOWN = "unknown (not recorded by these runs)"
_SOURCES = {"import": "imported", "collect": "collected here", "demo": "a scripted demo",
            "joined": "joined from imported tasks"}  # fmt: skip


def origin_lines(records: list[RunRecord]) -> dict[str, str]:
    """``dataset``, ``steps`` and ``protocol`` of the runs of one table, as short phrases."""
    return {
        "dataset": "; ".join(sorted({_dataset(r) for r in records})),
        "steps": _steps(records),
        "protocol": _protocol(records),
    }


def origin_sentences(origin: dict[str, str]) -> list[str]:
    """The lines a rendered table prints: 'Dataset: ...', 'Steps: ...', 'Protocol: ...'."""
    return [f"{key.capitalize()}: {value}." for key, value in origin.items()]


def _dataset(record: RunRecord) -> str:
    found = (record.versions or {}).get("dataset")
    if not isinstance(found, dict) or not found.get("path"):
        return UNKNOWN
    source = str(found.get("source", ""))
    if source == "built":
        how = f"built here by {found['plugin']}" if found.get("plugin") else "built here"
    else:
        how = _SOURCES.get(source, source or "origin unknown")
    return f"{found['path']} ({how})"


def _setup(record: RunRecord) -> dict[str, Any] | None:
    found = (record.versions or {}).get("protocol")
    return found if isinstance(found, dict) else None


def _papers(records: list[RunRecord]) -> list[dict[str, Any] | None] | None:
    """The paper protocols the runs recorded (None in the list: a family without one);
    None when some run recorded none at all (an older run)."""
    setups = [_setup(r) for r in records]
    if any(s is None for s in setups):
        return None
    found: list[dict[str, Any] | None] = []
    for s in setups:
        if s.get("paper") not in found:  # type: ignore[union-attr]
            found.append(s.get("paper"))  # type: ignore[union-attr]
    return found


def _steps(records: list[RunRecord]) -> str:
    steps = sorted({r.spec.steps for r in records})
    text = " and ".join(f"{s:,}" for s in steps) + " per run"
    papers = _papers(records)
    if papers is None:
        return f"{text} (the paper's: unknown)"
    if len(papers) == 1 and papers[0] is not None:
        paper = int(papers[0]["steps"])
        if steps == [paper]:
            return f"{text} (the paper's)"
        return f"{text} (the paper's: {paper:,})" if paper in steps else (
            f"{text} (not the paper's {paper:,})")  # fmt: skip
    defaults = sorted({int(_setup(r)["default_steps"]) for r in records})  # type: ignore[index]
    if steps == defaults:
        return f"{text} (the task's default)"
    return f"{text} (the task's default is {' and '.join(f'{d:,}' for d in defaults)})"


def _protocol(records: list[RunRecord]) -> str:
    papers = _papers(records)
    if papers is None:
        return UNKNOWN
    if len(papers) != 1 or papers[0] is None:
        return "custom budgets and seeds (the environment family declares no paper protocol)"
    paper = papers[0]
    budgets, seeds = {r.budget for r in records}, {r.seed for r in records}
    differ = [what for what, ours, theirs in (
        ("budgets", budgets, set(paper["budgets"])), ("seeds", seeds, set(paper["seeds"])),
        ("steps", {r.spec.steps for r in records}, {paper["steps"]}),
    ) if not ours <= theirs]  # fmt: skip
    if differ:
        listed = ", ".join(differ[:-1]) + " and " + differ[-1] if len(differ) > 1 else differ[0]
        return f"custom {listed}, not the paper's ({paper['figure']})"
    return (f"the paper's ({paper['figure']}): {len(budgets)} of its {len(paper['budgets'])} "
            f"budgets, {len(seeds)} of its {len(paper['seeds'])} seeds")  # fmt: skip
