"""A results store in Python, for notebooks and scripts.

:func:`open_results` reads a store once, without writing anything, as typed records
(:class:`ssilbench.runs.records.RunRecord`). :meth:`Results.select` narrows them with the
selection of ``ssilbench curves`` (run id, method, environment, budget, seed) and a status;
:meth:`Results.leaderboard` builds the table of ``ssilbench leaderboard`` from the finished
runs of the selection, with its ``metric``, ``compare`` and ``latest`` and the same checks.
:meth:`Results.to_dataframe` (one row per run) and :meth:`Results.leaderboard_frame` (one
row per cell) give pandas DataFrames; pandas is optional (the ``notebook`` extra).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ssilbench.errors import UsageError
from ssilbench.leaderboard.board import records_table
from ssilbench.leaderboard.curves import CurveFilter

if TYPE_CHECKING:
    import pandas

    from ssilbench.leaderboard.table import Table
    from ssilbench.runs.records import RunRecord

RUN_COLUMNS = ("run_id", "method", "method_label", "env", "env_label", "budget", "n_labeled",
               "seed", "status", "score", "final_score", "max_score", "wall_time",
               "finished_at", "device", "error")  # fmt: skip
"""The columns of :meth:`Results.to_dataframe` before the runs' recorded metrics."""
CELL_COLUMNS = ("env", "method", "budget", "n_labeled", "mean", "low", "high", "n", "best",
                "seeds", "values")  # fmt: skip
"""The columns of :meth:`Results.leaderboard_frame`."""


def _pandas() -> Any:
    try:
        import pandas
    except ImportError:
        raise UsageError(
            'DataFrames need pandas: pip install "ssilbench[notebook]" (or pip install '
            "pandas). The records themselves need nothing more: Results.records."
        ) from None
    return pandas


@dataclass(frozen=True)
class Results:
    """Runs of a results store as read by :func:`open_results` (every status), or a
    selection of them (:meth:`select`)."""

    path: Path
    records: tuple[RunRecord, ...]

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[RunRecord]:
        return iter(self.records)

    def select(
        self,
        *,
        status: str | None = None,
        run: str | None = None,
        method: str | None = None,
        env: str | None = None,
        budget: str | int | None = None,
        seed: int | None = None,
    ) -> Results:
        """The runs with ``status`` (``"done"``, ``"failed"``, ...; None: any) that the
        selection of ``ssilbench curves`` keeps: a run id (its first 6+ characters), a
        method and an environment (each a name or a label), a label budget, a seed."""
        if run is not None and len(run) < 6:
            raise UsageError(f"run={run!r}: give at least 6 characters of a run id.")
        which = CurveFilter(run, method, env, None if budget is None else str(budget), seed)
        kept = tuple(r for r in self.records
                     if (status is None or r.status == status) and which.matches(r))  # fmt: skip
        return replace(self, records=kept)

    def leaderboard(
        self, metric: str = "score", compare: tuple[str, str] | None = None, latest: bool = False
    ) -> Table:
        """The table of ``ssilbench leaderboard`` over the finished runs of this selection:
        per environment, methods by label budget (see :mod:`ssilbench.leaderboard.table`)."""
        done = [r for r in self.records if r.status == "done"]
        return records_table(done, metric, compare, latest)

    def to_dataframe(self) -> pandas.DataFrame:
        """One row per run: :data:`RUN_COLUMNS`, then one column per metric the runs
        recorded (``test_accuracy``, ``success_rate/<task>``, ...), empty where a run has
        none."""
        pandas = _pandas()
        metrics = sorted({k for r in self.records for k in (r.metrics or {})})
        rows = [[getattr(r, c) for c in RUN_COLUMNS]
                + [(r.metrics or {}).get(k) for k in metrics] for r in self.records]  # fmt: skip
        return pandas.DataFrame(rows, columns=[*RUN_COLUMNS, *metrics])

    def leaderboard_frame(
        self, metric: str = "score", compare: tuple[str, str] | None = None, latest: bool = False
    ) -> pandas.DataFrame:
        """:meth:`leaderboard` as one row per cell (environment, method, budget):
        :data:`CELL_COLUMNS`; ``low``/``high`` are the 95% interval over seeds (empty for
        one seed), ``seeds`` and ``values`` the runs behind the mean."""
        pandas = _pandas()
        rows = []
        for table in self.leaderboard(metric, compare, latest).tables:
            for method in table.methods:
                for budget in table.budgets:
                    if (c := table.cell(method, budget)) is not None:
                        n_labeled = table.n_labeled.get(budget)
                        rows.append([table.env, method, budget, n_labeled, c.mean, c.low,
                                     c.high, c.n, c.best, c.seeds, c.values])  # fmt: skip
        return pandas.DataFrame(rows, columns=list(CELL_COLUMNS))


def open_results(path: str | Path | None = None) -> Results:
    """Every run of the results store in the folder ``path`` (``--results`` of the
    commands; None: theirs by default, ``$SSILBENCH_RESULTS`` or ``results``), read without
    writing anything; a ResultsStoreError (exit 2 in a command) when there is no store."""
    from ssilbench.runs.store import ResultsStore

    folder = Path(path if path is not None else os.environ.get("SSILBENCH_RESULTS", "results"))
    with ResultsStore.open_read_only(folder) as store:
        records = store.rows(None)
    return Results(folder, tuple(records))
