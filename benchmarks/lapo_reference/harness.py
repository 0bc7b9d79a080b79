"""What the speed benchmark against the LAPO reference (``benchmarks/test_bench_lapo_reference.py``)
needs of the reference and of the clock: the reference's modules imported from a checkout as
published, its own batch path, policies, decoders and stage rates, and the interleaved (ABBA)
timing of one step on each side. The reference's code is imported at run time, never copied.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import shutil
import statistics
import sys
import tempfile
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

ENV = "SSILBENCH_LAPO_REFERENCE"
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
BATCH = 128
FRAMES = 1024
ACTIONS = 15
OBS = (3, 64, 64)
ROUNDS = int(os.environ.get("SSILBENCH_LAPO_REFERENCE_ROUNDS", "3"))
# The reference's own modules, imported by these bare names from its lapo/ folder.
REFERENCE_MODULES = ("config", "env_utils", "paths", "data_loader", "models", "utils")
REQUIRED = ("tensordict", "funcy", "omegaconf", "doy")
STUBBED = ("wandb", "procgen", "gym")

# ---------------------------------------------------------------------------- the reference


# ---------------------------------------------------------------------------- the reference


@contextlib.contextmanager
def _scratch_cwd(lapo: Path) -> Iterator[None]:
    """A scratch working directory holding the reference's ``config.yaml`` and an empty
    ``expert_data/``: the reference reads the one and its ``paths.py`` asserts the other
    relative to the working directory; nothing is written into the checkout."""
    before = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="lapo-reference-") as scratch:
        shutil.copy(lapo / "config.yaml", scratch)
        (Path(scratch) / "expert_data").mkdir()
        os.chdir(scratch)
        try:
            yield
        finally:
            os.chdir(before)


def _stub(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__doc__ = "stand-in: the LAPO reference imports it at module level only"

    def unavailable(*args, **kwargs):
        raise RuntimeError(f"{name} is a stand-in here (benchmarks/lapo_reference/harness.py)")

    module.init = unavailable  # wandb.init
    module.ProcgenEnv = unavailable  # procgen.ProcgenEnv
    return module


def import_reference(root: Path) -> types.SimpleNamespace:
    """The reference's config, models, utils and data_loader modules, imported from ``root``
    without leaving its generic module names (config, utils, ...) in ``sys.modules``."""
    lapo = root / "lapo" if (root / "lapo" / "models.py").exists() else root
    if not (lapo / "models.py").exists():
        pytest.skip(f"{ENV}={root}: no LAPO checkout there (expected lapo/models.py)")
    missing = [m for m in REQUIRED if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"the LAPO reference needs {', '.join(missing)} (pip install them, or put "
                    "a folder with them on PYTHONPATH)")  # fmt: skip
    saved = {name: sys.modules.pop(name) for name in REFERENCE_MODULES if name in sys.modules}
    stubs = [name for name in STUBBED if importlib.util.find_spec(name) is None]
    for name in stubs:
        sys.modules[name] = _stub(name)
    sys.path.insert(0, str(lapo))
    try:
        with _scratch_cwd(lapo), contextlib.redirect_stdout(sys.stderr):
            modules = {name: importlib.import_module(name) for name in REFERENCE_MODULES}
            cfg = modules["config"].get(use_cli_args=False, override_args=["exp_name=bench"])
    except ImportError as exc:
        # e.g. tensordict installed, its own dependency pyvers not
        pytest.skip(f"importing the LAPO reference from {lapo} failed: {exc} (pip install "
                    f"{exc.name or 'the missing package'}, or put it on PYTHONPATH)")  # fmt: skip
    finally:
        sys.path.remove(str(lapo))
        for name in (*REFERENCE_MODULES, *stubs):
            sys.modules.pop(name, None)
        sys.modules.update(saved)
    ref = types.SimpleNamespace(**modules, doy=importlib.import_module("doy"), cfg=cfg, path=lapo)
    ref.config.ADD_TIME_HORIZON = 0  # the paper's setting: no pre-transition context
    ref.config.DEVICE = str(DEVICE)
    return ref


def reference_batches(ref, frames: np.ndarray) -> Iterator:
    """The reference's own batch path (``DataStager.get_iter``: shuffled (s, s') windows of a
    uint8 TensorDict, moved to the device and scaled to [-0.5, 0.5]) over ``frames``."""
    data_loader = ref.data_loader
    td = data_loader._create_tensordict(len(frames), OBS[0])
    td["obs"][:] = torch.from_numpy(frames)
    td["ta"][:] = torch.randint(0, ACTIONS, (len(frames),))
    stager = data_loader.DataStager.__new__(data_loader.DataStager)  # no files to load
    stager.seq_len, stager.obs_depth, stager.td = 2, OBS[0], td
    stager.td_unfolded = data_loader._unfold_td(td, 2)
    return stager.get_iter(BATCH, device=str(DEVICE))


def reference_policy(ref, in_channels: int, out: int) -> torch.nn.Module:
    return ref.utils.create_policy(ref.cfg.model, out, policy_in_depth=in_channels)


def stage_lr(ref, stage: str) -> float:
    """A stage's learning rate under the checkout's key: ``lapo_stage1`` in the fork,
    ``stage1`` in LAPO."""
    for key in (f"lapo_{stage}", stage):
        if key in ref.cfg:
            return ref.cfg[key].lr
    raise KeyError(f"the reference's config.yaml has neither lapo_{stage} nor {stage}")


def reference_decoder(ref) -> torch.nn.Module:
    # the fork's config gives the decoder's widths, (192, 128, 64); LAPO's create_decoder
    # defaults to (128, 128) and its stage 3 script passes (192, 128, 64)
    hidden = ref.cfg.model.get("decoder_hidden_sizes") or (192, 128, 64)
    return ref.utils.create_decoder(ref.cfg.model.la_dim, ACTIONS, device=str(DEVICE),
                                    hidden_sizes=tuple(hidden))  # fmt: skip


def freeze(net: torch.nn.Module) -> torch.nn.Module:
    return net.eval().requires_grad_(False)


def soft_ce(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return -(target * F.log_softmax(logits, dim=-1)).sum(-1).mean()


def param_count(*nets: torch.nn.Module) -> int:
    return sum(p.numel() for net in nets for p in net.parameters())


def sync() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()


def compare(
    benchmark,
    ours: Callable[[], None],
    theirs: Callable[[], None],
    *,
    params: dict[str, int],
    prepass: Callable[[], None] | None = None,
    prepass_ratio: float = 0.0,
) -> None:
    """Times ``ours`` and ``theirs`` (one step of BATCH samples each) interleaved, ABBA."""
    sides = {"ssilbench": ours, "reference": theirs}
    if prepass is not None:
        sides["ssilbench_prepass"] = prepass
    for fn in sides.values():  # warm-up: allocator, kernels, lazy initialisation, Adam state
        fn()
        sync()
    times: dict[str, list[float]] = {name: [] for name in sides}
    order = list(sides)

    def one_round() -> None:
        for name in order:
            start = time.perf_counter()
            sides[name]()
            sync()
            times[name].append(time.perf_counter() - start)
        order.reverse()

    benchmark.pedantic(one_round, rounds=ROUNDS, iterations=1)
    median = {name: statistics.median(ts) for name, ts in times.items()}
    ours_rate = BATCH / median["ssilbench"]
    ref_rate = BATCH / median["reference"]
    info = benchmark.extra_info
    info["device"] = str(DEVICE)
    info["threads"] = torch.get_num_threads()
    info["rounds"] = ROUNDS
    info["ssilbench_samples_per_s"] = round(ours_rate, 1)
    info["reference_samples_per_s"] = round(ref_rate, 1)
    info["ratio"] = round(ours_rate / ref_rate, 2)
    info["ssilbench_step_s"] = [round(t, 4) for t in times["ssilbench"]]
    info["reference_step_s"] = [round(t, 4) for t in times["reference"]]
    if prepass is not None:
        per_sample = (median["ssilbench"] + prepass_ratio * median["ssilbench_prepass"]) / BATCH
        info["ssilbench_prepass_samples_per_s"] = round(BATCH / median["ssilbench_prepass"], 1)
        info["prepass_ratio"] = round(prepass_ratio, 3)
        info["ssilbench_amortised_samples_per_s"] = round(1 / per_sample, 1)
        info["amortised_ratio"] = round(1 / per_sample / ref_rate, 2)
    info.update(params)


# ---------------------------------------------------------------------------- the stages
