"""Scripted LIBERO-10 demonstrations in the download's layout (``ssilbench data demo libero10``).

The LIBERO team's file of a task, ``<bddl name>_demo.hdf5``, is written by
:func:`write_task_file` (the layout ``ssilbench_libero.importer`` reads: every attribute and
key of the download). :func:`record_episodes` plays scripted delta-action episodes in the
real scene, from one of the task's fixed initial states, and keeps what the download keeps:
both cameras as MuJoCo reads them out (bottom row first), the gripper and joint states, the
end effector's pose, the MuJoCo state before each action (so the episode can be replayed,
``-o control=absolute`` included) and the actions. The scripted policy is a smooth random
walk of the arm, not an expert: the episodes rarely succeed; they exist so that the whole
pipeline (import, training, rollouts) runs without the 13.7 GB download.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ssilbench_libero.tasks import ACTION_DIM, SUITE, LiberoTask

# Actions per scripted episode: 2 s of control at 20 Hz, enough for the arm to travel.
DEMO_STEPS = 40
DEMO_EPISODES = 2  # per task: the paper's budget of 2 labeled demonstrations fits
ENV_NAME = "Libero_Kitchen_Tabletop_Manipulation"
# The flags of a first run on the demo that `data demo` prints: a tiny UVA, one seed, the
# smoke protocol's two short episodes a task (a few minutes on a CPU).
DEMO_RUN = (
    "--budgets 2 --seeds 0 --steps 50 -o protocol=smoke -c 'arch_options="
    """{"profile": "small", "vae_steps": 20, "pretrain_steps": 20, "batch_size": 8, """
    """"vae_batch": 8}'"""
)
DemoArrays = dict[str, np.ndarray]
"""One demonstration, key (under ``data/demo_<i>``) -> array, e.g. ``"obs/agentview_rgb"``."""


def write_task_file(folder: Path, task: LiberoTask, demos: dict[str, DemoArrays],
                    language: str | None = None, compress: bool = False) -> Path:  # fmt: skip
    """``folder/<bddl>_demo.hdf5`` in LIBERO's layout, one ``data/<name>`` group per demo
    (replacing the file); ``language`` overrides the task's instruction (a file of another
    task). Returns the file's path."""
    from ssilbench_libero.importer import _h5py

    h5py = _h5py()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / task.demo_file
    options: dict[str, Any] = {"compression": "gzip", "chunks": True} if compress else {}
    with h5py.File(path, "w") as handle:
        data = handle.create_group("data")
        data.attrs["env_name"] = ENV_NAME
        data.attrs["problem_info"] = json.dumps({
            "problem_name": "libero_tabletop_manipulation",
            "domain_name": "robosuite",
            "language_instruction": language or task.language,
        })  # fmt: skip
        data.attrs["bddl_file_name"] = f"libero/libero/bddl_files/{SUITE}/{task.bddl}.bddl"
        data.attrs["env_args"] = json.dumps({"type": 1, "env_name": ENV_NAME, "env_kwargs": {}})
        for name, arrays in demos.items():
            group = data.create_group(name)
            group.attrs["num_samples"] = len(arrays["actions"])
            for key, value in arrays.items():
                group.create_dataset(key, data=value, **options)
    return path


def scripted_actions(seed: int, count: int) -> np.ndarray:
    """A teleoperator-like delta episode (count, 7): a random walk in [-1, 1] of the arm's
    moves, the gripper open or closed."""
    rng = np.random.Generator(np.random.PCG64(seed))
    actions = np.clip(np.cumsum(rng.normal(0.0, 0.15, (count, ACTION_DIM)), axis=0), -1.0, 1.0)
    actions[:, 6] = np.where(actions[:, 6] > 0, 1.0, -1.0)
    return actions


@dataclass
class RecordedEpisode:
    """A demonstration played in the real scene: its arrays in the file's layout, and what
    ``observe(env)`` returned after each step (when given)."""

    arrays: DemoArrays
    observed: list[Any] = field(default_factory=list)


def _end_effector(env: Any) -> np.ndarray:
    """The hand's position (3) and orientation as an axis-angle (3): the file's ee_states."""
    from robosuite.utils.transform_utils import mat2quat, quat2axisangle

    controller = env.env.robots[0].controller
    controller.update(force=True)
    rotation = quat2axisangle(mat2quat(np.asarray(controller.ee_ori_mat)))
    return np.concatenate([np.asarray(controller.ee_pos, dtype=np.float64), rotation])


