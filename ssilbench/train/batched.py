"""Many small runs trained as one computation, with one stopping rule for every method.

The paper's maze studies train hundreds of tiny networks (seeds x label budgets x methods).
Each is far too small to keep a CPU busy, so runs that share an architecture are stacked:
their parameters get a leading run axis (``torch.func.stack_module_state``) and one
``vmap``-ed forward pass serves all of them. The loss is the *sum* of the runs' own losses
and Adam is elementwise, so every run follows exactly the updates it would get alone.

Runs that stop early (``ssilbench.train.loop.StoppingRule``) leave the stack while the
others go on.

A module may bring its own stacked computation: ``stacked_encode(inputs, batch)`` turns the
runs' input tensors into rows once, knowing the group's widest minibatch (or returns None to
decline), and
``stacked_forward(params, rows, context)`` computes every run's outputs from its stacked
parameters; it must compute the same function as the module's own forward.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, stack_module_state

from ssilbench.data.batches import RowSource, float_bytes, materialise
from ssilbench.train.budget import StageBudget
from ssilbench.train.loop import BatchSampler, StoppingRule, adam
from ssilbench.train.memo import StageCache, reusable, stage_key
from ssilbench.train.schedule import WarmupLinear, set_lr
from ssilbench.train.speed import FLOAT32, Speed
from ssilbench.train.supervised import fit_classifier

STACK_BYTES = 512 * 2**20
"""Runs are stacked only when their inputs and targets, as floats, fit in this many bytes;
larger runs (images at the paper's scale) train one after the other, each reading its
minibatches from the store."""


class Stacked(nn.Module):
    """R copies of one module with separate parameters, applied to inputs of shape (R, B, ...)."""

    def __init__(self, nets: list[nn.Module], context: Any = None) -> None:
        super().__init__()
        params, buffers = stack_module_state(nets)
        self.params = nn.ParameterDict(
            {k.replace(".", "/"): nn.Parameter(v) for k, v in params.items()}
        )
        self.buffers_ = {k: v for k, v in buffers.items()}
        # Kept out of the module tree: the template has no data (meta) and must not move.
        self._template = (copy.deepcopy(nets[0]).to("meta"),)
        self.count = len(nets)
        self.context = context  # from the module's ``stacked_encode``; None: vmap

    def _state(self):
        return {k.replace("/", "."): v for k, v in self.params.items()}, self.buffers_

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        params, buffers = self._state()
        if self.context is not None:
            return self._template[0].stacked_forward(params, x, self.context)

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
    inputs: list[RowSource],
    targets: list[RowSource],
    budgets: list[StageBudget],
    *,
    lr: float,
    batch_sizes: list[int],
    seeds: list[int],
    rule: StoppingRule | None = StoppingRule(),
    schedule: WarmupLinear | None = None,
    speed: Speed = FLOAT32,
) -> None:
    """Train R classifiers (hard or soft targets) together until their budgets are spent or
    the stopping rule stops them. ``budgets[r]`` is run r's stage budget (it ticks).

    Runs are stacked in groups of similar batch width (a full-batch run of 64 rows padded
    to 1,273 would cost 20 times its own work), one group after the other; inside a group,
    runs that have stopped leave the stack at the next check, so the compute follows the
    runs still training. Runs whose stage was trained before (``ssilbench.train.memo``) are
    restored instead; a stage another process is training now is waited for afterwards
    (never while this one holds a stage), then restored or trained here."""
    if sum(map(float_bytes, inputs)) + sum(map(float_bytes, targets)) > STACK_BYTES:
        for r, net in enumerate(nets):
            fit_classifier(net, inputs[r], targets[r], budgets[r], lr=lr,
                           batch_size=batch_sizes[r], seed=seeds[r], rule=rule,
                           schedule=schedule, speed=speed)  # fmt: skip
        return
    keys: dict[int, tuple[StageCache, str]] = {}
    later: list[int] = []
    with contextlib.ExitStack() as held:
        for r, budget in enumerate(budgets):
            cache = reusable(budget)
            if cache is None:
                continue
            key = stage_key(cache, "classifier", nets[r], inputs[r], targets[r], budget, lr=lr,
                            batch_size=batch_sizes[r], seed=seeds[r], rule=rule,
                            schedule=schedule, speed=speed)  # fmt: skip
            if held.enter_context(cache.lease(key, wait=False)) is None:
                later.append(r)  # another process trains it now: wait for it afterwards
            elif not cache.restore(key, nets[r], budget):
                keys[r] = (cache, key)
        todo = [r for r, b in enumerate(budgets) if not b.reused and r not in later]
        _fit_stacked(nets, inputs, targets, budgets, todo, lr=lr, batch_sizes=batch_sizes,
                     seeds=seeds, rule=rule, schedule=schedule, speed=speed)  # fmt: skip
        for r, (cache, key) in keys.items():
            cache.save(key, nets[r], budgets[r])
    for r in later:
        fit_classifier(nets[r], inputs[r], targets[r], budgets[r], lr=lr,
                       batch_size=batch_sizes[r], seed=seeds[r], rule=rule, schedule=schedule,
                       speed=speed)  # fmt: skip


def _fit_stacked(nets, inputs, targets, budgets, todo: list[int], **settings) -> None:
    """The runs ``todo`` stacked, in groups of similar batch width, on materialised data."""
    if not todo:
        return
    batch_sizes = settings.pop("batch_sizes")
    seeds = settings.pop("seeds")
    x = {r: materialise(inputs[r]) for r in todo}
    y = {r: materialise(targets[r]) for r in todo}
    widths = [min(batch_sizes[r], len(x[r])) for r in todo]
    for local in _width_groups(widths):
        group = [todo[i] for i in local]
        _fit_group(
            [nets[r] for r in group],
            [x[r] for r in group],
            [y[r] for r in group],
            [budgets[r] for r in group],
            batch_sizes=[batch_sizes[r] for r in group],
            seeds=[seeds[r] for r in group],
            **settings,
        )


def _width_groups(widths: list[int], slack: float = 1.5) -> list[list[int]]:
    """Run indices grouped so that no run's batch is padded beyond ``slack`` times its width."""
    groups: list[list[int]] = []
    for r in sorted(range(len(widths)), key=lambda r: widths[r]):
        if groups and widths[r] <= slack * widths[groups[-1][0]]:
            groups[-1].append(r)
        else:
            groups.append([r])
    return groups


class _Group:
    """The stacked state of the runs still training: modules, Adam moments, padded data."""

    def __init__(
        self, nets, inputs, targets, samplers, lr: float, runs: list[int], context: Any = None
    ) -> None:
        self.runs = runs  # positions in the caller's lists
        self.context = context
        self.nets = [nets[r] for r in runs]
        self.samplers = [samplers[r] for r in runs]
        self.x, self.mask = _padded([inputs[r] for r in runs])
        self.y, _ = _padded([targets[r] for r in runs])
        self.counts = self.mask.sum(1).cpu()
        self.sizes = torch.tensor([s.batch_size for s in self.samplers])
        self.full = bool((self.sizes >= self.counts).all())
        self.stacked = Stacked(self.nets, context)
        self.optimiser = adam(list(self.stacked.parameters()), lr)

    def without(self, gone: list[int], nets, inputs, targets, samplers, lr: float) -> _Group:
        """The same group minus the runs in ``gone``, moments carried over (Adam is elementwise,
        so the remaining runs' updates do not change)."""
        self.stacked.unstack(self.nets)
        keep = [i for i, r in enumerate(self.runs) if r not in gone]
        runs = [self.runs[i] for i in keep]
        smaller = _Group(nets, inputs, targets, samplers, lr, runs, self.context)
        index = torch.tensor(keep, device=self.x.device)
        old = list(self.stacked.parameters())
        for before, after in zip(old, smaller.stacked.parameters(), strict=True):
            state = self.optimiser.state.get(before)
            if not state:
                continue
            smaller.optimiser.state[after] = {
                k: v.index_select(0, index).clone() if v.dim() and v.shape[0] == len(self.runs)
                else v.clone()
                for k, v in state.items()
            }  # fmt: skip
        return smaller


def _fit_group(
    nets: list[nn.Module],
    inputs: list[torch.Tensor],
    targets: list[torch.Tensor],
    budgets: list[StageBudget],
    *,
    lr: float,
    batch_sizes: list[int],
    seeds: list[int],
    rule: StoppingRule | None,
    schedule: WarmupLinear | None = None,
    speed: Speed = FLOAT32,
) -> None:
    soft = targets[0].is_floating_point()
    totals = {b.stage.steps for b in budgets}
    if schedule is not None and len(totals) > 1:
        raise ValueError("a learning-rate schedule needs equal stage steps across stacked runs")
    # The same minibatches, run by run, as `optimise` draws for a run trained alone.
    samplers = [
        BatchSampler(len(x), size, seed)
        for x, size, seed in zip(inputs, batch_sizes, seeds, strict=True)
    ]
    context = None
    encode = getattr(nets[0], "stacked_encode", None)
    width = max(min(size, len(x)) for size, x in zip(batch_sizes, inputs, strict=True))
    if encode is not None and (encoded := encode(inputs, width)) is not None:
        inputs, context = encoded  # encoded once; runs leaving the stack keep their rows
    g = _Group(nets, inputs, targets, samplers, lr, list(range(len(nets))), context)
    last_loss = {r: float("inf") for r in g.runs}
    steps = max(b.remaining for b in budgets)

    def losses(rows_x, rows_y, rows_mask, with_accuracy=False):
        with speed.autocast():
            logits = g.stacked(rows_x)
        logits = logits.float() if speed.enabled else logits
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
        if g.full:
            batch_x, batch_y, batch_mask = g.x, g.y, g.mask
        else:
            batch_x, batch_y, batch_mask = _minibatch(g)
        optimiser = g.optimiser
        first = budgets[g.runs[0]]
        set_lr(optimiser, lr, schedule, first.used, first.stage.steps)
        optimiser.zero_grad(set_to_none=True)
        losses(batch_x, batch_y, batch_mask).sum().backward()
        optimiser.step()
        if any(_evaluates_next(budgets[r]) for r in g.runs):
            g.stacked.unstack(g.nets)  # periodic evaluation reads the runs' own modules
        for r in g.runs:
            budgets[r].tick()
        gone = [r for r in g.runs if budgets[r].remaining == 0]
        if rule is not None and step % rule.check_every == 0:
            with torch.no_grad():
                current, accuracy = losses(g.x, g.y, g.mask, with_accuracy=True)
            stopping = [
                r for i, r in enumerate(g.runs)
                if r not in gone and rule.converged(last_loss[r], float(current[i]),
                                                    float(accuracy[i]))
            ]  # fmt: skip
            last_loss.update({r: float(current[i]) for i, r in enumerate(g.runs)})
            if stopping:
                g.stacked.unstack(g.nets)  # stopping evaluates the runs' own modules
            for r in stopping:
                budgets[r].stop_early(f"{rule.describe()} (step {budgets[r].used})")
            gone += stopping
        if len(gone) == len(g.runs):
            break
        if gone:
            g = g.without(gone, nets, inputs, targets, samplers, lr)
    g.stacked.unstack(g.nets)


def _minibatch(g: _Group) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each run's own minibatch among its real rows (without replacement), padded."""
    runs, width = len(g.runs), int(g.sizes.max())
    index = torch.zeros(runs, width, dtype=torch.long)
    for i, sampler in enumerate(g.samplers):
        rows = sampler.next()
        rows = torch.arange(int(g.counts[i])) if isinstance(rows, slice) else torch.from_numpy(rows)
        index[i, : len(rows)] = rows
    keep = torch.arange(width)[None, :] < g.sizes[:, None]
    index = index.to(g.x.device)

    def gather(t: torch.Tensor) -> torch.Tensor:
        shaped = index.view(runs, width, *([1] * (t.dim() - 2)))
        return torch.gather(t, 1, shaped.expand(-1, -1, *t.shape[2:]))

    return gather(g.x), gather(g.y), keep.to(g.x.device)


def _evaluates_next(budget: StageBudget) -> bool:
    """Whether the budget's next tick triggers a periodic evaluation of its policy."""
    nxt = budget.used + 1
    return (
        budget.stage.policy
        and budget.policy is not None
        and (nxt % budget.plan.eval_every == 0 or nxt == budget.stage.steps)
    )
