"""The order and grouping of a sweep's pending runs: which run together as one unit (stacked
into one computation, or one at a time), and which units go first so that a stage several
runs share is trained by the first and found trained by the others."""

from __future__ import annotations

import json

from ssilbench.api import Stage
from ssilbench.planning.plan import SweepPlan
from ssilbench.runner.worker import stage_scope
from ssilbench.train.memo import share_identity

MAX_GROUP = 64  # runs stacked into one computation at most


def groups(plan: SweepPlan, pending: list[int], by_budget: bool = False) -> list[list[int]]:
    """Pending runs in execution units: runs of a batched method that share the task, the
    config and the step settings go together (budgets and seeds differ); others alone.
    ``by_budget``: each label budget a unit of its own, so that a pool's workers share
    what one process would train as one unit."""
    limit = MAX_GROUP
    units: dict[tuple, list[int]] = {}
    out: list[list[int]] = []
    for index in pending:
        spec = plan.runs[index]
        if not plan.method_of(spec).cls.batched:
            out.append([index])
            continue
        # Runs whose options differ only where they follow the seed share a setup: each
        # trains on its own seed's dataset, stacked all the same.
        task = spec.env + json.dumps(spec.shared_options(), sort_keys=True)
        key = (SweepPlan.method_key(spec.method, spec.config), task, spec.steps,
               spec.eval_every, spec.stop_early, spec.budget if by_budget else None)  # fmt: skip
        unit = units.setdefault(key, [])
        if not unit:
            out.append(unit)
        unit.append(index)
        if len(unit) == limit:
            del units[key]
    return out


def execution_units(
    plan: SweepPlan, pending: list[int], workers: int, stack: bool | None, executor: bool
) -> list[list[int]]:
    """The units a sweep runs ``pending`` in (see :func:`run_sweep`'s ``stack``)."""
    # Measured on the README's job (2 cores): parallel workers beat stacking small runs,
    # so by default a pool takes runs one at a time. Asked to stack, a pool splits units by
    # budget: on one GPU, many processes of stacked runs are what keep it busy.
    pooled = workers > 1 and not executor
    if stack is None:
        stack = not pooled
    return groups(plan, pending, by_budget=pooled) if stack else [[i] for i in pending]


def stage_identities(plan: SweepPlan, index: int) -> list[tuple[Stage, str | None]]:
    """The stages of the plan's run ``index`` that train, each with its shared-stage identity
    (None: the run's own)."""
    spec = plan.runs[index]
    scope = stage_scope(spec, plan.task_of(spec))
    return [
        (s, share_identity(s, scope) if s.share else None)
        for s in plan.stages[plan.runs[index].run_id]
        if s.steps > 0
    ]


def leaders_first(plan: SweepPlan, units: list[list[int]]) -> list[list[int]]:
    """Units in an order where the first unit to need each shared stage comes before every
    other unit that needs it (the others then find it trained, or wait less)."""
    seen: set[str] = set()
    leaders, followers = [], []
    for unit in units:
        shared = {identity for i in unit for _, identity in stage_identities(plan, i) if identity}
        (leaders if shared - seen else followers).append(unit)
        seen |= shared
    return leaders + followers
