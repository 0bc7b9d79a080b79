"""A stage's learning-rate schedule applied to its optimiser, step by step. The schedule
itself (:class:`~ssilbench.stages.WarmupLinear`) is part of the contract: an architecture
carries one (``Architecture.lr_schedule``)."""

from __future__ import annotations

import torch

from ssilbench.stages import WarmupLinear


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
