"""Many small runs trained as one computation, with one stopping rule for every method.

The paper's maze studies train hundreds of tiny networks (seeds x label budgets x methods).
Each is far too small to keep a CPU busy, so runs that share an architecture are stacked:
their parameters get a leading run axis (``torch.func.stack_module_state``) and one
``vmap``-ed forward pass serves all of them. The loss is the *sum* of the runs' own losses
and Adam is elementwise, so every run follows the updates it would get alone.

A run's result must not depend on which other runs happen to be trained with it, so every
run trained here, a group of one included, takes this same path, and a group is canonical:

- a run's rows (and minibatch) are padded to a width that is a function of its own size
  (:func:`padded_width`), and only runs of the same widths, shapes and progress share a
  group: float reductions over rows group their terms by the row count, so padding to the
  widest run of a group would make a run's sums depend on the others;
- a module's fast path (``stacked_encode``) encodes each run's data on its own (its own
  table of distinct rows, padded likewise), never one table for the group;
- Adam is written with elementwise operations only (:class:`StackedAdam`): the fused and
  ``lerp``/``addcmul`` kernels treat a vectorised body and a scalar tail differently, so
  an element's update would depend on its position in the stacked tensor;
- the stopping rule's full training loss is taken run by run.

Batched ``vmap`` kernels then compute each run's block on its own: on CPU, with a fixed
torch version and thread count, a run's numbers are the same whatever it is stacked with,
alone, in a pool worker, or resumed from a checkpoint (the run's training state is saved
every ``checkpoints.every`` steps, as ``ssilbench.train.loop.optimise`` does).

Runs that stop early (``ssilbench.train.loop.StoppingRule``) leave the stack while the
others go on.

A module may bring its own stacked computation: ``stacked_encode(inputs, batch)`` turns
input tensors into rows of a table (its context) once, knowing the minibatch size (or
returns None to decline), and ``stacked_forward(params, rows, context)`` computes every
copy's outputs from its stacked parameters; it must compute the same function as the
module's own forward. Here each run is encoded on its own and the copies are ``vmap``-ed
over their own tables.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ssilbench.data.batches import RowSource, float_bytes, materialise
from ssilbench.stages import StageBudget, StoppingRule, WarmupLinear
from ssilbench.train.loop import BatchSampler
from ssilbench.train.memo import StageCache, reusable, stage_key
from ssilbench.train.speed import FLOAT32, Speed
from ssilbench.train.stacking import Stacked, StackedAdam, padded_stack, padded_width
from ssilbench.train.supervised import fit_classifier

STACK_BYTES = 512 * 2**20
"""Runs are stacked only when their inputs and targets, as floats, fit in this many bytes
(a larger run, images at the paper's scale, trains on its own, reading its minibatches from
the store); stacked runs are materialised this many bytes at a time."""

TRAINER = "classifier:stacked"
"""The stage cache's name for a classifier trained here (the arithmetic differs from
``fit_classifier``'s, so their entries must not stand in for each other)."""

CHECKPOINT_FORMAT = "stacked"


@dataclass(eq=False)
class _Run:
    """One run of a stacked fit: its data (or its fast path's rows and table), sampler and
    optimiser state while it is out of a group."""

    net: nn.Module
    x: torch.Tensor  # inputs, or rows of ``table``
    y: torch.Tensor
    budget: StageBudget
    sampler: BatchSampler
    table: torch.Tensor | None = None
    previous: float = float("inf")  # the stopping rule's last full loss
    moments: dict[str, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)

    @property
    def width(self) -> int:
        return padded_width(self.sampler.batch_size)

    @property
    def full(self) -> bool:
        return self.sampler.batch_size >= len(self.x)

    def group_key(self) -> tuple:
        """Runs with equal keys compute the same shapes in lockstep: only they share a group."""
        table = None if self.table is None else (tuple(self.table.shape), self.table.dtype)
        return (self.width, self.full, tuple(self.x.shape[1:]), self.x.dtype,
                tuple(self.y.shape[1:]), self.y.dtype, table)  # fmt: skip


