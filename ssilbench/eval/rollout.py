"""Vectorised rollouts that run every episode to its end (one episode per sub-environment).

Averaging the first episodes to finish would favour short episodes; here each of the
``num_envs`` sub-environments plays exactly one episode and all of them count.
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


def rollout_returns(
    venv, policy: Policy, spec: EnvSpec, seed: int, device: torch.device, generator: torch.Generator
) -> np.ndarray:
    """The return of the first episode of each sub-environment."""
    obs, _ = venv.reset(seed=seed)
    n = venv.num_envs
    returns = np.zeros(n, dtype=np.float64)
    finished = np.zeros(n, dtype=bool)
    greedy = spec.action_selection == "greedy"
    for _ in range(spec.horizon + 1):
        actions = policy.act(as_model_input(obs, device), greedy=greedy, generator=generator)
        obs, reward, terminated, truncated, _ = venv.step(actions.cpu().numpy())
        returns += np.where(finished, 0.0, reward)
        finished |= np.asarray(terminated) | np.asarray(truncated)
        if finished.all():
            return returns
    raise RuntimeError(
        f"{spec.env_id}: episodes did not end within the horizon of {spec.horizon} steps; "
        "the environment must truncate at its horizon"
    )


class Evaluator:
    """Scores policies on one task with a fixed protocol: same start states for every call."""

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
        if self.venv is None:
            returns = np.array([])
            mean = float("nan")
        else:
            generator = torch.Generator(device="cpu").manual_seed(self.spec.eval_seed)
            returns = rollout_returns(
                self.venv, policy, self.spec, self.spec.eval_seed, self.device, generator
            )
            mean = float(returns.mean())
        return EvalResult(
            score=float(self.spec.normaliser(mean)),
            mean_return=mean,
            returns=tuple(float(r) for r in returns),
            metrics={
                **(self.test_set(policy) if self.test_set is not None else {}),
                **self.task.metrics(policy, self.device),
            },
        )

    def close(self) -> None:
        if self.venv is not None:
            self.venv.close()
