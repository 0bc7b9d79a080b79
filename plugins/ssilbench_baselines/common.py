"""What bc, idm_labeling and vm_idm share in training: the choice between networks built
from the config's architecture and a unified architecture's one model, the networks, and
the stages they fit (their configs' shared fields are in ``ssilbench_baselines.config``)."""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from ssilbench.api import Architecture, ConfigError, Method, Policy, RunContext
from ssilbench.kit import (
    RoleModel,
    RowSource,
    Standardise,
    Standardised,
    TransitionFrames,
    build_net,
    fit_classifiers,
    labeled_actions,
    speed_of,
    trainable,
)

if TYPE_CHECKING:
    from torch import nn

    from ssilbench.api import LabeledView, UnlabeledView


InputKind = Literal["obs", "pair"]
"""What a network reads: a state (a policy) or a transition's (s, s') stacked (an IDM)."""


def networks(ctx: RunContext, arch: Architecture, *inputs: InputKind) -> list[nn.Module]:
    """Networks from ``arch`` with one output per action, one for each of ``inputs``: on
    observations (``"obs"``: a policy) or on (s, s') pairs (``"pair"``: an IDM), without the
    goal features where the config's ``use_goal`` says so. Built in this order under the
    run's seed, on its device, in the architecture's speed; each behind its input scaler
    where the config's ``standardise`` asks for one."""
    spec, use_goal = ctx.spec, ctx.config.use_goal
    with ctx.seeded():
        nets = [
            build_net(arch, spec, spec.num_actions, paired=kind == "pair", use_goal=use_goal)
            for kind in inputs
        ]
    speed = speed_of(arch, ctx.device)
    return [
        standardised(ctx, kind, speed.module(net.to(ctx.device)))
        for kind, net in zip(inputs, nets, strict=True)
    ]


def standardised(ctx: RunContext, kind: InputKind, net: nn.Module) -> nn.Module:
    """``net`` behind the scaler of its inputs over D_L or every transition (the config's
    ``standardise``), or ``net`` itself when the config asks for raw inputs."""
    over = ctx.config.standardise
    if over == "none":
        return net
    if len(ctx.spec.obs_shape) != 1:
        raise ConfigError(
            f"standardise={over!r} applies to vector observations; this environment's are "
            f"{ctx.spec.obs_kind}s of shape {tuple(ctx.spec.obs_shape)}. Use standardise=none."
        )
    view = ctx.labeled if over == "labeled" else ctx.unlabeled
    scaler = Standardise.fit(TransitionFrames(view, ctx.device).inputs(kind))
    return Standardised(scaler.to(ctx.device), net)


def batch_size(setting: int | str | None, arch: Architecture, rows: int) -> int:
    """A stage's minibatch size: the config's number, every row ('full'), or the
    architecture's rule for ``rows`` (None)."""
    if setting == "full":
        return rows
    return setting or arch.batch_size(rows)


def fit_stage(
    ctx: RunContext,
    arch: Architecture,
    net: nn.Module,
    inputs: RowSource,
    targets: RowSource,
    stage: str,
    policy: Policy | None = None,
    batch: int | str | None = None,
) -> None:
    """Fit the classifier ``net`` (built from ``arch``) as the run's ``stage``: the config's
    learning rate and batch size (``batch`` if given; None: the architecture's), the stage's
    own random stream, the run's stopping rule; ``policy`` is evaluated during a policy
    stage. A standardised network's inner part is fitted on the scaled inputs. The run
    takes the stacked path as a group of one, so that its result is the same as when it is
    stacked with other runs (``ssilbench.train.batched``)."""
    fit_stages([ctx], arch, [net], [inputs], [targets], stage, [policy], batch)


