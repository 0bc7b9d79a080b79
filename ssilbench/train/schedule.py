"""Learning-rate schedules: a stage's learning rate as a function of its progress.

The paper's Procgen code warms the learning rate up linearly and then decays it linearly to
the end of each stage. Shares of the stage (rather than step counts) keep that shape when
``--steps-scale`` shortens a run.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class WarmupLinear:
    """The factor on the base learning rate goes linearly from ``start`` to 1 over the first
    ``warmup`` share of the stage's steps, then linearly to ``end`` at its last step."""

    start: float
    warmup: float
    end: float

    def factor(self, step: int, total: int) -> float:
        """The factor for the optimiser step that follows ``step`` steps already taken."""
        if total <= 1:
            return 1.0
        ramp = self.warmup * total
        if step < ramp:
            return self.start + (1 - self.start) * step / ramp
        return 1 + (self.end - 1) * (step - ramp) / max(total - 1 - ramp, 1e-9)


def set_lr(
    optimiser: torch.optim.Optimizer,
    lr: float,
    schedule: WarmupLinear | None,
    step: int,
    total: int,
) -> None:
    """Give every parameter group the scheduled learning rate for the next step."""
    if schedule is None:
        return
    value = lr * schedule.factor(step, total)
    for group in optimiser.param_groups:
        # Fused Adam keeps lr as a tensor when it was created with one; a float is fine here.
        group["lr"] = value
