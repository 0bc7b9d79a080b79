"""A sweep's label budgets, seeds and steps on one environment family: what the sweep
gives, else the family's paper protocol (``Environment.paper_protocol``)."""

from __future__ import annotations

from ssilbench.api import Environment
from ssilbench.data.split import parse_budget
from ssilbench.errors import UsageError
from ssilbench.runs.spec import Sweep


def experiment(
    sweep: Sweep, family: str, environment: Environment, default_steps: int, notes: list[str]
) -> tuple[list[str], list[int], int]:
    """The label budgets, seeds and steps of the sweep's runs on a task of ``family``: what
    the sweep gives, else the family's paper protocol (noted once in ``notes``); a
    family without one needs budgets, and runs seed 0."""
    protocol = environment.paper_protocol
    if sweep.budgets is None and protocol is None:
        raise UsageError(
            f"Missing --budgets: the environment family '{family}' declares no paper protocol "
            "to take them from. Give them, e.g. --budgets 16,64,all (and --seeds), or run a "
            "sweep file with --sweep FILE (the paper's are in benchmarks/paper/)."
        )
    budgets = sweep.budgets if sweep.budgets is not None else [
        parse_budget(b) for b in protocol.budgets]  # fmt: skip
    seeds = sweep.seeds if sweep.seeds is not None else (
        list(protocol.seeds) if protocol is not None else [0])  # fmt: skip
    own_steps = sweep.steps is not None or sweep.steps_scale is not None
    steps = sweep.total_steps(default_steps)
    if not own_steps and protocol is not None and protocol.steps is not None:
        steps = protocol.steps
    taken = [what for what, given in (("budgets", sweep.budgets), ("seeds", sweep.seeds))
             if given is None]  # fmt: skip
    if protocol is not None and taken:
        flags = " or ".join(f"--{what}" for what in taken)
        note = (f"{family}: the paper's protocol ({protocol.figure}), as no {flags} was "
                f"given: budgets {','.join(budgets)}; seeds {','.join(map(str, seeds))}; "
                f"{steps:,} steps per run")  # fmt: skip
        if note not in notes:
            notes.append(note)
    return budgets, seeds, steps