def fit_stages(
    ctxs: list[RunContext],
    arch: Architecture,
    nets: list[nn.Module],
    inputs: list[RowSource],
    targets: list[RowSource],
    stage: str,
    policies: list[Policy] | None = None,
    batch: int | str | None = None,
) -> None:
    """:func:`fit_stage` for runs that differ only in budget and seed, stacked into one
    computation."""
    cfg = ctxs[0].config
    evaluated = policies or [None] * len(ctxs)
    parts = [trainable(net, x) for net, x in zip(nets, inputs, strict=True)]
    nets, inputs = [net for net, _ in parts], [x for _, x in parts]
    fit_classifiers(
        nets,
        inputs,
        targets,
        [ctx.plan.stage(stage, policy=p) for ctx, p in zip(ctxs, evaluated, strict=True)],
        lr=cfg.lr or arch.lr,
        batch_sizes=[batch_size(batch or cfg.batch_size, arch, len(x)) for x in inputs],
        seeds=[ctx.stream_seed(stage) for ctx in ctxs],
        rule=ctxs[0].stopping,
        schedule=arch.lr_schedule,
        speed=speed_of(arch, ctxs[0].device),
    )


def fit_labeled(
    ctx: RunContext,
    arch: Architecture,
    net: nn.Module,
    kind: InputKind,
    stage: str,
    policy: Policy | None = None,
    batch: int | str | None = None,
) -> None:
    """:func:`fit_stage` on D_L: ``net`` reads each transition's ``kind`` input (``"obs"``,
    or ``"pair"``: (s, s') stacked, for an IDM) and predicts its action."""
    inputs = TransitionFrames(ctx.labeled, ctx.device).inputs(kind)
    actions = labeled_actions(ctx.labeled, ctx.device)
    fit_stage(ctx, arch, net, inputs, actions, stage, policy, batch)


def fit_labeled_stacked(
    ctxs: list[RunContext],
    arch: Architecture,
    nets: list[nn.Module],
    kind: InputKind,
    stage: str,
    policies: list[Policy] | None = None,
    batch: int | str | None = None,
) -> None:
    """:func:`fit_labeled` for every run, stacked into one computation."""
    inputs = [TransitionFrames(ctx.labeled, ctx.device).inputs(kind) for ctx in ctxs]
    actions = [labeled_actions(ctx.labeled, ctx.device) for ctx in ctxs]
    fit_stages(ctxs, arch, nets, inputs, actions, stage, policies, batch)


class BaselineMethod(Method):
    """A method whose config names its network (``arch``): it trains networks built from
    that architecture, run by run or stacked, or the one model of a unified architecture
    (e.g. UVA) in the same stages, run by run."""

    batched: ClassVar[bool] = True

    def fit(self, ctx: RunContext) -> Policy:
        arch = ctx.architecture(ctx.config.arch)
        return self._fit_unified(ctx) if arch.unified else self._fit_networks(ctx, arch)

    def fit_many(self, ctxs: list[RunContext]) -> list[Policy]:
        arch = ctxs[0].architecture(ctxs[0].config.arch)
        if arch.unified:
            return [self._fit_unified(ctx) for ctx in ctxs]
        return self._fit_stacked(ctxs, arch)

    @abstractmethod
    def _fit_networks(self, ctx: RunContext, arch: Architecture) -> Policy:
        """The run's networks built from ``arch``, trained stage by stage."""

    @abstractmethod
    def _fit_stacked(self, ctxs: list[RunContext], arch: Architecture) -> list[Policy]:
        """:meth:`_fit_networks` for every run, each stage stacked into one computation."""

    @abstractmethod
    def _fit_unified(self, ctx: RunContext) -> Policy:
        """The same stages with the unified architecture's one model."""


def train_role(
    ctx: RunContext,
    model: RoleModel,
    role: str,
    view: LabeledView | UnlabeledView,
    stage: str,
    policy: Policy | None = None,
    labels: Any = None,
) -> None:
    """Train a unified ``model`` in ``role`` on ``view`` as the run's ``stage``, with the
    stage's own random stream and the run's stopping rule; ``labels`` (from
    ``RoleModel.label``) are the targets of an unlabeled view."""
    model.train([role], view, ctx.plan.stage(stage, policy=policy),
                seed=ctx.stream_seed(stage), labels=labels, rule=ctx.stopping)  # fmt: skip
