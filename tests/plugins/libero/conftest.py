"""The LIBERO-10 demo the slow tests share: ``ssilbench data demo libero10`` run once."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from ssilbench_libero.tasks import TASKS

DEMO_TASK = TASKS[0]
DEMO_STEPS = 40
DEMO_SEED = 11


@dataclass(frozen=True)
class LiberoDemo:
    """What ``data demo libero10 --tasks <first task> --episodes 1`` left: the data root with
    the imported 'demo' dataset, the folder of the scripted HDF5 file, and its arrays."""

    root: Path
    source: Path
    states: np.ndarray
    actions: np.ndarray
    ee_before: np.ndarray  # the hand's position before each action (obs/ee_states[:, :3])


@pytest.fixture(scope="session")
def libero_demo(tmp_path_factory) -> LiberoDemo:
    """One scripted episode of the first task played in the real scene (40 delta actions
    from fixed initial state 0), written in the download's layout and imported, through the
    CLI as a user runs it (the tests that use it need LIBERO: they skip without it)."""
    import h5py

    root = tmp_path_factory.mktemp("libero_demo") / "data"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "ssilbench", "data", "demo", "libero10", "--tasks", DEMO_TASK.id,
         "--episodes", "1", "--episode-length", str(DEMO_STEPS), "--seed", str(DEMO_SEED),
         "--data-root", str(root)],
        capture_output=True, text=True, env=env, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "-o dataset=demo" in done.stdout
    source = root / "demo-source" / "libero10"
    with h5py.File(source / "libero_10" / DEMO_TASK.demo_file, "r") as handle:
        group = handle["data/demo_0"]
        return LiberoDemo(root, source, group["states"][()], group["actions"][()],
                          group["obs/ee_states"][()][:, :3])  # fmt: skip
