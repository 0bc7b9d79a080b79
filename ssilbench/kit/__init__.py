"""The toolkit plugins build on: data access, training helpers, shared network blocks.

Together with :mod:`ssilbench.api` (the contract) this is everything a plugin may import
from the core (``docs/plugin-authors.md``, "What a plugin may import"); a plugin's tests may
also import :mod:`ssilbench.testing`. The names are defined in the core modules that use
them and gathered here, so that the core can move things around without breaking plugins.

This module imports torch: import it from method, environment and architecture modules
(the lazy targets), never from a plugin's registration module.
"""

from __future__ import annotations

from ssilbench.data.batches import ArgmaxRows, ArrayRows, FrameInputs, RowSource, TransitionFrames
from ssilbench.data.datasets import TransitionStore, TransitionStoreWriter, sha256_file
from ssilbench.data.split import LabeledView, UnlabeledView
from ssilbench.data.tensors import as_model_input, pair, pair_shape
from ssilbench.kit.nets import ImpalaTrunk, mlp
from ssilbench.kit.registered import architecture
from ssilbench.plugins import available, import_optional
from ssilbench.train.batched import fit_classifiers
from ssilbench.train.budget import StageBudget, StagePlan
from ssilbench.train.checkpoint import save_atomic
from ssilbench.train.loop import StoppingRule, optimise
from ssilbench.train.memo import reuse_or_train
from ssilbench.train.roles import RoleModel, SamplingPath, UnifiedArchitecture, unified
from ssilbench.train.schedule import WarmupLinear
from ssilbench.train.speed import Speed
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

__all__ = [
    # data: the store, the views of a split, model inputs read per minibatch
    "ArgmaxRows",
    "ArrayRows",
    "FrameInputs",
    "LabeledView",
    "RowSource",
    "TransitionFrames",
    "TransitionStore",
    "TransitionStoreWriter",
    "UnlabeledView",
    "as_model_input",
    "pair",
    "pair_shape",
    "sha256_file",
    # training: fits that spend a stage's budget, labels kept in the stage cache, policies
    "ClassifierPolicy",
    "RegressionVideoModel",
    "Speed",
    "StageBudget",
    "StagePlan",
    "StoppingRule",
    "VMIDMPolicy",
    "WarmupLinear",
    "build_net",
    "fit_classifier",
    "fit_classifiers",
    "fit_regressor",
    "fit_rows",
    "label_rows",
    "labeled_actions",
    "labeled_tensors",
    "optimise",
    "predict",
    "reuse_or_train",
    "save_atomic",
    "speed_of",
    "unlabeled_tensors",
    # unified (multi-role) architectures
    "RoleModel",
    "SamplingPath",
    "UnifiedArchitecture",
    "unified",
    # networks and registered names
    "ImpalaTrunk",
    "architecture",
    "mlp",
    # optional simulators
    "available",
    "import_optional",
]
