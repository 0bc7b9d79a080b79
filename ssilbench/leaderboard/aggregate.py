"""Suite-level statistics over tasks and seeds (Agarwal et al., 2021, "Deep RL at the edge of
the statistical precipice"), implemented with numpy.

Scores are arranged per task as arrays of runs (seeds), tasks possibly with different run
counts. Point estimates pool every run of every task; intervals come from a *stratified*
bootstrap: runs are resampled with replacement within each task, independently, and the
statistic is recomputed. The 95% interval is the 2.5th-97.5th percentile of the bootstrap
distribution. The generator is seeded (``seed``) so that a leaderboard is reproducible.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

BOOTSTRAP_REPS = 2000
BOOTSTRAP_SEED = 0

TaskScores = Sequence[Sequence[float]]  # one sequence of run scores per task


@dataclass(frozen=True)
class Interval:
    value: float
    low: float
    high: float


def _rows(scores: TaskScores) -> list[np.ndarray]:
    """Each task's runs as a (1, runs) array: the statistics below take (reps, runs) arrays,
    so the bootstrap evaluates all its resamples in one vectorised call."""
    out = [np.asarray(s, dtype=float).reshape(1, -1) for s in scores]
    if not out or any(a.size == 0 for a in out):
        raise ValueError("every task needs at least one score")
    return out


def _iqm(tasks: list[np.ndarray]) -> np.ndarray:
    flat = np.sort(np.concatenate(tasks, axis=1), axis=1)
    cut = int(0.25 * flat.shape[1])
    return flat[:, cut : flat.shape[1] - cut].mean(axis=1)


def _gap(tasks: list[np.ndarray], gamma: float = 1.0) -> np.ndarray:
    return np.maximum(gamma - np.concatenate(tasks, axis=1), 0.0).mean(axis=1)


def _mean(tasks: list[np.ndarray]) -> np.ndarray:
    return np.mean([t.mean(axis=1) for t in tasks], axis=0)


def _improvement(x: list[np.ndarray], y: list[np.ndarray]) -> np.ndarray:
    if len(x) != len(y):
        raise ValueError("both methods need scores on the same tasks")
    per_task = []
    for a, b in zip(x, y, strict=True):
        a, b = a[:, :, None], b[:, None, :]
        per_task.append(((a > b) + 0.5 * (a == b)).mean(axis=(1, 2)))
    return np.mean(per_task, axis=0)


STATISTICS: dict[str, Callable[..., np.ndarray]] = {
    "iqm": _iqm,
    "optimality_gap": _gap,
    "mean": _mean,
    "probability_of_improvement": _improvement,
}


def iqm(scores: TaskScores) -> float:
    """Interquartile mean of all runs of all tasks: the mean of the middle 50% once
    ``floor(n / 4)`` values are cut from each end (``scipy.stats.trim_mean(x, 0.25)``)."""
    return float(_iqm(_rows(scores))[0])


def optimality_gap(scores: TaskScores) -> float:
    """How far runs fall short of a normalised score of 1 on average: mean of max(1 - x, 0)."""
    return float(_gap(_rows(scores))[0])


def mean_score(scores: TaskScores) -> float:
    """The mean over tasks of each task's mean over runs."""
    return float(_mean(_rows(scores))[0])


def probability_of_improvement(x: TaskScores, y: TaskScores) -> float:
    """P(X > Y): over tasks, the mean of the probability that a run of X beats a run of Y on
    that task (ties count one half) — the Mann-Whitney U statistic / (n·m) per task."""
    return float(_improvement(_rows(x), _rows(y))[0])


def bootstrap(
    statistic: str,
    *groups: TaskScores,
    reps: int = BOOTSTRAP_REPS,
    seed: int = BOOTSTRAP_SEED,
) -> Interval:
    """A statistic of ``STATISTICS`` with its stratified-bootstrap 95% percentile interval;
    each group (one method's task scores) is resampled within every task independently."""
    fn = STATISTICS[statistic]
    rows = [_rows(g) for g in groups]
    point = float(fn(*rows)[0])
    rng = np.random.Generator(np.random.PCG64(seed))
    resampled = [
        [t[0, rng.integers(0, t.shape[1], (reps, t.shape[1]))] for t in g] for g in rows
    ]  # fmt: skip
    low, high = np.percentile(fn(*resampled), [2.5, 97.5])
    return Interval(point, float(low), float(high))


@dataclass(frozen=True)
class Profile:
    """A performance profile: at each threshold of ``taus`` (ascending), the fraction of runs
    scoring above it, with the 2.5th and 97.5th percentiles of its stratified bootstrap."""

    taus: list[float]
    value: list[float]
    low: list[float]
    high: list[float]


def performance_profile(
    scores: TaskScores, reps: int = BOOTSTRAP_REPS, seed: int = BOOTSTRAP_SEED
) -> Profile:
    """The fraction of all runs of all tasks scoring above τ (Agarwal et al., 2021): a step
    function of τ that drops at each run's score. ``taus`` holds the lowest score less one
    and then each distinct score: the fraction at a score is the value from there up to the
    next one, so these points give the whole step function (its bootstrap resamples only
    hold the same scores, so they step at the same points). The band resamples the runs
    within each task, like :func:`bootstrap`."""
    rows = _rows(scores)
    pooled = np.concatenate(rows, axis=1)[0]
    distinct = np.unique(pooled)
    taus = np.concatenate([[distinct[0] - 1.0], distinct])

    def above(sample: np.ndarray) -> np.ndarray:  # (reps, runs) -> (reps, taus)
        ordered = np.sort(sample, axis=1)
        n = ordered.shape[1]
        return np.stack([n - np.searchsorted(r, taus, side="right") for r in ordered]) / n

    rng = np.random.Generator(np.random.PCG64(seed))
    resampled = np.concatenate(
        [t[0, rng.integers(0, t.shape[1], (reps, t.shape[1]))] for t in rows], axis=1
    )
    low, high = np.percentile(above(resampled), [2.5, 97.5], axis=0)
    return Profile([float(t) for t in taus], [float(v) for v in above(pooled[None, :])[0]],
                   [float(v) for v in low], [float(v) for v in high])  # fmt: skip


def sample_efficiency(points: Sequence[tuple[float, float]]) -> float | None:
    """Area under mean score vs log N_L, divided by the log range: the average score over
    the budgets on a log scale (one number per method; needs two or more budgets).
    ``points`` are (N_L as a count of labeled items, mean score)."""
    pts = sorted((n, v) for n, v in points if n > 0 and not math.isnan(v))
    xs = [math.log(n) for n, _ in pts]
    if len(pts) < 2 or xs[-1] == xs[0]:
        return None
    area = sum(
        (xs[i + 1] - xs[i]) * (pts[i + 1][1] + pts[i][1]) / 2 for i in range(len(pts) - 1)
    )  # fmt: skip
    return area / (xs[-1] - xs[0])
