"""Vectorised rollouts, scored as the task's protocol says (``EnvSpec.eval_counting``).

``first_per_env``: each of the ``num_envs`` sub-environments plays exactly one episode and
all of them count, so short episodes weigh no more than long ones. Episodes end at different
times (a few steps apart or hundreds), so the policy is asked to act only for the
sub-environments still playing: forwards for finished ones would be thrown away.
``first_to_finish``: every sub-environment plays on, starting a new episode when one ends,
and the episodes are scored in the order they end until ``num_envs`` have ended (Procgen's
reference code). Where the evaluations start (``EnvSpec.eval_starts``) is the
:class:`Evaluator`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ssilbench.api import EnvSpec, Policy, Task
from ssilbench.context import stream_seed
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
    """The scored episodes: each one's score and whether it succeeded."""

    scores: np.ndarray
    successes: np.ndarray | None
    """Per episode, whether the environment reported ``is_success`` at any step (None when
    it never reports success)."""
    forwarded: int = 0
    """Observations the policy was asked to act on (the evaluation's cost in forwards)."""
    envs: np.ndarray | None = None
    """Per episode, the sub-environment that played it (None: episode i was played by
    sub-environment i)."""

    def played_by(self, index: np.ndarray) -> np.ndarray:
        """Which episodes the sub-environments ``index`` played (a boolean mask)."""
        envs = np.arange(len(self.scores)) if self.envs is None else self.envs
        return np.isin(envs, index)


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


class _Running:
    """The score of the episode each sub-environment is playing: the sum of its rewards, or
    the largest reward seen (``EnvSpec.episode_score``), and whether it succeeded."""

    def __init__(self, n: int, spec: EnvSpec) -> None:
        self.best = spec.episode_score == "max_reward"
        self.start = -np.inf if self.best else 0.0
        self.scores = np.full(n, self.start, dtype=np.float64)
        self.succeeded = np.zeros(n, dtype=bool)
        self.reports_success = False

    def add(self, reward, info: dict, counted: np.ndarray) -> None:
        """One step's rewards (and ``is_success``) for the episodes ``counted`` (a mask)."""
        reward = np.asarray(reward, dtype=np.float64)
        if self.best:
            self.scores = np.where(counted, np.maximum(self.scores, reward), self.scores)
        else:
            self.scores += np.where(counted, reward, 0.0)
        if "is_success" in info:
            self.reports_success = True
            self.succeeded |= counted & np.asarray(info["is_success"], dtype=bool)


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
    """Play the episodes ``spec.eval_counting`` scores: the first of each sub-environment
    (:func:`first_episodes`), or the first ``num_envs`` to end (:func:`first_to_finish`)."""
    if spec.eval_counting == "first_to_finish":
        return first_to_finish(venv, policy, spec, seed, device, generator)
    return first_episodes(venv, policy, spec, seed, device, generator,
                          forward_finished=forward_finished)  # fmt: skip