class _Group:
    """The stacked state of the runs still training: modules, Adam moments, padded data."""

    def __init__(self, runs: list[_Run], lr: float) -> None:
        self.runs = runs
        self.width = runs[0].width
        self.full = runs[0].full
        self.x, self.mask = padded_stack([r.x for r in runs], self.width)
        self.y, _ = padded_stack([r.y for r in runs], self.width)
        self.tables = None if runs[0].table is None else torch.stack([r.table for r in runs])
        self.counts = self.mask.sum(1).cpu()
        self.stacked = Stacked([r.net for r in runs])
        self.names = list(self.stacked.params)
        params = [self.stacked.params[k] for k in self.names]
        moments = None
        if runs[0].moments:
            moments = tuple(
                [torch.stack([r.moments[k][j] for r in runs]) for k in self.names]
                for j in (0, 1)
            )  # fmt: skip
        self.optimiser = StackedAdam(params, lr, runs[0].budget.used, moments)

    def forward(self, x: torch.Tensor, member: tuple | None = None) -> torch.Tensor:
        """Every run's outputs on ``x``, or with ``member`` (from :meth:`member`) one run's."""
        if member is not None:
            return self.stacked.apply_to(*member[:2], x, member[2])
        params, buffers = self.stacked._state()
        return self.stacked.apply_to(params, buffers, x, self.tables)

    def losses(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        mask: torch.Tensor,
        speed: Speed,
        member: tuple | None = None,
        with_accuracy: bool = False,
    ) -> Any:
        """Each run's mean loss over its real rows (``mask``); with ``with_accuracy``, (losses,
        accuracies) on the CPU. ``member`` (from :meth:`member`): one run's alone."""
        soft = self.runs[0].y.is_floating_point()  # one dtype per group (its key says so)
        with speed.autocast():
            logits = self.forward(x, member)
        logits = logits.float() if speed.enabled else logits
        if soft:
            per = -(y * F.log_softmax(logits, dim=-1)).sum(-1)
        else:
            per = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none")
            per = per.view(mask.shape)
        count = mask.sum(1).clamp_min(1)
        loss = (per * mask).sum(1) / count
        if not with_accuracy:
            return loss
        wanted = y.argmax(-1) if soft else y
        right = ((logits.argmax(-1) == wanted) & mask).sum(1) / count
        return loss.cpu(), right.cpu()

    def store(self, runs: list[_Run] | None = None) -> None:
        """Copy the parameters and Adam moments of ``runs`` (all: None) back into them."""
        self.stacked.unstack([r.net for r in self.runs])
        with torch.no_grad():
            for i, run in enumerate(self.runs):
                if runs is None or run in runs:
                    first, second = self.optimiser.moments()
                    run.moments = {
                        k: (m[i].clone(), v[i].clone())
                        for k, m, v in zip(self.names, first, second, strict=True)
                    }

    def member(self, i: int) -> tuple[dict, dict, torch.Tensor | None]:
        """Run i's parameters, buffers (and table) alone, as a group of one holds them."""
        params, buffers = self.stacked._state()
        single = {k: v[i : i + 1].detach().clone() for k, v in params.items()}
        own = {k: v[i : i + 1] for k, v in buffers.items()}
        table = None if self.tables is None else self.tables[i : i + 1]
        return single, own, table

    def checkpoint(self, i: int) -> dict[str, Any]:
        """Run i's training state, for ``RunCheckpoints.save``."""
        run = self.runs[i]
        adam = self.optimiser
        moments = dict(zip(self.names, zip(*adam.moments(), strict=True), strict=True))
        return {
            "format": CHECKPOINT_FORMAT,
            "params": {k: self.stacked.params[k][i].detach().cpu().clone() for k in self.names},
            "exp_avg": {k: m[i].cpu().clone() for k, (m, _) in moments.items()},
            "exp_avg_sq": {k: v[i].cpu().clone() for k, (_, v) in moments.items()},
            "sampler": run.sampler.state(),
            "used": run.budget.used,
            "global_step": run.budget.plan.global_step,
            "previous": run.previous,
        }


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

    Runs are stacked in groups of equal padded width (a full-batch run of 64 rows padded to
    1,273 would cost 20 times its own work, and padding would change its sums), one group
    after the other; inside a group, runs that have stopped leave the stack at the next
    check, so the compute follows the runs still training. Runs whose stage was trained
    before (``ssilbench.train.memo``) are restored instead; a stage another process is
    training now is waited for afterwards (never while this one holds a stage), then
    restored or trained here. A run's result is the same whichever runs it is given with."""
    settings = dict(lr=lr, batch_sizes=batch_sizes, seeds=seeds, rule=rule, schedule=schedule,
                    speed=speed)  # fmt: skip
    streamed = [r for r in range(len(nets))
                if float_bytes(inputs[r]) + float_bytes(targets[r]) > STACK_BYTES]  # fmt: skip
    for r in streamed:
        fit_classifier(nets[r], inputs[r], targets[r], budgets[r], lr=lr,
                       batch_size=batch_sizes[r], seed=seeds[r], rule=rule,
                       schedule=schedule, speed=speed)  # fmt: skip
    keys: dict[int, tuple[StageCache, str]] = {}
    later: list[int] = []
    with contextlib.ExitStack() as held:
        for r, budget in enumerate(budgets):
            cache = None if r in streamed else reusable(budget)
            if cache is None:
                continue
            key = stage_key(cache, TRAINER, nets[r], inputs[r], targets[r], budget, lr=lr,
                            batch_size=batch_sizes[r], seed=seeds[r], rule=rule,
                            schedule=schedule, speed=speed)  # fmt: skip
            keys[r] = (cache, key)
            if held.enter_context(cache.lease(key, wait=False)) is None:
                later.append(r)  # another process trains it now: wait for it afterwards
            elif cache.restore(key, nets[r], budget):
                del keys[r]
        todo = [r for r, b in enumerate(budgets)
                if r not in streamed and not b.reused and r not in later]  # fmt: skip
        _fit_stacked(nets, inputs, targets, budgets, todo, **settings)
        for r in todo:
            if r in keys:
                keys[r][0].save(keys[r][1], nets[r], budgets[r])
    for r in later:
        cache, key = keys[r]
        with cache.lease(key):
            if not cache.restore(key, nets[r], budgets[r]):
                _fit_stacked(nets, inputs, targets, budgets, [r], **settings)
                cache.save(key, nets[r], budgets[r])


