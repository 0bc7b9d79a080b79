"""What plugin authors import: the Method, Environment and Architecture contracts.

This module is small on purpose and imports neither torch nor any simulator, so that
discovering plugins stays fast. A method sees the world only through :class:`RunContext`;
an environment never knows which method runs.

Every type that appears in the contract is exported here. Most are defined in the
contract's own modules, which import nothing of the core's machinery: :mod:`ssilbench.models`
(:class:`Architecture`, :class:`Policy`, :class:`VideoModel`), :mod:`ssilbench.stages`
(:class:`Stage`, :class:`StagePlan`, :class:`StageBudget`, :class:`StoppingRule`),
:mod:`ssilbench.context` (:class:`RunContext`) and :mod:`ssilbench.env_spec`. The data's types
(the views :class:`LabeledView` / :class:`UnlabeledView`, :class:`TransitionStore`) and the
loggers' (:class:`RunLogger`, :class:`LoggedRun`) are defined in the core modules that use
them and imported on first use, so ``import ssilbench.api`` stays light; they are the only
core modules the contract reaches (``docs/architecture.md``, "The contracts"). The tools
that work with these types are in :mod:`ssilbench.kit`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

import pluggy
from pydantic import BaseModel

from ssilbench.context import RunContext, stream_seed
from ssilbench.env_spec import (
    ChunkedControlOptions,
    EnvSpec,
    NoOptions,
    Normaliser,
    PaperProtocol,
    omitted_at_default,
)
from ssilbench.errors import (
    ConfigError,
    DatasetError,
    PluginError,
    SsilbenchError,
    UnknownNameError,
    UsageError,
    unknown,
)
from ssilbench.models import Architecture, Policy, VideoModel, image_frames
from ssilbench.registry import BoundRegistry, lazy_attributes
from ssilbench.stages import Stage, StageBudget, StagePlan, StoppingRule

if TYPE_CHECKING:
    import gymnasium
    import torch

    from ssilbench.data.datasets import TransitionStore
    from ssilbench.data.split import LabeledView, UnlabeledView
    from ssilbench.loggers.base import LoggedRun, RunLogger

API_VERSION = "1.2"
"""The version of this contract (``ssilbench.api``, ``ssilbench.kit`` and the modules they
document): MAJOR.MINOR, where a new minor version only adds, and a new major version may
remove what earlier minor versions deprecated. A plugin module declares the version it was
written against as ``SSILBENCH_API = "1.2"``; one written for another major version, or a
later minor one, is refused when it loads. 1.0: ssilbench 0.1.0; 1.1: 0.2.0; 1.2: 0.3.0
(``CHANGELOG.md``)."""

__all__ = [
    "API_VERSION",
    "ARCHITECTURE",
    "Architecture",
    "ArchitectureName",
    "ArchOptions",
    "OptionsOf",
    "BoundRegistry",
    "ChunkedControlOptions",
    "ConfigError",
    "DEMO_DATASET",
    "DatasetError",
    "EnvSpec",
    "Environment",
    "LabeledView",
    "LoggedRun",
    "Method",
    "NoOptions",
    "Normaliser",
    "PaperProtocol",
    "PluginError",
    "Policy",
    "RunContext",
    "RunLogger",
    "SsilbenchError",
    "Stage",
    "StageBudget",
    "StagePlan",
    "StoppingRule",
    "Task",
    "TestSet",
    "TransitionStore",
    "UnknownNameError",
    "UnlabeledView",
    "UsageError",
    "VideoModel",
    "hookimpl",
    "omitted_at_default",
    "provides",
    "registers",
    "stream_seed",
    "unknown",
]

# Contract types defined in the core modules that use them, imported on first access (see
# the module docstring): name -> defining module.
_LAZY_TYPES = {
    "LabeledView": "ssilbench.data.split",
    "UnlabeledView": "ssilbench.data.split",
    "TransitionStore": "ssilbench.data.datasets",
    "RunLogger": "ssilbench.loggers.base",
    "LoggedRun": "ssilbench.loggers.base",
}


# ``from ssilbench.api import TransitionStore`` imports the defining module (and numpy) only
# then.
__getattr__ = lazy_attributes(globals(), _LAZY_TYPES)


hookimpl = pluggy.HookimplMarker("ssilbench")
"""Marks a plugin function as the implementation of a hook in :mod:`ssilbench.hookspecs`."""


def registers(*entries: tuple[str, str, str]) -> Callable[[BoundRegistry], None]:
    """A hook implementation that adds each ``(name, "module:attr", description)`` to the
    registry it is given, named by assignment: ``ssilbench_register_methods = registers(...)``
    is the ``@hookimpl`` function that calls ``registry.add`` once per entry."""

    @hookimpl
    def register(registry: BoundRegistry) -> None:
        for name, target, description in entries:
            registry.add(name, target, description)

    return register


ARCHITECTURE = "ssilbench:architecture"
ArchitectureName = Annotated[str | None, ARCHITECTURE]
"""A config field naming a registered architecture (None: the environment's default).

The harness checks such fields before any run starts: the name must be registered and the
architecture must accept the environment's observation kind.
"""


@dataclass(frozen=True)
class OptionsOf:
    """Marks a config field that holds the options of the unified architecture named by the
    config's field ``field`` (an :data:`ArchitectureName`); the harness validates them
    against that architecture's ``Options`` before any run starts."""

    field: str


ArchOptions = Annotated[dict[str, Any], OptionsOf("arch")]
"""A config field holding the options of the architecture named by the field ``arch``."""


@dataclass(frozen=True)
class TestSet:
    """Expert transitions (s, pi*(s), v*(s)) on which policies and IDMs are scored offline.

    Arrays are stored observations (as in the dataset), actions are integers.
    """

    __test__ = False  # not a pytest test class, despite its name

    obs: Any
    actions: Any
    next_obs: Any


class Task(ABC):
    """One task of an environment family with its options applied."""

    spec: EnvSpec

    @abstractmethod
    def dataset(self, root: Path) -> TransitionStore:
        """Build, import or open the expert dataset under ``root``; verify its manifest."""

    @abstractmethod
    def make_vec_env(self, num_envs: int, seed: int) -> gymnasium.vector.VectorEnv:
        """A vectorised environment for rollouts; equal seeds give equal episodes."""

    def video_model(self) -> VideoModel | None:
        """The ground-truth video model v*(s) where the environment knows it, else None."""
        return None

    def test_set(self) -> TestSet | None:
        """Where the environment can enumerate its expert's transitions (e.g. every feasible
        maze state), the set on which the core reports test accuracy and entropies."""
        return None

    def check_rollouts(self) -> None:
        """Raise a PluginError (or UsageError) saying what to install when the simulator the
        task's rollouts need is missing; the planner calls it before any run starts, so a
        missing extra is one message and exit code 2 rather than a failed run each."""
        return None

    def metrics(self, policy: Policy, device: torch.device) -> dict[str, float]:
        """Environment-specific evaluation metrics beyond the rollout score and test set.

        ``device`` is where the policy runs: build its input tensors there.
        """
        return {}

    def frames(self, venv: Any, obs: Any, info: dict[str, Any]) -> Any:
        """Optional: RGB frames of the sub-environments of ``venv`` (made by
        :meth:`make_vec_env`) in the states whose observations are ``obs`` (``info``: what the
        same ``reset``/``step`` returned), as a uint8 array (num_envs, H, W, 3); None where
        the task cannot draw them. ``ssilbench eval --video`` films rollouts with it, once
        after every reset and step. The default gives image observations themselves (the
        newest frame of a stack; a dict's ``"obs"``); override it for other observations
        (a maze drawn from the agent's cell) or a better picture (a simulator's render)."""
        if self.spec.obs_kind != "image":
            return None
        return image_frames(obs, self.spec.obs_shape, self.spec.frame_stack)

    # --- optional: datasets made by rolling out a policy, and experts to roll out ---------
    # The CLI offers ``ssilbench data collect`` and ``ssilbench expert train`` for a task
    # that overrides these; the defaults say the task has none.

    ExpertConfig: ClassVar[type[BaseModel] | None] = None
    """Settings of :meth:`train_expert` (``-c KEY=VALUE`` on the command line), with defaults."""

    def collect_dataset(
        self,
        policy: Path,
        frames: int,
        root: Path,
        seed: int = 0,
        replace: bool = False,
        device: torch.device | None = None,
        log: Callable[[str], None] = print,
        test_frames: int = 0,
    ) -> TransitionStore:
        """Roll out the policy checkpoint ``policy`` until ``frames`` frames are stored, as the
        dataset :meth:`dataset` opens under ``root`` (and ``test_frames`` more, from other
        episodes, as its test split where the task keeps one). Refuse (UsageError) a
        checkpoint this task cannot run, naming the file and what it expected."""
        raise NotImplementedError

    def train_expert(
        self,
        config: BaseModel,
        out: Path,
        device: torch.device | None = None,
        log: Callable[[str], None] = print,
    ) -> Path:
        """Train (or resume, when ``out`` exists) an expert whose checkpoint
        :meth:`collect_dataset` accepts; ``config`` is an :attr:`ExpertConfig`."""
        raise NotImplementedError


class Environment(ABC):
    """An environment family: ``maze``, ``procgen``, ... Its tasks are ``family:task``."""

    description: ClassVar[str] = ""
    Options: ClassVar[type[BaseModel]] = NoOptions
    task_class: ClassVar[type[Task] | None] = None
    """The :class:`Task` the default :meth:`load` builds, as ``task_class(task, options)``."""
    task_kind: ClassVar[str] = "task"
    """What :meth:`load`'s error for a name not in :meth:`tasks` calls a task
    (``"procgen game"``)."""
    paper_protocol: ClassVar[PaperProtocol | None] = None
    """Optional: the label budgets, seeds and steps of the paper's experiment on this family
    (:class:`PaperProtocol`). ``ssilbench run`` takes them when the command gives no
    ``--budgets`` (or ``--seeds``), and says so; a family without one needs ``--budgets``
    (and runs seed 0 unless ``--seeds`` says otherwise)."""
    per_seed_options: ClassVar[tuple[str, ...]] = ()
    """Optional: fields of :attr:`Options` that follow the run's seed. Where a sweep gives
    no value for one, each run takes its seed as the value (the grid's ``data_seed``: the
    paper's code draws a dataset per seed) and records the name in its spec's ``seeded``; a
    value given (``-o data_seed=0``) holds for every seed. Each must be an integer field
    that accepts every seed a sweep allows (0 and up); :meth:`seeded_options` says which
    of them apply to given options."""
    downloads: ClassVar[str | None] = None
    """Optional: the download manifest of the family's published data, ``"package:file"``
    naming a TOML file shipped as package data (``"ssilbench_procgen:downloads.toml"``).
    ``ssilbench data download FAMILY`` streams the files it lists (resumed, sha256-checked)
    and hands the folder to :meth:`import_dataset`; docs/plugin-authors.md describes the
    format. None: the family publishes nothing to download."""

    @abstractmethod
    def tasks(self) -> list[str]:
        """Every task name; ``family:all`` expands to these."""

    def load(self, task: str, options: BaseModel | None = None) -> Task:
        """The task with validated options applied. The default checks ``task`` against
        :meth:`tasks` (an UnknownNameError) and builds :attr:`task_class` with the options as
        :meth:`options_of` gives them; override it to build tasks another way."""
        names = self.tasks()
        if task not in names:
            raise unknown(self.task_kind, task, names)
        if self.task_class is None:
            raise NotImplementedError(f"{type(self).__name__} sets no task_class: override load")
        return self.task_class(task, self.options_of(options))

    @classmethod
    def seeded_options(cls, options: BaseModel) -> tuple[str, ...]:
        """Optional: those of :attr:`per_seed_options` that follow the seed for these
        (validated) options; by default all of them. Override where a field changes the
        data only under some options (the maze's ``noop_seed``, only with no-ops), so that
        runs it would not change keep their ids."""
        return cls.per_seed_options

    @classmethod
    def run_defaults(cls, options: BaseModel) -> dict[str, Any]:
        """Optional: values new runs take for options their sweep leaves unset, in place of
        the :attr:`Options` model's defaults; by default none. For a default that changed
        after runs were recorded with a field left out of the dump at its default
        (``omitted_at_default``): the model keeps the earlier default, which is what a
        recorded spec without the field means (``ssilbench eval`` and workers read specs
        back through the model), while new runs get this value, written into their spec, so
        they never share a design id with the earlier runs. ``options``: the validated
        options of the sweep, with the model's defaults (return only what applies to them)."""
        return {}

    @classmethod
    def options_of(cls, options: BaseModel | None) -> BaseModel:
        """``options`` as this family's :attr:`Options` (None: the defaults; another model:
        its values, validated)."""
        if isinstance(options, cls.Options):
            return options
        return cls.Options.model_validate(options.model_dump() if options else {})

    def import_dataset(
        self,
        source: Path,
        root: Path,
        tasks: list[str],
        options: BaseModel,
        replace: bool = False,
        log: Callable[[str], None] = print,
    ) -> list[TransitionStore]:
        """Optional: import expert data kept elsewhere (a download) from the folder ``source``
        for ``tasks``, as the datasets their :meth:`Task.dataset` opens under ``root``
        (``ssilbench data import FAMILY``). Every problem with the files is a DatasetError
        naming the file and what was expected, and leaves no store that looks complete."""
        raise NotImplementedError

    demo_run: ClassVar[str] = ""
    """Optional, with :meth:`write_demo`: the ``ssilbench run`` flags of a first run on the
    demo that ends in minutes on a CPU (``"--budgets 2 --steps 200 -o eval_episodes=5"``);
    ``ssilbench data demo`` prints the whole command after the import."""

    def write_demo(
        self,
        folder: Path,
        tasks: list[str],
        episodes: int | None = None,
        seed: int = 0,
        episode_length: int | None = None,
        log: Callable[[str], None] = print,
    ) -> Path:
        """Optional, with :meth:`import_dataset`: write a small scripted dataset of ``tasks``
        (none: every task) into the empty folder ``folder``, in the layout the family's
        download has, ``episodes`` episodes a task of at most ``episode_length`` steps (None:
        the family's defaults); equal arguments give equal files. Returns the path to hand
        to :meth:`import_dataset` as its ``source``. ``ssilbench data demo FAMILY`` calls it,
        then imports the result as the dataset named :data:`DEMO_DATASET` (the family's
        Options need a ``dataset`` field), so that a demo is never taken for the real data.
        A missing simulator or library is a PluginError naming what to install."""
        raise NotImplementedError


class Method(ABC):
    """An SSIL method: declares its stages and fits a policy from a :class:`RunContext`."""

    description: ClassVar[str] = ""
    Config: ClassVar[type[BaseModel]]

    @abstractmethod
    def stages(
        self, cfg: BaseModel, total_steps: int, spec: EnvSpec, has_video_model: bool
    ) -> list[Stage]:
        """Named stages whose steps sum to ``total_steps`` (step parity between methods)."""

    @abstractmethod
    def fit(self, ctx: RunContext) -> Policy:
        """Train stage by stage and return the policy."""

    batched: ClassVar[bool] = False
    """True when :meth:`fit_many` trains several runs as one computation; the runner then
    hands it every pending run of one task and config (budgets and seeds differ)."""

    def fit_many(self, ctxs: list[RunContext]) -> list[Policy]:
        """Fit several runs; the default fits them one after the other."""
        return [self.fit(ctx) for ctx in ctxs]


DEMO_DATASET = "demo"
"""The dataset name ``ssilbench data demo`` imports a scripted demo under (``-o dataset=demo``
on the runs that use it)."""


def provides(obj: Task | Environment, method: str) -> bool:
    """Whether a task or environment implements one of its optional methods
    (``import_dataset``, ``write_demo``, ``collect_dataset``, ``train_expert``)."""
    base = Task if isinstance(obj, Task) else Environment
    return getattr(type(obj), method, None) is not getattr(base, method, None)
