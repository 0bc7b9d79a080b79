"""Unified models: one network that the methods train as a policy, an IDM or a video model.

A classifier-based method builds separate networks from an architecture: a policy, an IDM,
a video model. A *unified* architecture (``Architecture.unified``; UVA is one) provides a
single model instead, trained in a role by masking its inputs and sampled either as a policy
directly or as a video model followed by its own IDM. BC, IDM labeling and VM-IDM reach such
a model only through :class:`RoleModel`, so each of them stays one module for every
architecture and the unified model's machinery stays in its plugin.

Roles every unified model understands:

- ``policy``: actions from the current observation (history) alone;
- ``idm``: actions from the observation and the next ones (inverse dynamics);
- ``video``: future observations from the current ones (a video model).

A model may accept more (UVA: ``forward`` and ``full`` dynamics).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

from ssilbench.api import Architecture, ConfigError, EnvSpec, Policy, RunContext

if TYPE_CHECKING:
    from ssilbench.api import LabeledView, StageBudget, StoppingRule, UnlabeledView

SamplingPath = Literal["policy", "vm_idm"]


class RoleModel(ABC):
    """One network trained in several roles (see the module docstring)."""

    @abstractmethod
    def train(
        self,
        roles: Sequence[str],
        view: LabeledView | UnlabeledView,
        budget: StageBudget,
        *,
        seed: int,
        labels: Any = None,
        rule: StoppingRule | None = None,
    ) -> float:
        """Train for the stage's steps, one role drawn per minibatch; returns the last loss.

        ``seed`` seeds the stage's random streams (minibatches, roles, noise): a method
        passes ``ctx.stream_seed(name)`` of the stream it names after the stage's role.
        Roles that predict actions take their targets from a labeled view, or from
        ``labels`` (what :meth:`label` returned) for an unlabeled view. ``rule`` may end
        the stage early (``--stop-early``), as for every other method."""

    @abstractmethod
    def label(self, view: UnlabeledView) -> Any:
        """Action labels for every transition of ``view``, from the model as an IDM."""

    @abstractmethod
    def policy(self, path: SamplingPath, video: RoleModel | None = None) -> Policy:
        """The model as a policy: sampled as one (``policy``), or as a video model whose
        predicted future the model then reads as an IDM (``vm_idm``). With ``video``
        (``vm_idm`` only), that other model predicts the future and this one is the IDM:
        the paper's pairing of an IDM with the initial video model."""

    @abstractmethod
    def fresh(self) -> RoleModel:
        """A second model from the same initialisation (IDM labeling's policy)."""


class UnifiedArchitecture(Architecture):
    """An architecture whose networks are :class:`RoleModel` s rather than modules."""

    unified = True
    Options: type[BaseModel]
    """Its settings (model size, pretrained files, pretraining), given by a method's
    ``arch_options`` config."""

    def build(self, in_shape: tuple[int, ...], out: int):
        raise ConfigError(
            f"{type(self).__name__} is a unified model: methods use it through role_model()."
        )

    def check(self, spec: EnvSpec, options: BaseModel) -> None:
        """Refuse (ConfigError) options that cannot work for this task, before any run
        starts: missing or mismatched checkpoint files, sizes the task's images cannot take."""

    @abstractmethod
    def role_model(self, ctx: RunContext, options: BaseModel) -> RoleModel:
        """The model for one run, at its shared initialisation (e.g. pretrained on D_U)."""


def unified(ctx: RunContext, arch_name: str | None, arch_options: dict[str, Any]) -> RoleModel:
    """The run's :class:`RoleModel` from a unified architecture and its options."""
    arch = ctx.architecture(arch_name)
    options = arch.Options.model_validate(arch_options)
    with ctx.seeded():
        return arch.role_model(ctx, options)