def _fit_stacked(nets, inputs, targets, budgets, todo: list[int], **settings) -> None:
    """The runs ``todo`` on materialised data, at most STACK_BYTES at a time, in groups of
    runs that compute the same shapes."""
    chunk: list[int] = []
    held = 0
    for r in todo:
        size = float_bytes(inputs[r]) + float_bytes(targets[r])
        if chunk and held + size > STACK_BYTES:
            _fit_chunk(nets, inputs, targets, budgets, chunk, **settings)
            chunk, held = [], 0
        chunk.append(r)
        held += size
    if chunk:
        _fit_chunk(nets, inputs, targets, budgets, chunk, **settings)


def _fit_chunk(
    nets, inputs, targets, budgets, todo: list[int], *, lr, batch_sizes, seeds, rule,
    schedule=None, speed=FLOAT32,
) -> None:  # fmt: skip
    encode = getattr(nets[todo[0]], "stacked_encode", None)
    encoded: dict[tuple[int, int], Any] = {}  # one encoding per input tensor and width
    groups: dict[tuple, list[_Run]] = {}
    for r in todo:
        x, y = materialise(inputs[r]), materialise(targets[r])
        # The same minibatches as `optimise` draws for a run trained alone.
        run = _Run(nets[r], x, y, budgets[r], BatchSampler(len(x), batch_sizes[r], seeds[r]))
        if encode is not None:
            memo = (id(x), run.sampler.batch_size)
            if memo not in encoded:
                encoded[memo] = encode([x], run.sampler.batch_size)
            if encoded[memo] is not None:
                [rows], table = encoded[memo]
                run.x, run.table = rows, padded_stack([table], padded_width(len(table)))[0][0]
        _resume(run)
        groups.setdefault(run.group_key(), []).append(run)
    ordered = list(groups.values())
    _say_queued(ordered)
    for j, runs in enumerate(ordered):
        if j:  # the groups before it are through this stage: they wait, not train
            _say_trained(ordered[:j], f"stacked group {j + 1} of {len(ordered)} trains")
        _fit_catching_up(runs, lr=lr, rule=rule, schedule=schedule, speed=speed)


