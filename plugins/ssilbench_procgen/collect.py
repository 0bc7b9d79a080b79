"""Datasets made here: rollouts of an expert checkpoint written as a TransitionStore.

Each sub-environment's frames are buffered until its episode ends and then appended as one
piece, so the store holds whole episodes one after the other although the environments
step together. The last episode is cut where the requested number of frames is reached.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ssilbench.kit import TransitionStore, TransitionStoreWriter, as_model_input
from ssilbench_procgen.games import NUM_ACTIONS, OBS_SHAPE
from ssilbench_procgen.ppo import ProgressLines


class _Episode:
    def __init__(self) -> None:
        self.obs: list[np.ndarray] = []
        self.actions: list[int] = []
        self.rewards: list[float] = []


def collect_rollouts(
    make_env: Callable[[int, int], Any],
    model: torch.nn.Module,
    path: Path,
    frames: int,
    seed: int,
    num_envs: int,
    producer: dict[str, Any],
    metadata: dict[str, Any],
    device: torch.device,
    log: Callable[[str], None] = print,
) -> TransitionStore:
    """Roll ``model`` (actions sampled from its logits) until ``frames`` frames are stored."""
    model = model.to(device).eval()
    generator = torch.Generator().manual_seed(seed)
    venv = make_env(num_envs, seed)
    returns: list[float] = []
    progress = ProgressLines(f"collect {path.name}", frames, log, unit="frames")

    def detail() -> str:
        mean = f", return {np.mean(returns):.2f}" if returns else ""
        return f"{len(returns)} episodes{mean}"

    episodes = [_Episode() for _ in range(num_envs)]
    try:
        with TransitionStoreWriter(path, OBS_SHAPE, np.uint8, producer, metadata) as writer:
            obs, _ = venv.reset(seed=seed)
            while writer.num_frames < frames:
                with torch.no_grad():
                    logits, _ = model(as_model_input(obs, device))
                probs = torch.softmax(logits.cpu(), dim=-1)
                actions = torch.multinomial(probs, 1, generator=generator).squeeze(-1).numpy()
                next_obs, reward, terminated, truncated, _ = venv.step(actions)
                done = np.asarray(terminated) | np.asarray(truncated)
                for i, episode in enumerate(episodes):
                    episode.obs.append(obs[i])
                    episode.actions.append(int(actions[i]))
                    episode.rewards.append(float(reward[i]))
                    if done[i]:
                        returns.append(sum(episode.rewards))
                        _write(writer, episode, frames - writer.num_frames)
                        episodes[i] = _Episode()
                        if writer.num_frames >= frames:
                            break
                obs = next_obs
                progress(writer.num_frames, detail)
            progress(writer.num_frames, detail(), force=True)
            writer.metadata = {
                **metadata,
                "episode_return_mean": float(np.mean(returns)) if returns else None,
                "complete_episodes": len(returns),
            }
            return writer.commit()
    finally:
        venv.close()


def measure_random(
    make_env: Callable[[int, int], Any], episodes: int, seed: int, num_envs: int
) -> float:
    """The mean return of a uniform-random policy over its first ``episodes`` complete
    episodes, counted as :func:`collect_rollouts` counts the expert's (in the order they end
    across ``num_envs`` environments, which restart at once), on levels seeded by ``seed``."""
    rng = np.random.Generator(np.random.PCG64(seed))
    venv = make_env(num_envs, seed)
    returns: list[float] = []
    try:
        venv.reset(seed=seed)
        running = np.zeros(num_envs)
        while len(returns) < episodes:
            _, reward, terminated, truncated, _ = venv.step(
                rng.integers(NUM_ACTIONS, size=num_envs)
            )
            running += np.asarray(reward, dtype=np.float64)
            for i in np.flatnonzero(np.asarray(terminated) | np.asarray(truncated)):
                returns.append(float(running[i]))
                running[i] = 0.0
    finally:
        venv.close()
    return float(np.mean(returns[:episodes]))


def _write(writer: TransitionStoreWriter, episode: _Episode, room: int) -> None:
    n = min(len(episode.obs), room)
    ends = np.zeros(n, dtype=bool)
    ends[-1] = True
    writer.append(
        np.stack(episode.obs[:n]),
        np.asarray(episode.actions[:n], dtype=np.int64),
        np.asarray(episode.rewards[:n], dtype=np.float32),
        ends,
    )
