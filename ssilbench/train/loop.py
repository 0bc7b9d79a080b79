"""The minibatch optimisation loop every method uses, so none of them re-implements it, and
the stopping rules a run's ``stop_early`` names (:class:`~ssilbench.stages.StoppingRule`
itself is part of the contract)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import torch

from ssilbench.stages import StageBudget, StoppingRule, WarmupLinear
from ssilbench.train.schedule import set_lr

STOPPING_RULES: dict[str, StoppingRule] = {
    # The suite's fast rule: converged by any of three signs.
    "converged": StoppingRule(),
    # The maze paper's code: the full training loss, checked every 500 steps, below 1e-7.
    "paper": StoppingRule(check_every=500, abs_tol=1e-7, rel_tol=None, on_accuracy=False),
}
"""Named stopping rules a run spec's ``stop_early`` selects (``true`` is ``"converged"``)."""


def stopping_rule(stop_early: bool | str) -> StoppingRule | None:
    """The rule a spec's ``stop_early`` names: None for false, the suite's rule for true."""
    if stop_early is False:
        return None
    return STOPPING_RULES["converged" if stop_early is True else stop_early]


class BatchSampler:
    """Epoch-shuffled minibatch indices; the whole set (as a slice) when the batch covers it."""

    def __init__(self, n: int, batch_size: int, seed: int) -> None:
        if n <= 0:
            raise ValueError("cannot sample batches from an empty dataset")
        self.n = n
        self.batch_size = max(1, min(batch_size, n))
        self.rng = np.random.Generator(np.random.PCG64(seed))
        self._order = np.empty(0, dtype=np.int64)
        self._pos = 0

    def state(self) -> dict:
        """Where the sampler is, for a checkpoint (tensors and plain values only)."""
        return {
            "rng": self.rng.bit_generator.state,
            "order": torch.from_numpy(self._order.copy()),
            "pos": self._pos,
        }

    def load_state(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]
        self._order = state["order"].numpy().astype(np.int64)
        self._pos = int(state["pos"])

    def next(self) -> slice | np.ndarray:
        if self.batch_size >= self.n:
            return slice(None)
        if self._pos + self.batch_size > len(self._order):
            self._order = self.rng.permutation(self.n)
            self._pos = 0
        batch = self._order[self._pos : self._pos + self.batch_size]
        self._pos += self.batch_size
        return batch

    def peek(self) -> slice | np.ndarray:
        """The batch :meth:`next` will return, without taking it (for reading ahead). The
        sampler's state afterwards gives the same batches as if it had not peeked."""
        batch = self.next()
        if not isinstance(batch, slice):
            self._pos -= len(batch)
        return batch


def optimise(
    params: Iterable[torch.nn.Parameter],
    loss_fn: Callable[[slice | np.ndarray], torch.Tensor],
    n: int,
    budget: StageBudget,
    *,
    lr: float,
    batch_size: int,
    seed: int,
    clip_grad_norm: float | None = None,
    rule: StoppingRule | None = None,
    accuracy_fn: Callable[[], float] | None = None,
    schedule: WarmupLinear | None = None,
    prefetch: Callable[[slice | np.ndarray], None] | None = None,
) -> float:
    """Adam on ``loss_fn(batch_rows)`` until the stage budget is spent or ``rule`` stops it;
    returns the last loss. ``loss_fn(slice(None))`` must give the full training loss.
    ``schedule`` shapes the learning rate over the stage's steps (constant when None).
    ``prefetch(rows)`` is told the next step's rows before this step computes (to read them
    in the background)."""
    params = [p for p in params if p.requires_grad]
    optimiser = adam(params, lr)
    sampler = BatchSampler(n, batch_size, seed)
    last: torch.Tensor | None = None
    previous = float("inf")
    checkpoints = budget.plan.checkpoints
    watch = budget.plan.telemetry  # progress and the loss curve; reads, never changes, a value
    if checkpoints is not None and (state := checkpoints.load(budget.stage.name)) is not None:
        with torch.no_grad():
            for p, saved in zip(params, state["params"], strict=True):
                p.copy_(saved)
        optimiser.load_state_dict(state["optimiser"])
        sampler.load_state(state["sampler"])
        budget.used, budget.plan.global_step = state["used"], state["global_step"]
        budget.resumed_from = budget.used
        previous = state["previous"]
    while budget.remaining > 0:
        set_lr(optimiser, lr, schedule, budget.used, budget.stage.steps)
        rows = sampler.next()
        if prefetch is not None and budget.remaining > 1:
            prefetch(sampler.peek())
        loss = loss_fn(rows)
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        if clip_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(params, clip_grad_norm)
        optimiser.step()
        last = loss.detach()  # converted once at the end: no device sync per step
        budget.tick()
        if watch is not None:
            watch.train_loss(budget.stage.name, budget.plan.global_step, last)
        if rule is not None and budget.used % rule.check_every == 0 and budget.remaining:
            with torch.no_grad():
                current = float(loss_fn(slice(None)))
                accuracy = accuracy_fn() if accuracy_fn is not None else None
            if rule.converged(previous, current, accuracy):
                budget.stop_early(f"{rule.describe()} (step {budget.used})")
            previous = current
        if checkpoints is not None and budget.remaining and budget.used % checkpoints.every == 0:
            checkpoints.save(budget.stage.name, {
                "params": [p.detach().cpu().clone() for p in params],
                "optimiser": optimiser.state_dict(), "sampler": sampler.state(),
                "used": budget.used, "global_step": budget.plan.global_step,
                "previous": previous,
            })  # fmt: skip
    return float("nan") if last is None else float(last)


def adam(params: list[torch.nn.Parameter], lr: float) -> torch.optim.Optimizer:
    """Adam, fused where the device supports it (one kernel per step: small models are
    dominated by per-op overhead, so this is a large share of a step)."""
    try:
        return torch.optim.Adam(params, lr=lr, fused=True)
    except (RuntimeError, ValueError):
        return torch.optim.Adam(params, lr=lr)


def seed_everything(seed: int) -> None:
    """Seed torch and numpy's global generators (methods should still prefer explicit ones)."""
    torch.manual_seed(seed)
    np.random.seed(seed % (2**32))