def _say_queued(groups: list[list[_Run]]) -> None:
    """Runs whose group trains after another are queued, and their progress says so (not
    "preparing data"): with a dataset per seed, a unit's runs often fall in several groups."""
    for k, runs in enumerate(groups[1:], start=2):
        for run in runs:
            _queued(run, f"stacked group {k} of {len(groups)}")


def _say_trained(groups: list[list[_Run]], which: str) -> None:
    """Runs through this stage while a later group trains it say so: a run whose last word
    was its training would seem to train on at a frozen step, its time left growing."""
    for run in (run for runs in groups for run in runs):
        _queued(run, f"{run.budget.stage.name} trained, {which}")


def _queued(run: _Run, detail: str) -> None:
    """The run's progress says it is queued (``detail``: behind what), where it is watched."""
    if (watch := run.budget.plan.telemetry) is not None:
        watch.phase("queued", detail)


def _fit_catching_up(runs: list[_Run], **settings: Any) -> None:
    """Runs of one shape resumed from different steps: those furthest behind train until
    they reach the next runs' step and then go on with them, so a unit stopped while its
    runs stood at different checkpoints costs the steps of its slowest run, not the sum of
    its groups'. Regrouping keeps every run's numbers (see the module's docstring)."""
    waiting = sorted(runs, key=lambda r: r.budget.used)
    while waiting:
        step = waiting[0].budget.used
        moving = [r for r in waiting if r.budget.used == step]
        ahead = [r.budget.used for r in waiting if r.budget.used > step]
        _fit_group(moving, until=min(ahead) if ahead else None, **settings)
        waiting = sorted((r for r in waiting if r.budget.remaining), key=lambda r: r.budget.used)


def _resume(run: _Run) -> None:
    """Continue the run from its checkpoint of this stage, if it has one."""
    budget = run.budget
    checkpoints = budget.plan.checkpoints
    if checkpoints is None:
        return
    state = checkpoints.load(budget.stage.name, CHECKPOINT_FORMAT)
    if state is None:
        return
    device = next(run.net.parameters()).device
    with torch.no_grad():
        for name, value in run.net.named_parameters():
            value.copy_(state["params"][name.replace(".", "/")])
    # Checkpoints load onto the CPU; the stacked Adam steps its moments beside the parameters.
    run.moments = {k: (state["exp_avg"][k].to(device), state["exp_avg_sq"][k].to(device))
                   for k in state["exp_avg"]}  # fmt: skip
    run.sampler.load_state(state["sampler"])
    budget.used, budget.plan.global_step = state["used"], state["global_step"]
    budget.resumed_from = budget.used
    run.previous = state["previous"]