def record_episodes(task: LiberoTask, actions: list[np.ndarray], first_init_state: int = 0,
                    seed: int = 0, observe: Callable[[Any], Any] | None = None,
                    ) -> list[RecordedEpisode]:  # fmt: skip
    """Play each action sequence (delta control) in the task's scene, episode ``e`` from
    fixed initial state ``first_init_state + e`` (after LIBERO's settling steps, as an
    evaluation starts), recording the frame, proprioception, end effector and MuJoCo state
    before each action. Success ends an episode early, as in LIBERO's collection (reward 1
    on its last step). One simulator plays them all, one after the other."""
    from ssilbench_libero.vec_env import Libero10VectorEnv

    longest = max(len(a) for a in actions)
    venv = Libero10VectorEnv(task, 1, seed=seed, max_steps=longest + 1,
                             first_init_state=first_init_state)  # fmt: skip
    try:
        recorded = []
        for e, episode in enumerate(actions):
            obs, _ = venv.reset(seed=seed) if e == 0 else venv.reset()
            recorded.append(_play(venv, obs, episode, observe))
        return recorded
    finally:
        venv.close()


def _play(venv: Any, obs: dict[str, np.ndarray], actions: np.ndarray,
          observe: Callable[[Any], Any] | None) -> RecordedEpisode:  # fmt: skip
    env = venv._envs[0]
    rows: dict[str, list[np.ndarray]] = {k: [] for k in ("agentview", "wrist", "proprio",
                                                         "ee", "states")}  # fmt: skip
    observed, rewards = [], []
    for action in actions:
        # The file holds MuJoCo's read-out order (bottom row first); ours is upright.
        rows["agentview"].append(obs["obs"][0, ::-1])
        rows["wrist"].append(obs["wrist"][0, ::-1])
        rows["proprio"].append(obs["proprio"][0].astype(np.float64))
        rows["ee"].append(_end_effector(env))
        rows["states"].append(env.get_sim_state().copy())
        obs, reward, terminated, _, _ = venv.step(action[None].astype(np.float32))
        rewards.append(float(reward[0]))
        if observe is not None:
            observed.append(observe(env))
        if terminated[0]:
            break
    length = len(rewards)
    proprio = np.stack(rows["proprio"])
    arrays = {
        "obs/agentview_rgb": np.stack(rows["agentview"]),
        "obs/eye_in_hand_rgb": np.stack(rows["wrist"]),
        "obs/gripper_states": proprio[:, :2],
        "obs/joint_states": proprio[:, 2:],
        "obs/ee_states": np.stack(rows["ee"]),
        "actions": np.asarray(actions[:length], dtype=np.float64),
        "states": np.stack(rows["states"]),
        "rewards": np.asarray(rewards, dtype=np.uint8),
        "dones": np.eye(1, length, length - 1, dtype=np.uint8)[0],
    }
    return RecordedEpisode(arrays, observed)


def write_demo_files(folder: Path, tasks: list[LiberoTask], episodes: int = DEMO_EPISODES,
                     seed: int = 0, steps: int = DEMO_STEPS,
                     log: Callable[[str], None] = print) -> Path:  # fmt: skip
    """A scripted ``<bddl>_demo.hdf5`` per task in ``folder/libero_10`` (the download's
    layout), ``episodes`` demonstrations of ``steps`` actions each; demonstration ``e``
    starts from fixed initial state ``e``. Equal arguments give equal files. Returns the
    folder to import from (``folder``)."""
    from ssilbench_libero.importer import _h5py

    _h5py()  # a missing h5py is said before any scene is built
    for number, task in enumerate(tasks):
        actions = [scripted_actions(seed * 100_003 + number * 1_009 + e, steps)
                   for e in range(episodes)]  # fmt: skip
        played = record_episodes(task, actions, seed=seed)
        demos = {f"demo_{e}": episode.arrays for e, episode in enumerate(played)}
        path = write_task_file(Path(folder) / SUITE, task, demos)
        frames = sum(len(d["actions"]) for d in demos.values())
        log(f"libero10:{task.id}: {episodes} scripted demonstrations, {frames} frames -> {path}")
    return Path(folder)


def write_demo(folder: Path, tasks: list[str], episodes: int | None = None, seed: int = 0,
               episode_length: int | None = None,
               log: Callable[[str], None] = print) -> Path:  # fmt: skip
    """``Libero10Environment.write_demo``: the ``tasks`` named (none, or ``all``: the ten),
    :data:`DEMO_EPISODES` of :data:`DEMO_STEPS` actions each unless told otherwise."""
    from ssilbench.api import PluginError
    from ssilbench_libero.sim import INSTALL_HINT, libero_available
    from ssilbench_libero.tasks import BY_ID, TASKS

    chosen = [BY_ID[t] for t in tasks] if tasks and "all" not in tasks else list(TASKS)
    if not libero_available():
        raise PluginError(f"The libero10 demo is played in LIBERO's scenes. {INSTALL_HINT}")
    return write_demo_files(folder, chosen, episodes or DEMO_EPISODES, seed,
                            episode_length or DEMO_STEPS, log)  # fmt: skip
