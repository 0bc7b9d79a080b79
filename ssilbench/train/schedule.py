"""Learning-rate schedules: a stage's learning rate as a function of its progress.

The paper's Procgen code warms the learning rate up linearly and then decays it linearly to
the end of each stage. Shares of the stage (rather than step counts) keep that shape when
``--steps-scale`` shortens a run; a warm-up given in steps instead (``warmup_steps``) lasts
that many steps whatever the stage's length, as the reference code's does.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class WarmupLinear:
    """The factor on the base learning rate goes linearly from ``start`` to 1 over the first
    ``warmup`` share of the stage's steps (or over its first ``warmup_steps`` steps, when
    given), then linearly to ``end`` at its last step."""

    start: float
    warmup: float
    end: float
    warmup_steps: int | None = None

    def __post_init__(self) -> None:
        if self.warmup_steps is not None and self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be at least 0, got {self.warmup_steps}")

    def factor(self, step: int, total: int) -> float:
        """The factor for the optimiser step that follows ``step`` steps already taken."""
        if total <= 1:
            return 1.0
        ramp = self.warmup * total if self.warmup_steps is None else self.warmup_steps
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