def _fit_group(
    runs: list[_Run],
    *,
    lr: float,
    rule: StoppingRule | None,
    schedule: WarmupLinear | None = None,
    speed: Speed = FLOAT32,
    until: int | None = None,
) -> None:
    """Train ``runs`` (same shapes, same step) in lockstep until each has spent its budget or
    stopped, or, with ``until``, until they reach that step (their state is then in them)."""
    totals = {r.budget.stage.steps for r in runs}
    if schedule is not None and len(totals) > 1:
        raise ValueError("a learning-rate schedule needs equal stage steps across stacked runs")
    g = _Group(runs, lr)
    while True:
        used = _train_step(g, lr, schedule, speed)
        gone = [r for r in g.runs if r.budget.remaining == 0]
        if rule is not None and used % rule.check_every == 0:
            gone += _stopped(g, rule, speed, gone)
        _save_checkpoints(g, used)
        if len(gone) == len(g.runs) or used == until:
            break
        if gone:
            keep = [r for r in g.runs if r not in gone]
            _say_trained([gone], "its stacked group trains on")
            g.store(keep)
            g = _Group(keep, lr)
    g.store()


def _train_step(g: _Group, lr: float, schedule: WarmupLinear | None, speed: Speed) -> int:
    """One optimiser step of every run of the group, its budgets ticked and its training
    losses reported; returns the step the runs stand at now."""
    budget = g.runs[0].budget  # the runs of a group are in lockstep
    if schedule is not None:
        g.optimiser.lr = lr * schedule.factor(budget.used, budget.stage.steps)
    batch = (g.x, g.y, g.mask) if g.full else _minibatch(g)
    g.optimiser.zero_grad()
    per_run = g.losses(*batch, speed)
    per_run.sum().backward()
    g.optimiser.step()
    if any(_evaluates_next(r.budget) for r in g.runs):
        g.stacked.unstack([r.net for r in g.runs])  # evaluation reads the runs' modules
    for run in g.runs:
        run.budget.tick()
    per_run = per_run.detach()
    for i, run in enumerate(g.runs):  # progress and loss curves: read, never changed
        if (watch := run.budget.plan.telemetry) is not None:
            watch.train_loss(run.budget.stage.name, run.budget.plan.global_step, per_run, i)
    return budget.used


def _stopped(g: _Group, rule: StoppingRule, speed: Speed, gone: list[_Run]) -> list[_Run]:
    """The runs of the group (those not ``gone`` already) the stopping rule stops now, each
    stopped with the rule's reason; every run checked keeps its full loss for the next check."""
    stopping = []
    for i, run in enumerate(g.runs):
        if run in gone:
            continue
        # Run by run, on its own rows: the same sums in a group of any size.
        mask = torch.ones(1, len(run.x), dtype=torch.bool, device=run.x.device)
        with torch.no_grad():
            current, accuracy = g.losses(run.x[None], run.y[None], mask, speed, g.member(i),
                                         with_accuracy=True)  # fmt: skip
        if rule.converged(run.previous, float(current[0]), float(accuracy[0])):
            stopping.append(run)
        run.previous = float(current[0])
    if stopping:
        g.stacked.unstack([r.net for r in g.runs])  # stopping evaluates the modules
    for run in stopping:
        run.budget.stop_early(f"{rule.describe()} (step {run.budget.used})")
    return stopping


def _save_checkpoints(g: _Group, used: int) -> None:
    """Checkpoint the runs that go on training, at their checkpoints' interval."""
    for i, run in enumerate(g.runs):
        checkpoints = run.budget.plan.checkpoints
        if checkpoints is not None and run.budget.remaining and used % checkpoints.every == 0:
            checkpoints.save(run.budget.stage.name, g.checkpoint(i))


def _minibatch(g: _Group) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each run's own minibatch among its real rows (without replacement), padded."""
    runs, width = len(g.runs), g.width
    index = torch.zeros(runs, width, dtype=torch.long)
    keep = torch.zeros(runs, width, dtype=torch.bool)
    for i, run in enumerate(g.runs):
        rows = run.sampler.next()
        rows = torch.arange(int(g.counts[i])) if isinstance(rows, slice) else torch.from_numpy(rows)
        index[i, : len(rows)] = rows
        keep[i, : len(rows)] = True
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
