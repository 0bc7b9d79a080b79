"""UVA's optimisation, as the reference trains: AdamW (weight decay on matrices only, betas
0.9/0.95), a linear warm-up then half a cosine, an exponential moving average of the weights
with the reference's warm-up of its decay, bf16 autocast on CUDA.

A stage ends on the EMA weights (they are what is evaluated, cached, labelled with and
trained further: the reference starts its second stage from the first one's EMA model);
the periodic evaluations during a policy stage see the EMA weights too. The stopping rule
measures the training weights.

``optimizer=adam, schedule=constant, warmup_steps=0, ema=0`` with fp32 is ssilbench's
shared loop (``ssilbench.kit.optimise``) unchanged, so the options of ``LEGACY`` reproduce
earlier results bit for bit.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from ssilbench.kit import StageBudget, StoppingRule, optimise
from ssilbench_uva.options import UVAOptions

FORMAT = "uva-adamw-ema-1"
"""The ``format`` of this loop's checkpoints (another trainer's are not resumed from)."""


def lr_factor(o: UVAOptions, step: int, total: int) -> float:
    """The factor on the peak rate for the optimiser step after ``step`` steps of ``total``
    (the reference's schedulers: the first step has rate 0 when there is a warm-up)."""
    warm = o.warmup_steps
    if step < warm:
        return step / max(1, warm)
    if o.schedule == "constant":
        return 1.0
    progress = (step - warm) / max(1, total - warm)
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))


def ema_decay(o: UVAOptions, updates: int) -> float:
    """The decay of the ``updates``-th EMA update (0-based): the reference's EMAModel with
    inv_gamma 1, ``power`` and max ``ema``: 0 for the first two, then 1 - (1 + s)^-power."""
    s = max(0, updates - 1)
    if s <= 0:
        return 0.0
    return min(1.0 - (1.0 + s) ** -o.ema_power, o.ema)


def param_groups(net: nn.Module, weight_decay: float) -> list[dict]:
    """The reference's groups: no decay on 1-D tensors and biases, decay on the rest."""
    decay, no_decay = [], []
    for name, p in net.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if p.ndim == 1 or name.endswith(".bias") else decay).append(p)
    return [{"params": no_decay, "weight_decay": 0.0},
            {"params": decay, "weight_decay": weight_decay}]  # fmt: skip


def uses_bf16(o: UVAOptions, device: torch.device) -> bool:
    return device.type == "cuda" and o.precision in ("auto", "bf16")


def is_legacy(o: UVAOptions, device: torch.device) -> bool:
    """Whether the stage is ssilbench's shared loop unchanged (see the module docstring)."""
    return (o.optimizer == "adam" and o.schedule == "constant" and o.warmup_steps == 0
            and o.ema == 0 and not uses_bf16(o, device))  # fmt: skip


