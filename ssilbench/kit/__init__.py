"""The toolkit plugins build on: data access, training helpers, shared network blocks.

Together with :mod:`ssilbench.api` (the contract) this is everything a plugin may import
from the core (``docs/plugin-authors.md``, "What a plugin may import"); a plugin's tests may
also import :mod:`ssilbench.testing`. The names are defined in the core modules that use
them and gathered here, so that the core can move things without breaking plugins.

Each name is imported from its defining module on first access, so a module that takes only
light names (``TransitionStore``, ``import_optional``) does not import torch; names of the
training helpers do. Two small helpers of its own, the checks an importer
(``Environment.import_dataset``) opens with, are defined below.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ssilbench.errors import UsageError
from ssilbench.registry import lazy_attributes

if TYPE_CHECKING:
    from ssilbench.data.batches import (
        ArgmaxRows,
        ArrayRows,
        FrameInputs,
        RowSource,
        TransitionFrames,
    )
    from ssilbench.data.dataset_writer import TransitionStoreWriter
    from ssilbench.data.datasets import TransitionStore, sha256_file
    from ssilbench.data.split import LabeledView, UnlabeledView
    from ssilbench.data.tensors import as_model_input, pair, pair_shape
    from ssilbench.kit.nets import ImpalaTrunk, mlp
    from ssilbench.kit.registered import architecture
    from ssilbench.plugins import available, import_optional
    from ssilbench.stages import StageBudget, StagePlan, StoppingRule, WarmupLinear
    from ssilbench.train.batched import fit_classifiers
    from ssilbench.train.checkpoint import save_atomic
    from ssilbench.train.continuous import ContinuousPolicy, action_bounds, unit_actions
    from ssilbench.train.loop import optimise
    from ssilbench.train.memo import FitSettings, reuse_or_train
    from ssilbench.train.roles import RoleModel, SamplingPath, UnifiedArchitecture, unified
    from ssilbench.train.schedule import set_lr
    from ssilbench.train.speed import Speed
    from ssilbench.train.standardise import Standardise, Standardised, trainable
    from ssilbench.train.supervised import (
        ClassifierPolicy,
        RegressionVideoModel,
        VMIDMPolicy,
        build_net,
        fit_classifier,
        fit_regressor,
        fit_rows,
        label_rows,
        labeled_actions,
        labeled_tensors,
        predict,
        speed_of,
        unlabeled_tensors,
    )

# Defining module -> the names this toolkit takes from it.
_SOURCES: dict[str, tuple[str, ...]] = {
    # data: the store, the views of a split, model inputs read per minibatch
    "ssilbench.data.datasets": ("TransitionStore", "sha256_file"),
    "ssilbench.data.dataset_writer": ("TransitionStoreWriter",),
    "ssilbench.data.split": ("LabeledView", "UnlabeledView"),
    "ssilbench.data.tensors": ("as_model_input", "pair", "pair_shape"),
    "ssilbench.data.batches": (
        "ArgmaxRows",
        "ArrayRows",
        "FrameInputs",
        "RowSource",
        "TransitionFrames",
    ),
    # training: fits that spend a stage's budget, labels kept in the stage cache, policies
    "ssilbench.stages": ("StageBudget", "StagePlan", "StoppingRule", "WarmupLinear"),
    "ssilbench.train.loop": ("optimise",),
    "ssilbench.train.schedule": ("set_lr",),
    "ssilbench.train.speed": ("Speed",),
    "ssilbench.train.standardise": ("Standardise", "Standardised", "trainable"),
    "ssilbench.train.supervised": (
        "ClassifierPolicy",
        "RegressionVideoModel",
        "VMIDMPolicy",
        "build_net",
        "fit_classifier",
        "fit_regressor",
        "fit_rows",
        "label_rows",
        "labeled_actions",
        "labeled_tensors",
        "predict",
        "speed_of",
        "unlabeled_tensors",
    ),
    "ssilbench.train.batched": ("fit_classifiers",),
    "ssilbench.train.memo": ("FitSettings", "reuse_or_train"),
    "ssilbench.train.checkpoint": ("save_atomic",),
    # continuous actions: scaled to [-1, 1] for a network, and back for the rollout
    "ssilbench.train.continuous": ("ContinuousPolicy", "action_bounds", "unit_actions"),
    # unified (multi-role) architectures
    "ssilbench.train.roles": ("RoleModel", "SamplingPath", "UnifiedArchitecture", "unified"),
    # shared network blocks, and registered architectures by name
    "ssilbench.kit.nets": ("ImpalaTrunk", "mlp"),
    "ssilbench.kit.registered": ("architecture",),
    # optional simulators
    "ssilbench.plugins": ("available", "import_optional"),
}
_MODULE_OF = {name: module for module, names in _SOURCES.items() for name in names}

__all__ = [
    "ArgmaxRows",
    "ArrayRows",
    "ClassifierPolicy",
    "ContinuousPolicy",
    "FitSettings",
    "FrameInputs",
    "ImpalaTrunk",
    "LabeledView",
    "RegressionVideoModel",
    "RoleModel",
    "RowSource",
    "SamplingPath",
    "Speed",
    "StageBudget",
    "StagePlan",
    "Standardise",
    "Standardised",
    "StoppingRule",
    "TransitionFrames",
    "TransitionStore",
    "TransitionStoreWriter",
    "UnifiedArchitecture",
    "UnlabeledView",
    "VMIDMPolicy",
    "WarmupLinear",
    "action_bounds",
    "already_imported",
    "architecture",
    "as_model_input",
    "available",
    "build_net",
    "fit_classifier",
    "fit_classifiers",
    "fit_regressor",
    "fit_rows",
    "import_optional",
    "import_source",
    "label_rows",
    "labeled_actions",
    "labeled_tensors",
    "mlp",
    "optimise",
    "pair",
    "pair_shape",
    "predict",
    "reuse_or_train",
    "save_atomic",
    "set_lr",
    "sha256_file",
    "speed_of",
    "trainable",
    "unified",
    "unit_actions",
    "unlabeled_tensors",
]


__getattr__ = lazy_attributes(globals(), _MODULE_OF)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def import_source(source: Path | str, holds: str) -> Path:
    """``source`` as a Path, or a UsageError when it is not a folder, saying what it should
    hold: ``--from SOURCE: no such folder. Give the folder that holds HOLDS``."""
    source = Path(source)
    if not source.is_dir():
        raise UsageError(f"--from {source}: no such folder. Give the folder that holds {holds}")
    return source


def already_imported(target: Path, replace: bool, log: Callable[[str], None], what: str) -> bool:
    """Whether to leave ``target`` as it is: it exists and ``replace`` is off. The log then
    says ``WHAT already imported at TARGET (--replace to import it again)``."""
    if target.exists() and not replace:
        log(f"{what} already imported at {target} (--replace to import it again)")
        return True
    return False
