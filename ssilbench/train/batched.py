"""Many small runs trained as one computation, with one stopping rule for every method.

The paper's maze studies train hundreds of tiny networks (seeds x label budgets x methods).
Each is far too small to keep a CPU busy, so runs that share an architecture are stacked:
their parameters get a leading run axis (``torch.func.stack_module_state``) and one
``vmap``-ed forward pass serves all of them. The loss is the *sum* of the runs' own losses
and Adam is elementwise, so every run follows exactly the updates it would get alone.

Runs that stop early (``ssilbench.train.loop.StoppingRule``) keep their parameters frozen
for the rest of the stage while the others go on.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, stack_module_state

from ssilbench.train.budget import StageBudget
from ssilbench.train.loop import BatchSampler, StoppingRule, adam


class Stacked(nn.Module):
    """R copies of one module with separate parameters, applied to inputs of shape (R, B, ...)."""

    def __init__(self, nets: list[nn.Module]) -> None:
        super().__init__()
        params, buffers = stack_module_state(nets)
        self.params = nn.ParameterDict(
            {k.replace(".", "/"): nn.Parameter(v) for k, v in params.items()}
        )
        self.buffers_ = {k: v for k, v in buffers.items()}
        # Kept out of the module tree: the template has no data (meta) and must not move.
        self._template = (copy.deepcopy(nets[0]).to("meta"),)
        self.count = len(nets)

    def _state(self):
        return {k.replace("/", "."): v for k, v in self.params.items()}, self.buffers_

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        params, buffers = self._state()

        def one(p, b, xi):
            return functional_call(self._template[0], (p, b), (xi,))

        return torch.vmap(one)(params, buffers, x)

    def unstack(self, nets: list[nn.Module]) -> list[nn.Module]:
        """Copy the trained parameters back into the original modules (returned)."""
        params, _ = self._state()
        with torch.no_grad():
            for r, net in enumerate(nets):
                for name, value in net.named_parameters():
                    value.copy_(params[name][r])
        return nets


def _padded(tensors: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack ragged per-run tensors on a new run axis; the mask marks real rows."""
    longest = max(len(t) for t in tensors)
    out = tensors[0].new_zeros((len(tensors), longest, *tensors[0].shape[1:]))
    mask = torch.zeros(len(tensors), longest, dtype=torch.bool, device=tensors[0].device)
    for r, t in enumerate(tensors):
        out[r, : len(t)] = t
        mask[r, : len(t)] = True
    return out, mask


def fit_classifiers(
    nets: list[nn.Module],
    inputs: list[torch.Tensor],
    targets: list[torch.Tensor],
    budgets: list[StageBudget],
    *,
    lr: float,
    batch_sizes: list[int],
    seeds: list[int],
    rule: StoppingRule | None = StoppingRule(),
    on_check: Callable[[list[int]], None] | None = None,
) -> None:
    """Train R classifiers (hard or soft targets) together until their budgets are spent or
    the stopping rule stops them. ``budgets[r]`` is run r's stage budget (it ticks)."""
    runs = len(nets)
    device = inputs[0].device
    x, mask = _padded(inputs)
    y, _ = _padded(targets)
    counts = mask.sum(1)
    soft = y.is_floating_point()
    stacked = Stacked(nets)
    optimiser = adam(list(stacked.parameters()), lr)
    # The same minibatches, run by run, as `optimise` draws for a run trained alone.
    samplers = [
        BatchSampler(int(n), size, seed)
        for n, size, seed in zip(counts, batch_sizes, seeds, strict=True)
    ]
    sizes = torch.tensor([min(b, int(n)) for b, n in zip(batch_sizes, counts, strict=True)])
    full = bool((sizes >= counts.cpu()).all())
    width = int(sizes.max())
    active = torch.ones(runs, dtype=torch.bool)
    last_loss = torch.full((runs,), float("inf"))
    steps = max(b.remaining for b in budgets)

    def losses(rows_x, rows_y, rows_mask, with_accuracy=False):
        logits = stacked(rows_x)
        if soft:
            per = -(rows_y * F.log_softmax(logits, dim=-1)).sum(-1)
        else:
            per = F.cross_entropy(logits.flatten(0, 1), rows_y.flatten(), reduction="none")
            per = per.view(rows_mask.shape)
        count = rows_mask.sum(1).clamp_min(1)
        loss = (per * rows_mask).sum(1) / count
        if not with_accuracy:
            return loss
        wanted = rows_y.argmax(-1) if soft else rows_y
        right = ((logits.argmax(-1) == wanted) & rows_mask).sum(1) / count
        return loss.cpu(), right.cpu()

    for step in range(1, steps + 1):
        if full:
            batch_x, batch_y, batch_mask = x, y, mask
        else:
            # Each run draws its own minibatch among its real rows (without replacement).
            index = torch.zeros(runs, width, dtype=torch.long)
            for r, sampler in enumerate(samplers):
                rows = sampler.next()
                rows = (
                    torch.arange(int(counts[r]))
                    if isinstance(rows, slice)
                    else torch.from_numpy(rows)
                )
                index[r, : len(rows)] = rows
            keep = torch.arange(width)[None, :] < sizes[:, None]
            index = index.to(device)
            batch_x = torch.gather(
                x, 1, index.view(runs, width, *([1] * (x.dim() - 2))).expand(-1, -1, *x.shape[2:])
            )
            batch_y = torch.gather(
                y, 1, index.view(runs, width, *([1] * (y.dim() - 2))).expand(-1, -1, *y.shape[2:])
            )
            batch_mask = keep.to(device)
        per_run = losses(batch_x, batch_y, batch_mask)
        optimiser.zero_grad(set_to_none=True)
        (per_run * active.to(device)).sum().backward()
        frozen = ~active
        if frozen.any():
            saved = {k: v.detach()[frozen].clone() for k, v in stacked.params.items()}
        optimiser.step()
        if frozen.any():
            with torch.no_grad():
                for k, v in stacked.params.items():
                    v[frozen] = saved[k]
        ticking = [r for r in torch.nonzero(active).flatten().tolist() if budgets[r].remaining > 0]
        if any(_evaluates_next(budgets[r]) for r in ticking):
            stacked.unstack(nets)  # periodic evaluation reads the runs' own modules
        for r in ticking:
            budgets[r].tick()
        for r in torch.nonzero(active).flatten().tolist():
            if budgets[r].remaining == 0:
                active[r] = False
        if rule is not None and step % rule.check_every == 0 and active.any():
            with torch.no_grad():
                current, accuracy = losses(x, y, mask, with_accuracy=True)
            stopping = [
                r for r in torch.nonzero(active).flatten().tolist()
                if rule.converged(float(last_loss[r]), float(current[r]), float(accuracy[r]))
            ]  # fmt: skip
            if stopping:
                stacked.unstack(nets)
            for r in stopping:
                active[r] = False
                budgets[r].stop_early(f"{rule.describe()} (step {budgets[r].used})")
            last_loss = current
            if on_check is not None:
                on_check(torch.nonzero(active).flatten().tolist())
        if not active.any():
            break
    stacked.unstack(nets)


def _evaluates_next(budget: StageBudget) -> bool:
    """Whether the budget's next tick triggers a periodic evaluation of its policy."""
    nxt = budget.used + 1
    return (
        budget.stage.policy
        and budget.policy is not None
        and (nxt % budget.plan.eval_every == 0 or nxt == budget.stage.steps)
    )