class _Sampler:
    """Epoch-shuffled minibatch rows (the shared loop's order: a fresh permutation of
    PCG64(seed) each epoch; the whole set as a slice when the batch covers it)."""

    def __init__(self, n: int, batch_size: int, seed: int) -> None:
        self.n, self.batch = n, max(1, min(batch_size, n))
        self.rng = np.random.Generator(np.random.PCG64(seed))
        self.order, self.pos = np.empty(0, dtype=np.int64), 0

    def next(self) -> slice | np.ndarray:
        if self.batch >= self.n:
            return slice(None)
        if self.pos + self.batch > len(self.order):
            self.order, self.pos = self.rng.permutation(self.n), 0
        rows = self.order[self.pos : self.pos + self.batch]
        self.pos += self.batch
        return rows

    def state(self) -> dict:
        return {"rng": self.rng.bit_generator.state, "order": torch.from_numpy(self.order.copy()),
                "pos": self.pos}  # fmt: skip

    def load(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.order, self.pos = state["order"].numpy().astype(np.int64), int(state["pos"])


@contextlib.contextmanager
def _swapped(params: list[torch.Tensor], ema: list[torch.Tensor] | None):
    """The EMA weights in the parameters for the duration (an evaluation)."""
    if ema is None:
        yield
        return
    with torch.no_grad():
        saved = [p.detach().clone() for p in params]
        for p, e in zip(params, ema, strict=True):
            p.copy_(e)
    try:
        yield
    finally:
        with torch.no_grad():
            for p, s in zip(params, saved, strict=True):
                p.copy_(s)


def _evaluates_next(budget: StageBudget) -> bool:
    """Whether the next ``tick`` runs the stage's periodic evaluation."""
    step = budget.used + 1
    return bool(budget.stage.policy and budget.policy is not None
                and (step % budget.plan.eval_every == 0 or step == budget.stage.steps))  # fmt: skip


def fit(
    net: nn.Module,
    loss_fn: Callable[[slice | np.ndarray], torch.Tensor],
    n: int,
    budget: StageBudget,
    o: UVAOptions,
    *,
    seed: int,
    device: torch.device,
    rule: StoppingRule | None = None,
    generators: tuple[torch.Generator, ...] = (),
) -> float:
    """Train ``net`` on ``loss_fn(rows)`` for the stage's budget; returns the last loss.
    Dropout and the condition's drop use torch's global generator, seeded here from
    ``seed`` (and restored afterwards), so that a stage's result depends on its seed only.
    ``generators`` (the loss's own: modes, noise, masks) are saved in the stage's
    checkpoints with everything else, so that a resumed stage ends as an uninterrupted one."""
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        if is_legacy(o, device):
            return optimise(net.parameters(), loss_fn, n, budget, lr=o.lr,
                            batch_size=o.batch_size, seed=seed, rule=rule)  # fmt: skip
        return _fit(
            net, loss_fn, n, budget, o, seed=seed, device=device, rule=rule, generators=generators
        )


def _fit(net, loss_fn, n, budget, o, *, seed, device, rule, generators) -> float:
    groups = param_groups(net, o.weight_decay if o.optimizer == "adamw" else 0.0)
    params = [p for g in groups for p in g["params"]]
    kind = torch.optim.AdamW if o.optimizer == "adamw" else torch.optim.Adam
    optimiser = kind(groups, lr=o.lr, betas=tuple(o.betas))
    ema = [p.detach().clone().float() for p in params] if o.ema > 0 else None
    sampler = _Sampler(n, o.batch_size, seed)
    updates, previous, last = 0, float("inf"), None
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if uses_bf16(o, device)
                else contextlib.nullcontext())  # fmt: skip
    checkpoints = budget.plan.checkpoints
    watch = getattr(budget.plan, "telemetry", None)  # progress and loss curves, where recorded
    if checkpoints is not None and (state := checkpoints.load(budget.stage.name, FORMAT)):
        with torch.no_grad():
            for p, saved in zip(params, state["params"], strict=True):
                p.copy_(saved)
            if ema is not None:
                for e, saved in zip(ema, state["ema"], strict=True):
                    e.copy_(saved)
        optimiser.load_state_dict(state["optimiser"])
        sampler.load(state["sampler"])
        for g, saved in zip(generators, state["generators"], strict=True):
            g.set_state(saved)
        updates, previous = state["updates"], state["previous"]
        budget.used, budget.plan.global_step = state["used"], state["global_step"]
        budget.resumed_from = budget.used
    while budget.remaining > 0:
        for group in optimiser.param_groups:
            group["lr"] = o.lr * lr_factor(o, budget.used, budget.stage.steps)
        rows = sampler.next()
        with autocast:
            loss = loss_fn(rows)
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        if ema is not None:
            decay = ema_decay(o, updates)
            with torch.no_grad():
                for e, p in zip(ema, params, strict=True):
                    e.mul_(decay).add_(p.detach().float(), alpha=1.0 - decay)
        updates += 1
        last = loss.detach()
        with _swapped(params, ema) if _evaluates_next(budget) else contextlib.nullcontext():
            budget.tick()
        if watch is not None:
            watch.train_loss(budget.stage.name, budget.plan.global_step, last)
        if rule is not None and budget.used % rule.check_every == 0 and budget.remaining:
            with torch.no_grad():
                current = float(loss_fn(slice(None)))
            if rule.converged(previous, current, None):
                with _swapped(params, ema):
                    budget.stop_early(f"{rule.describe()} (step {budget.used})")
            previous = current
        if checkpoints is not None and budget.remaining and budget.used % checkpoints.every == 0:
            checkpoints.save(budget.stage.name, {
                "format": FORMAT, "params": [p.detach().cpu().clone() for p in params],
                "ema": [e.cpu().clone() for e in ema] if ema is not None else [],
                "optimiser": optimiser.state_dict(), "sampler": sampler.state(),
                "generators": [g.get_state() for g in generators],
                "updates": updates, "previous": previous, "used": budget.used,
                "global_step": budget.plan.global_step,
            })  # fmt: skip
    if ema is not None:  # the stage's result is its EMA weights
        with torch.no_grad():
            for p, e in zip(params, ema, strict=True):
                p.copy_(e.to(p.dtype))
    return float("nan") if last is None else float(last)