def first_episodes(
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
    running = _Running(n, spec)
    finished = np.zeros(n, dtype=bool)
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
            running.add(reward, info, ~finished)
            finished |= np.asarray(terminated) | np.asarray(truncated)
            if finished.all():
                successes = running.succeeded if running.reports_success else None
                return Episodes(running.scores, successes, forwarded)
    raise _beyond_horizon(spec)


def first_to_finish(
    venv,
    policy: Policy,
    spec: EnvSpec,
    seed: int,
    device: torch.device,
    generator: torch.Generator,
) -> Episodes:
    """Step every sub-environment (each starts its next episode when one ends) until
    ``num_envs`` episodes have ended; every episode ended by then is scored, those of the
    last step included, in the order they ended (by sub-environment within a step)."""
    obs, _ = venv.reset(seed=seed)
    n = venv.num_envs
    running = _Running(n, spec)
    everyone = np.ones(n, dtype=bool)
    greedy = spec.action_selection == "greedy"
    scores: list[np.ndarray] = []
    successes: list[np.ndarray] = []
    envs: list[np.ndarray] = []
    ended = forwarded = steps = 0
    while steps <= spec.horizon:
        actions = policy.act(observation_input(obs, device), greedy=greedy, generator=generator)
        forwarded += n
        for step_actions in _action_plan(actions, spec):
            obs, reward, terminated, truncated, info = venv.step(step_actions.copy())
            steps += 1
            running.add(reward, info, everyone)
            done = np.flatnonzero(np.asarray(terminated) | np.asarray(truncated))
            scores.append(running.scores[done].copy())
            successes.append(running.succeeded[done].copy())
            envs.append(done)
            running.scores[done] = running.start
            running.succeeded[done] = False
            ended += len(done)
            if ended >= n:
                return Episodes(np.concatenate(scores),
                                np.concatenate(successes) if running.reports_success else None,
                                forwarded, envs=np.concatenate(envs))  # fmt: skip
    raise _beyond_horizon(spec)


def _beyond_horizon(spec: EnvSpec) -> RuntimeError:
    return RuntimeError(
        f"{spec.env_id}: episodes did not end within the horizon of {spec.horizon} steps; "
        "the environment must truncate at its horizon"
    )


def rollout_returns(
    venv, policy: Policy, spec: EnvSpec, seed: int, device: torch.device, generator: torch.Generator
) -> np.ndarray:
    """The score (return, or best reward) of the first episode of each sub-environment."""
    return run_episodes(venv, policy, spec, seed, device, generator).scores


def evaluation_seed(spec: EnvSpec, run_seed: int, step: int) -> int:
    """The seed an evaluation resets the vector environment with: ``eval_seed`` at every
    evaluation (``eval_starts = "fixed"``), or one drawn from (``eval_seed``, the run's seed,
    the evaluation's step) (``"fresh"``). The step rather than a count of evaluations: a
    stage reused from the cache is evaluated at its end only, so the count can differ
    between runs while the steps of the evaluations that happen do not."""
    if spec.eval_starts == "fixed":
        return spec.eval_seed
    return stream_seed(run_seed, f"evaluation:{spec.eval_seed}:{step}")


class Evaluator:
    """Scores policies on one task with its protocol: the same start states at every call,
    or fresh ones per evaluation step (``EnvSpec.eval_starts``), drawn from ``run_seed``.

    The vector environment is made once and reset at each call, so an environment that can
    restore its start states (procgen) is not rebuilt per evaluation.
    """

    def __init__(
        self,
        task: Task,
        device: torch.device,
        rollouts: bool = True,
        run_seed: int = 0,
        venv=None,
    ) -> None:
        """``venv``: the vector env to play instead of the protocol's (``ssilbench eval``:
        fewer episodes, or a filmed one)."""
        self.task = task
        self.spec = task.spec
        self.device = device
        self.run_seed = run_seed
        # Without rollouts only the test-set metrics are computed (and the score is NaN).
        if venv is None and rollouts:
            venv = task.make_vec_env(self.spec.eval_episodes, seed=self.spec.eval_seed)
        self.venv = venv
        test_set = task.test_set()
        self.test_set = TestSetScorer(test_set, device) if test_set is not None else None

    def __call__(self, policy: Policy, step: int = 0) -> EvalResult:
        """Score ``policy`` as the evaluation at training step ``step`` (which decides its
        start states where they are fresh per evaluation)."""
        success: dict[str, float] = {}
        if self.venv is None:
            returns = np.array([])
            mean = float("nan")
        else:
            seed = evaluation_seed(self.spec, self.run_seed, step)
            generator = torch.Generator(device="cpu").manual_seed(seed)
            episodes = self._episodes(policy, seed, generator)
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

    def _episodes(self, policy: Policy, seed: int, generator: torch.Generator) -> Episodes:
        """Every episode of the protocol. A vector env that cannot keep all its simulators
        alive at once (LIBERO's) offers ``waves()``: vector envs over consecutive slices of
        its sub-environments, each played to its end (and closed) before the next; their
        episodes are joined in order."""
        waves = getattr(self.venv, "waves", None)
        if waves is None:
            return run_episodes(self.venv, policy, self.spec, seed, self.device, generator)
        parts, envs, first = [], [], 0
        for wave in waves():
            part = run_episodes(wave, policy, self.spec, seed, self.device, generator)
            played = np.arange(len(part.scores)) if part.envs is None else part.envs
            parts.append(part)
            envs.append(first + played)  # the wave's sub-environments, numbered in the whole
            first += wave.num_envs
        reported = all(p.successes is not None for p in parts)
        return Episodes(
            np.concatenate([p.scores for p in parts]),
            np.concatenate([p.successes for p in parts]) if reported else None,  # type: ignore[misc]
            sum(p.forwarded for p in parts),
            envs=np.concatenate(envs),
        )

    def _group_metrics(self, episodes: Episodes) -> dict[str, float]:
        """Per named group of sub-environments (``venv.episode_groups``: a multitask
        evaluation's tasks), its normalised score ``score/<group>`` and, where the
        environment reports success, ``success_rate/<group>``."""
        groups = getattr(self.venv, "episode_groups", None) or {}
        out: dict[str, float] = {}
        for name, index in groups.items():
            played = episodes.played_by(np.asarray(index))
            if not played.any():
                continue
            mean = float(episodes.scores[played].mean())
            out[f"score/{name}"] = float(self.spec.normaliser(mean))
            if episodes.successes is not None:
                out[f"success_rate/{name}"] = float(episodes.successes[played].mean())
        return out

    def close(self) -> None:
        if self.venv is not None:
            self.venv.close()
