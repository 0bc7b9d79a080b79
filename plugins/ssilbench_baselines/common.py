"""What bc, idm_labeling and vm_idm share: config fields that mean the same in each, the
choice between their networks and a unified architecture's model, and the stages they fit.

The fields are annotated types rather than fields of a base model, so that every config
keeps its own order of fields (a learned video model's shared-stage identity is the config
as JSON).
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from ssilbench.api import Architecture, ArchOptions, Method, Policy, RunContext
from ssilbench.kit import RoleModel, RowSource, fit_classifier, fit_classifiers, speed_of

if TYPE_CHECKING:
    from torch import nn

    from ssilbench.api import LabeledView, UnlabeledView


class MethodConfig(BaseModel):
    """A baseline's config: unknown keys are refused."""

    model_config = ConfigDict(extra="forbid")


LearningRate = Annotated[
    float | None, Field(gt=0, description="Adam learning rate; None = architecture's.")
]
StageBatchSize = Annotated[
    int | None,
    Field(ge=1, description="Minibatch size; None = architecture's rule for each stage's data."),
]
UnifiedOptions = Annotated[
    ArchOptions,
    Field(default_factory=dict, description="Settings of a unified architecture (e.g. UVA's)."),
]


def fit_stage(
    ctx: RunContext,
    arch: Architecture,
    net: nn.Module,
    inputs: RowSource,
    targets: RowSource,
    stage: str,
    policy: Policy | None = None,
) -> None:
    """Fit the classifier ``net`` (built from ``arch``) as the run's ``stage``: the config's
    learning rate and batch size (None: the architecture's), the stage's own random stream,
    the run's stopping rule; ``policy`` is evaluated during a policy stage."""
    cfg = ctx.config
    fit_classifier(
        net, inputs, targets, ctx.plan.stage(stage, policy=policy),
        lr=cfg.lr or arch.lr,
        batch_size=cfg.batch_size or arch.batch_size(len(inputs)),
        seed=ctx.stream_seed(stage),
        rule=ctx.stopping,
        schedule=arch.lr_schedule,
        speed=speed_of(arch, ctx.device),
    )  # fmt: skip


def fit_stages(
    ctxs: list[RunContext],
    arch: Architecture,
    nets: list[nn.Module],
    inputs: list[RowSource],
    targets: list[RowSource],
    stage: str,
    policies: list[Policy] | None = None,
) -> None:
    """:func:`fit_stage` for runs that differ only in budget and seed, stacked into one
    computation."""
    cfg = ctxs[0].config
    evaluated = policies or [None] * len(ctxs)
    fit_classifiers(
        nets,
        inputs,
        targets,
        [ctx.plan.stage(stage, policy=p) for ctx, p in zip(ctxs, evaluated, strict=True)],
        lr=cfg.lr or arch.lr,
        batch_sizes=[cfg.batch_size or arch.batch_size(len(x)) for x in inputs],
        seeds=[ctx.stream_seed(stage) for ctx in ctxs],
        rule=ctxs[0].stopping,
        schedule=arch.lr_schedule,
        speed=speed_of(arch, ctxs[0].device),
    )


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
