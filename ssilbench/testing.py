"""Conformance checks every environment plugin must pass (the core's test suite runs them on
every registered environment; plugin authors run them in their own tests).

``check_task`` verifies that a task's spec, vector environment and dataset agree with each
other and that rollouts are seed-deterministic, the property every comparison relies on.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ssilbench.api import Task


class ConformanceError(AssertionError):
    """A task breaks the Environment contract; the message says which part."""


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConformanceError(message)


def _rollout(task: Task, num_envs: int, seed: int, steps: int) -> list[tuple]:
    venv = task.make_vec_env(num_envs, seed=seed)
    try:
        rng = np.random.Generator(np.random.PCG64(seed))
        obs, _ = venv.reset(seed=seed)
        trace = [(np.array(obs),)]
        for _ in range(steps):
            actions = rng.integers(0, task.spec.num_actions, size=num_envs)
            obs, reward, terminated, truncated, _ = venv.step(actions)
            trace.append(
                (np.array(obs), np.array(reward), np.array(terminated), np.array(truncated))
            )
        return trace
    finally:
        venv.close()


def check_vector_env(task: Task, num_envs: int = 4, seed: int = 0) -> None:
    """Spaces match the spec, equal seeds replay equally, and episodes end by the horizon."""
    spec = task.spec
    venv = task.make_vec_env(num_envs, seed=seed)
    try:
        _require(venv.num_envs == num_envs, f"{spec.env_id}: num_envs is not {num_envs}")
        space = venv.single_observation_space
        _require(
            tuple(space.shape) == tuple(spec.obs_shape),
            f"{spec.env_id}: observation space {space.shape} != spec.obs_shape {spec.obs_shape}",
        )
        _require(
            np.dtype(space.dtype) == np.dtype(spec.obs_dtype),
            f"{spec.env_id}: observation dtype {space.dtype} != spec.obs_dtype {spec.obs_dtype}",
        )
        action_space = venv.single_action_space
        _require(
            getattr(action_space, "n", None) == spec.num_actions,
            f"{spec.env_id}: action space {action_space} has not {spec.num_actions} actions",
        )
        obs, _ = venv.reset(seed=seed)
        _require(
            obs.shape == (num_envs, *spec.obs_shape),
            f"{spec.env_id}: reset gives observations of shape {obs.shape}",
        )
    finally:
        venv.close()

    steps = spec.horizon + 1
    first, second = _rollout(task, num_envs, seed, steps), _rollout(task, num_envs, seed, steps)
    for t, (a, b) in enumerate(zip(first, second, strict=True)):
        for x, y in zip(a, b, strict=True):
            _require(
                np.array_equal(x, y),
                f"{spec.env_id}: two environments seeded {seed} diverge at step {t}",
            )
    ended = np.zeros(num_envs, dtype=bool)
    for entry in first[1:]:
        ended |= entry[2] | entry[3]
    _require(
        bool(ended.all()),
        f"{spec.env_id}: some episodes did not end within the horizon ({spec.horizon} steps)",
    )


def check_dataset(task: Task, root: Path) -> None:
    """The dataset's frames and actions match the spec, and it reopens identically (cached)."""
    spec = task.spec
    store = task.dataset(root)
    _require(
        tuple(store.obs.shape[1:]) == tuple(spec.obs_shape),
        f"{spec.env_id}: dataset frames have shape {store.obs.shape[1:]}, spec {spec.obs_shape}",
    )
    _require(
        np.dtype(store.obs.dtype) == np.dtype(spec.obs_dtype),
        f"{spec.env_id}: dataset frames are {store.obs.dtype}, spec says {spec.obs_dtype}",
    )
    index = store.transition_indices()
    _require(len(index) > 0, f"{spec.env_id}: dataset has no transitions")
    actions = np.asarray(store.actions[index])
    _require(
        actions.min() >= 0 and actions.max() < spec.num_actions,
        f"{spec.env_id}: dataset actions outside 0..{spec.num_actions - 1}",
    )
    again = task.dataset(root)
    _require(
        again.manifest["files"] == store.manifest["files"],
        f"{spec.env_id}: building the dataset twice gave different files (not deterministic "
        "or not cached)",
    )


def check_task(task: Task, root: Path, num_envs: int = 4, seed: int = 0) -> None:
    """Every conformance check on one task; raises ConformanceError on the first failure."""
    check_vector_env(task, num_envs=num_envs, seed=seed)
    check_dataset(task, root)
