"""What bc, idm_labeling and vm_idm share in training: the networks they build, the stages
they fit, and :class:`Runs`, the group of runs each method's one fit path trains: networks
built from the config's architecture, stacked, or a unified architecture's model, run by
run (their configs' shared fields are in ``ssilbench_baselines.config``)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from ssilbench.api import Architecture, ConfigError, Method, Policy, RunContext
from ssilbench.kit import (
    ClassifierPolicy,
    RoleModel,
    RowSource,
    Standardise,
    Standardised,
    TransitionFrames,
    VMIDMPolicy,
    build_net,
    fit_classifiers,
    label_rows,
    labeled_actions,
    speed_of,
    trainable,
    unified,
)
from ssilbench_baselines.config import warmed_up

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
    """Fit each run's classifier ``nets[r]`` (built from ``arch``) on ``inputs[r]`` and
    ``targets[r]`` as the run's ``stage``, every run stacked into one computation: the
    config's learning rate and batch size (``batch`` if given; None: the architecture's),
    each run's own random stream for the stage, the runs' stopping rule; ``policies[r]`` is
    evaluated during a policy stage. A standardised network's inner part is fitted on the
    scaled inputs. A run's result is the same whatever runs it is stacked with
    (``ssilbench.train.batched``), alone included."""
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
        schedule=warmed_up(arch.lr_schedule, cfg.warmup_steps),
        speed=speed_of(arch, ctxs[0].device),
    )


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


Role = Literal["policy", "idm"]
"""What a model is trained as: a policy pi(a | s) or an IDM h(a | s, s'). A stage of the
same name trains it."""

Data = Literal["labeled", "unlabeled"]
"""Which view a stage reads: D_L, or D_U with labels from an IDM."""

INPUT_OF: dict[Role, InputKind] = {"policy": "obs", "idm": "pair"}


class Runs(ABC):
    """Runs of one method, config and task fitted together (label budgets and seeds
    differ), whatever the config's architecture makes of them: the one fit path of each
    baseline (``BaselineMethod.fit_group``) is written against this, and
    :func:`groups` chooses the form. A lone run is a group of one."""

    unified: ClassVar[bool]

    def __init__(self, ctxs: list[RunContext], arch: Architecture) -> None:
        self.ctxs = ctxs
        self.arch = arch

    @property
    def config(self) -> Any:
        """The config the runs share."""
        return self.ctxs[0].config

    @abstractmethod
    def models(self, *roles: Role) -> list[list[Any]]:
        """For each of ``roles``, every run's untrained model, seeded from the run."""

    @abstractmethod
    def fit(
        self,
        models: list[Any],
        stage: Role,
        data: Data,
        targets: list[Any] | None = None,
        policies: list[Policy] | None = None,
        batch: int | str | None = None,
    ) -> None:
        """Train each run's model as the stage ``stage`` (in the role of that name) on
        ``data``: D_L with its actions, or D_U with ``targets`` (from :meth:`label`);
        ``policies`` are evaluated during a policy stage. ``batch``: a stage's minibatch
        size where the config has one for it (networks only; None: ``batch_size``)."""

    @abstractmethod
    def label(self, idms: list[Any]) -> list[Any]:
        """Each run's D_U labelled by its frozen IDM."""

    @abstractmethod
    def policies(self, nets: list[Any], idms: list[Any] | None = None) -> list[Policy]:
        """The runs' policies sampled from ``nets`` (trained as policies, from ``idms``)."""

    @abstractmethod
    def vm_idm_policies(self, idms: list[Any], videos: list[Any]) -> list[Policy]:
        """The runs' policies pi(a | s) = h(a | s, v(s)): each IDM reads its video model's
        predicted next state."""


class Networks(Runs):
    """Networks built from the config's architecture, one per role and run; every stage
    of every run stacked into one computation (``ssilbench.train.batched``)."""

    unified = False

    def models(self, *roles: Role) -> list[list[nn.Module]]:
        # A run's networks are built in one seeded block, in the order of ``roles``.
        built = [networks(ctx, self.arch, *(INPUT_OF[r] for r in roles)) for ctx in self.ctxs]
        return [list(per_role) for per_role in zip(*built, strict=True)]

    def fit(self, models, stage, data, targets=None, policies=None, batch=None) -> None:
        frames = self._unlabeled if data == "unlabeled" else self._frames(data)
        inputs = [f.inputs(INPUT_OF[stage]) for f in frames]
        if targets is None:
            targets = [labeled_actions(ctx.labeled, ctx.device) for ctx in self.ctxs]
        fit_stages(self.ctxs, self.arch, models, inputs, targets, stage, policies, batch)

    def label(self, idms: list[nn.Module]) -> list[RowSource]:
        """Action probabilities, computed once per IDM and kept in the stage cache."""
        labels = []
        for ctx, idm, frames in zip(self.ctxs, idms, self._unlabeled, strict=True):
            speed = speed_of(self.arch, ctx.device)
            labels.append(label_rows(ctx.plan.cache, idm.eval(), frames.inputs("pair"),
                                     ctx.device, speed))  # fmt: skip
        return labels

    def policies(self, nets, idms=None) -> list[Policy]:
        idms = idms or [None] * len(nets)
        return [ClassifierPolicy(net, idm=idm) for net, idm in zip(nets, idms, strict=True)]

    def vm_idm_policies(self, idms, videos) -> list[Policy]:
        return [VMIDMPolicy(idm, video) for idm, video in zip(idms, videos, strict=True)]

    def _frames(self, data: Data) -> list[TransitionFrames]:
        return [TransitionFrames(getattr(ctx, data), ctx.device) for ctx in self.ctxs]

    @cached_property
    def _unlabeled(self) -> list[TransitionFrames]:
        # Read once: an IDM labels D_U's transitions and a policy then trains on its states.
        return self._frames("unlabeled")


class Unified(Runs):
    """A unified architecture's model (e.g. UVA) for each run, trained in each role; the
    model trains with a loop of its own, run by run."""

    unified = True

    def models(self, *roles: Role) -> list[list[RoleModel]]:
        # The first role's model is the run's; the others are fresh copies of its
        # initialisation (IDM labeling's policy starts where its IDM started).
        cfg = self.config
        built = []
        for ctx in self.ctxs:
            model = unified(ctx, cfg.arch, cfg.arch_options)
            built.append([model, *(model.fresh() for _ in roles[1:])])
        return [list(per_role) for per_role in zip(*built, strict=True)]

    def fit(self, models, stage, data, targets=None, policies=None, batch=None) -> None:
        targets = targets or [None] * len(models)
        policies = policies or [None] * len(models)
        for ctx, model, labels, policy in zip(self.ctxs, models, targets, policies, strict=True):
            train_role(ctx, model, stage, getattr(ctx, data), stage, policy, labels)

    def label(self, idms: list[RoleModel]) -> list[Any]:
        """What the model labels with (UVA: an action chunk per window)."""
        return [idm.label(ctx.unlabeled) for ctx, idm in zip(self.ctxs, idms, strict=True)]

    def policies(self, nets, idms=None) -> list[Policy]:
        return [model.policy("policy") for model in nets]

    def vm_idm_policies(self, idms, videos) -> list[Policy]:
        # A video model of None: the IDM predicts its own future.
        return [idm.policy("vm_idm", video=v) for idm, v in zip(idms, videos, strict=True)]


def groups(ctxs: list[RunContext]) -> list[Runs]:
    """The runs of a unit as groups fitted together: every run stacked where the config's
    architecture builds networks; one run at a time for a unified architecture, whose
    model is large and trains with a loop of its own (so one run's models are in memory
    at once)."""
    arch = ctxs[0].architecture(ctxs[0].config.arch)
    if arch.unified:
        return [Unified([ctx], arch) for ctx in ctxs]
    return [Networks(ctxs, arch)]


class BaselineMethod(Method):
    """A method whose config names its network (``arch``): networks built from that
    architecture, or the one model of a unified architecture (e.g. UVA), trained in the
    same stages. Each method writes its training once, :meth:`fit_group`, over a group of
    runs; a lone run is a group of one."""

    batched: ClassVar[bool] = True

    def fit(self, ctx: RunContext) -> Policy:
        [policy] = self.fit_many([ctx])
        return policy

    def fit_many(self, ctxs: list[RunContext]) -> list[Policy]:
        return [policy for runs in groups(ctxs) for policy in self.fit_group(runs)]

    @abstractmethod
    def fit_group(self, runs: Runs) -> list[Policy]:
        """Every run's stages, in order, over the group; a policy per run, in order."""
