"""What the store keeps of a run: :class:`RunOutcome` (what a finished run produced) and
:class:`RunRecord` (one row: the run's spec, labels, status, results and provenance), and
whether a run left running by another process is stale."""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ssilbench.runs.spec import RunSpec
from ssilbench.runs.store_file import (
    COLUMNS,
)


@dataclass(frozen=True)
class RunOutcome:
    """What a finished run hands to the store."""

    n_labeled: int
    score: float | None  # None when the run was evaluated without rollouts
    final_score: float | None
    max_score: float | None
    report: str
    normaliser: dict[str, Any]
    timeline: list[dict[str, Any]]
    metrics: dict[str, float]
    stages: dict[str, Any]
    curves: list[dict[str, Any]] = field(default_factory=list)
    """Series ``{"stage", "name", "steps", "values"}`` (``ssilbench.runner.telemetry``)."""
    earlier_seconds: float = 0.0
    """Wall time of the run's earlier attempts up to the checkpoint it resumed from; the
    store records this attempt's share plus it."""


@dataclass(frozen=True)
class RunRecord:
    """One row of the ``runs`` table, its JSON columns decoded; what every reader of the
    store gets. Only what every row has is required: the rest is filled in as a run
    starts (provenance) and ends (its result), so it is None until then.

    ``spec`` is the parsed spec (runs of older spec versions parse: the newer fields have
    defaults). ``spec_doc`` is the spec as recorded, with its spec version's fields only:
    the run id hashes it and an export writes it back unchanged, which re-dumping ``spec``
    would not do for an older run (it would gain the defaulted fields). Built by hand
    without it, it is the spec's own dump."""

    run_id: str
    spec: RunSpec
    method: str
    method_label: str
    env: str
    env_label: str
    budget: str
    seed: int
    status: str
    attempts: int = 0
    started_at: float | None = None
    finished_at: float | None = None
    wall_time: float | None = None
    n_labeled: int | None = None
    score: float | None = None  # None when the run was evaluated without rollouts
    final_score: float | None = None
    max_score: float | None = None
    report: str | None = None
    normaliser: dict[str, Any] | None = None
    timeline: list[dict[str, Any]] | None = None
    metrics: dict[str, float] | None = None
    stages: dict[str, Any] | None = None
    versions: dict[str, Any] | None = None
    device: str | None = None
    host: str | None = None
    pid: int | None = None
    error: str | None = None
    spec_doc: dict[str, Any] = field(default_factory=dict, repr=False)
    curves: list[dict[str, Any]] | None = field(default=None, repr=False, compare=False)
    """The run's curves (table ``curves``) where the reader asked for them (``rows(...,
    curves=True)``, an export line); None: not read. Not a column of ``runs``."""

    def __post_init__(self) -> None:
        if not self.spec_doc:  # frozen: the one field completed after construction
            object.__setattr__(self, "spec_doc", self.spec.document())

    @classmethod
    def of(
        cls,
        spec: RunSpec,
        method_label: str | None = None,
        env_label: str | None = None,
        status: str = "done",
        **columns: Any,
    ) -> RunRecord:
        """The record of ``spec`` (run id, method, environment, budget and seed taken from
        it; labels default to its method and environment), with any other ``columns``."""
        return cls(spec.run_id, spec, spec.method, method_label or spec.method, spec.env,
                   env_label or spec.env, spec.budget, spec.seed, status, **columns)  # fmt: skip

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> RunRecord:
        """A record from a row as :meth:`to_row` writes it (every column, JSON decoded): a
        line of an export. A spec that does not parse is a pydantic ValidationError."""
        values = {c: row.get(c) for c in COLUMNS}
        # A missing count is what the column's default makes of it when the row is stored.
        values["attempts"] = values["attempts"] or 0
        return cls(**{**values, "spec": RunSpec.model_validate(row["spec"])},
                   spec_doc=row["spec"])  # fmt: skip

    def with_curves(self, curves: list[dict[str, Any]] | None) -> RunRecord:
        """This record with ``curves``."""
        return dataclasses.replace(self, curves=curves)

    def to_row(self) -> dict[str, Any]:
        """Every column by name, JSON columns decoded and the spec as recorded: the
        format of a line of an export, which :meth:`from_row` reads back."""
        return {c: self.spec_doc if c == "spec" else getattr(self, c) for c in COLUMNS}

    @property
    def design_id(self) -> str:
        """The run as designed, whatever its data (see :attr:`RunSpec.design_id`)."""
        return self.spec.design_id

    def value(self, metric: str) -> float | None:
        """The rollout score for ``"score"``, else the recorded metric of that name; None
        when the run has none."""
        if metric == "score":
            return self.score
        return (self.metrics or {}).get(metric)


def is_stale(run: RunRecord, host: str | None = None) -> bool:
    """Whether a run was left 'running' by a process of ``host`` (default: this one) that
    no longer exists: it was interrupted. Processes of other hosts cannot be checked from
    here, so their runs are never stale."""
    return left_behind(run.status, run.host, run.pid, host)


def left_behind(status: str, host: str | None, pid: int | None, here: str | None) -> bool:
    """:func:`is_stale` on the three columns it needs, for a query that reads no more."""
    here = socket.gethostname() if here is None else here
    return status == "running" and host == here and not process_alive(pid)


def process_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
