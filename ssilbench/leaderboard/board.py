"""The leaderboard of a results store (``ssilbench leaderboard``): its finished runs as one
Table, with a message naming what to choose instead when the metric or the compared
methods are not there."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ssilbench.errors import UsageError

if TYPE_CHECKING:
    from ssilbench.leaderboard.table import Table
    from ssilbench.runs.records import RunRecord


def store_table(
    results: str,
    metric: str = "score",
    compare: tuple[str, str] | None = None,
    latest: bool = False,
) -> Table:
    """The table of the finished runs in the store at ``results`` for ``metric``, with the
    probability that method label ``compare[0]`` beats ``compare[1]`` when given; ``latest``
    keeps, per cell, the runs like its most recently finished one (see ``build_table``)."""
    from ssilbench.runs.store import ResultsStore

    with ResultsStore.open_read_only(Path(results)) as store:
        records = store.rows("done")
    return records_table(records, metric, compare, latest)


def records_table(
    records: list[RunRecord],
    metric: str = "score",
    compare: tuple[str, str] | None = None,
    latest: bool = False,
) -> Table:
    """:func:`store_table` of finished run ``records`` already read (a selection of a
    store's), with the same checks of ``metric`` and ``compare``."""
    from ssilbench.leaderboard.table import build_table

    if compare is not None:
        known = sorted({r.method_label for r in records})
        wrong = [m for m in compare if m not in known]
        if wrong or compare[0] == compare[1]:
            problem = f"{wrong[0]!r} is not a method label of the store" if wrong else (
                "compare two different methods")  # fmt: skip
            raise UsageError(
                f"--compare A B: {problem}. Labels: {'; '.join(known)} (quote labels with "
                "spaces, e.g. --compare idm_labeling 'bc (arch=lc)')."
            )
    table = build_table(records, metric, compare, latest)
    known = sorted({k for r in records for k in (r.metrics or {})})  # the metrics recorded
    if metric == "score" and records and not table.tables:
        raise UsageError(
            "The finished runs have no rollout score (they ran with --no-rollouts); choose a "
            f"metric with --metric: {', '.join(known)}."
        )
    if metric != "score" and records and not table.tables:
        raise UsageError(
            f"No run recorded the metric '{metric}'. Recorded metrics: score, {', '.join(known)}."
        )
    return table
