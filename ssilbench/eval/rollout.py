"""Vectorised rollouts that run every episode to its end (one episode per sub-environment).

Averaging the first episodes to finish would favour short episodes; here each of the
``num_envs`` sub-environments plays exactly one episode and all of them count. Episodes end
at different times (a few steps apart or hundreds), so the policy is asked to act only for
the sub-environments still playing: forwards for finished ones would be thrown away.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ssilbench.api import EnvSpec, Policy, Task
from ssilbench.data.tensors import as_model_input
from ssilbench.eval.diagnostics import TestSetScorer


@dataclass(frozen=True)
class EvalResult:
    score: float
    mean_return: float
    returns: tuple[float, ...]
    metrics: dict[str, float]


@dataclass(frozen=True)
class Episodes:
    """One finished episode per sub-environment: its score and whether it succeeded."""

    scores: np.ndarray
    successes: np.ndarray | None
    """Per episode, whether the environment reported ``is_success`` at any step (None when
    it never reports success)."""
    forwarded: int = 0
    """Observations the policy was asked to act on (the evaluation's cost in forwards)."""


def observation_input(obs, device: torch.device):
    """A vector environment's observation as model input: a tensor, or a dict of tensors
    for environments with ``extra_obs``."""
    if isinstance(obs, dict):
        return {key: as_model_input(value, device) for key, value in obs.items()}
    return as_model_input(obs, device)


def _rows(obs, index: np.ndarray, n: int):
    """The observations of the sub-environments ``index`` (every array of a dict; a frame
    stack is the axis after the env axis, so it comes along)."""
    if len(index) == n:
        return obs  # all of them: no copy
    if isinstance(obs, dict):
        return {key: np.asarray(value)[index] for key, value in obs.items()}
    return np.asarray(obs)[index]


def _action_plan(actions: torch.Tensor, spec: EnvSpec) -> list[np.ndarray]:
    """The actions to execute before asking the policy again: one, or the first
    ``spec.action_execute`` of a predicted chunk (batch, K, A)."""
    actions = actions.detach().cpu().numpy()
    if spec.action_kind == "continuous":
        actions = actions.astype(np.float32)
        if actions.ndim == 3:
            return [actions[:, k] for k in range(min(spec.action_execute, actions.shape[1]))]
    return [actions]


class _Executed:
    """The action each sub-environment executes next. Rows of finished sub-environments
    keep their last action: whatever its dtype and bounds, that is a valid action of the
    environment, and what a finished episode does is never scored."""

    def __init__(self) -> None:
        self.actions: np.ndarray | None = None

    def update(self, index: np.ndarray, actions: np.ndarray, n: int) -> np.ndarray:
        if self.actions is None:  # the first call: every sub-environment is live
            self.actions = np.zeros((n, *actions.shape[1:]), dtype=actions.dtype)
        self.actions[index] = actions
        return self.actions.copy()  # a vector env may keep what it is given


def run_episodes(
    venv,
    policy: Policy,
    spec: EnvSpec,
    seed: int,
    device: torch.device,
    generator: torch.Generator,
    *,
    forward_finished: bool = False,
) -> Episodes:
    """Play the first episode of each sub-environment to its end.

    Each policy call sees only the sub-environments whose episode is still running.
    ``forward_finished=True`` forwards every observation until the last episode ends, as
    evaluations did before; it exists only to measure the difference
    (``benchmarks/test_bench_evaluation.py``) and gives other scores when actions are
    sampled (the generator is drawn for more rows).
    """
    obs, _ = venv.reset(seed=seed)
    n = venv.num_envs
    best = spec.episode_score == "max_reward"
    scores = np.full(n, -np.inf if best else 0.0, dtype=np.float64)
    finished = np.zeros(n, dtype=bool)
    succeeded = np.zeros(n, dtype=bool)
    reports_success = False
    greedy = spec.action_selection == "greedy"
    executed = _Executed()
    forwarded = steps = 0
    everyone = np.arange(n)
    while steps <= spec.horizon:
        asked = everyone if forward_finished else np.flatnonzero(~finished)
        actions = policy.act(
            observation_input(_rows(obs, asked, n), device), greedy=greedy, generator=generator
        )
        forwarded += len(asked)
        for step_actions in _action_plan(actions, spec):
            obs, reward, terminated, truncated, info = venv.step(
                executed.update(asked, step_actions, n)
            )
            steps += 1
            live = ~finished
            reward = np.asarray(reward, dtype=np.float64)
            if best:
                scores = np.where(live, np.maximum(scores, reward), scores)
            else:
                scores += np.where(live, reward, 0.0)
            if "is_success" in info:
                reports_success = True
                succeeded |= live & np.asarray(info["is_success"], dtype=bool)
            finished |= np.asarray(terminated) | np.asarray(truncated)
            if finished.all():
                return Episodes(scores, succeeded if reports_success else None, forwarded)
    raise RuntimeError(
        f"{spec.env_id}: episodes did not end within the horizon of {spec.horizon} steps; "
        "the environment must truncate at its horizon"
    )


def rollout_returns(
    venv, policy: Policy, spec: EnvSpec, seed: int, device: torch.device, generator: torch.Generator
) -> np.ndarray:
    """The score (return, or best reward) of the first episode of each sub-environment."""
    return run_episodes(venv, policy, spec, seed, device, generator).scores


class Evaluator:
    """Scores policies on one task with a fixed protocol: same start states for every call.

    The vector environment is made once and reset with the protocol's seed at each call, so
    an environment that can restore its start states (procgen) is not rebuilt per
    evaluation.
    """

    def __init__(self, task: Task, device: torch.device, rollouts: bool = True) -> None:
        self.task = task
        self.spec = task.spec
        self.device = device
        # Without rollouts only the test-set metrics are computed (and the score is NaN).
        self.venv = (
            task.make_vec_env(self.spec.eval_episodes, seed=self.spec.eval_seed)
            if rollouts
            else None
        )
        test_set = task.test_set()
        self.test_set = TestSetScorer(test_set, device) if test_set is not None else None

    def __call__(self, policy: Policy) -> EvalResult:
        success: dict[str, float] = {}
        if self.venv is None:
            returns = np.array([])
            mean = float("nan")
        else:
            generator = torch.Generator(device="cpu").manual_seed(self.spec.eval_seed)
            episodes = self._episodes(policy, generator)
            returns = episodes.scores
            mean = float(returns.mean())
            if episodes.successes is not None:
                success = {"success_rate": float(episodes.successes.mean())}
            success |= self._group_metrics(episodes)
        return EvalResult(
            score=float(self.spec.normaliser(mean)),
            mean_return=mean,
            returns=tuple(float(r) for r in returns),
            metrics={
                **success,
                **(self.test_set(policy) if self.test_set is not None else {}),
                **self.task.metrics(policy, self.device),
            },
        )

    def _episodes(self, policy: Policy, generator: torch.Generator) -> Episodes:
        """Every episode of the protocol. A vector env that cannot keep all its simulators
        alive at once (LIBERO's) offers ``waves()``: vector envs over consecutive slices of
        its sub-environments, each played to its end (and closed) before the next; their
        episodes are joined in order."""
        waves = getattr(self.venv, "waves", None)
        if waves is None:
            return run_episodes(
                self.venv, policy, self.spec, self.spec.eval_seed, self.device, generator
            )
        parts = [
            run_episodes(wave, policy, self.spec, self.spec.eval_seed, self.device, generator)
            for wave in waves()
        ]
        reported = all(p.successes is not None for p in parts)
        return Episodes(
            np.concatenate([p.scores for p in parts]),
            np.concatenate([p.successes for p in parts]) if reported else None,  # type: ignore[misc]
            sum(p.forwarded for p in parts),
        )

    def _group_metrics(self, episodes: Episodes) -> dict[str, float]:
        """Per named group of sub-environments (``venv.episode_groups``: a multitask
        evaluation's tasks), its normalised score ``score/<group>`` and, where the
        environment reports success, ``success_rate/<group>``."""
        groups = getattr(self.venv, "episode_groups", None) or {}
        out: dict[str, float] = {}
        for name, index in groups.items():
            if len(index) == 0:
                continue
            out[f"score/{name}"] = float(self.spec.normaliser(float(episodes.scores[index].mean())))
            if episodes.successes is not None:
                out[f"success_rate/{name}"] = float(episodes.successes[index].mean())
        return out

    def close(self) -> None:
        if self.venv is not None:
            self.venv.close()
