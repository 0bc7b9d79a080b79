"""Seed statistics, in one place for every report: the mean with its displayed 95% interval
(a seeded percentile bootstrap, :func:`seed_interval`), the two-sided Student-t interval,
Student-t p-values without SciPy, one-sided t-tests (one-sample, paired, Welch) and a
stratified bootstrap of a gap between two methods."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ssilbench.leaderboard.aggregate import BOOTSTRAP_REPS, BOOTSTRAP_SEED

# Two-sided 95% quantiles t_{0.975, df} of Student's t distribution for df = 1..30.
_T975 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)
_Z975 = 1.959964


def t975(df: int) -> float:
    """t_{0.975} for ``df`` degrees of freedom (Cornish-Fisher expansion beyond the table)."""
    if df < 1:
        raise ValueError("a t interval needs at least 2 samples")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def mean_ci95(values: Sequence[float]) -> tuple[float, float | None]:
    """(mean, half-width of the 95% interval); the half-width is None for a single seed."""
    n = len(values)
    if n == 0:
        raise ValueError("no values")
    mean = math.fsum(values) / n
    if n == 1:
        return mean, None
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, t975(n - 1) * math.sqrt(var / n)


# How every table and figure states its per-cell interval (captions, legends, footnotes).
SEED_INTERVAL = (
    f"95% percentile-bootstrap interval: {BOOTSTRAP_REPS} resamples of the seeds, generator "
    f"seed {BOOTSTRAP_SEED}; it stays within the seeds' range"
)


def seed_interval(
    values: Sequence[float], reps: int = BOOTSTRAP_REPS, seed: int = BOOTSTRAP_SEED
) -> tuple[float, float | None, float | None]:
    """(mean, low, high): the mean over seeds and the 2.5th-97.5th percentile of the means of
    ``reps`` resamples of the seeds with replacement; low and high are None for one seed.

    Displayed instead of the t-interval, which leaves the score range with few seeds (two
    seeds 0.1 and 0.68 give 0.391 ± 3.68): a percentile interval never leaves the seeds'
    range [min, max], whatever the metric. With few seeds it covers less than 95% (two seeds
    give exactly their range); the claim checks keep their t-tests. The generator is seeded
    afresh for each cell, so a cell's interval does not depend on the other cells."""
    n = len(values)
    if n == 0:
        raise ValueError("no values")
    mean = math.fsum(values) / n
    if n == 1:
        return mean, None, None
    x = np.asarray(values, dtype=float)
    lo, hi = float(x.min()), float(x.max())
    if lo == hi:
        return mean, mean, mean
    rng = np.random.Generator(np.random.PCG64(seed))
    means = x[rng.integers(0, n, (reps, n))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    # Clamped: a resampled mean of equal values may round an ulp past them.
    return mean, min(max(float(low), lo), hi), min(max(float(high), lo), hi)


def t_test_p(t: float, df: int) -> float:
    """Two-sided p-value P(|T| >= |t|) of Student's t with ``df`` degrees of freedom, from
    the closed form for integer df (Abramowitz & Stegun 26.7.3-4), so no SciPy is needed."""
    if df < 1:
        raise ValueError("the t-test needs at least one degree of freedom")
    theta = math.atan(abs(t) / math.sqrt(df))
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    if df % 2:
        term = total = math.cos(theta) if df > 1 else 0.0
        for k in range(1, (df - 1) // 2):
            term *= 2 * k / (2 * k + 1) * c2
            total += term
        inside = 2 / math.pi * (theta + s * total)
    else:
        term = total = 1.0
        for k in range(1, df // 2):
            term *= (2 * k - 1) / (2 * k) * c2
            total += term
        inside = s * total
    return min(1.0, max(0.0, 1.0 - inside))


def t_upper_p(t: float, df: float) -> float:
    """One-sided p-value P(T >= t). A fractional ``df`` (Welch's) is rounded down: fewer
    degrees of freedom give a larger p-value, so the test stays conservative."""
    two = t_test_p(t, max(1, math.floor(df + 1e-9)))
    return two / 2 if t >= 0 else 1.0 - two / 2


@dataclass(frozen=True)
class TTest:
    """A one-sided t-test in both directions of a mean difference (``estimate``: the mean of
    a minus the mean of b, or the mean minus the reference value).

    ``p_greater`` tests "the difference is above 0", ``p_less`` "below 0"; both are None
    when there is no test (fewer than two values on a side). Without spread (every value
    equal on each side) the t statistic is undefined: a difference in the tested direction
    then counts as established (p = 0) and any other as not (p = 1), so that, e.g., two
    methods at 1.000 on every seed establish nothing and 1.000 against 0.500 on every seed
    establishes the difference."""

    estimate: float
    p_greater: float | None
    p_less: float | None
    kind: str  # "one-sample t", "paired t" or "Welch t"
    n: str  # "n = 5", or "n = 5 vs 4" for Welch

    def describe(self) -> str:
        return f"{self.kind}, {self.n}"


def _no_spread(values: Sequence[float]) -> bool:
    # Compared directly: a mean computed from equal values need not equal them exactly.
    return max(values) == min(values)


def _directions(estimate: float, t: float | None, df: float) -> tuple[float, float]:
    if t is None:  # no spread
        return (0.0 if estimate > 0 else 1.0), (0.0 if estimate < 0 else 1.0)
    return t_upper_p(t, df), t_upper_p(-t, df)


def one_sample_t(values: Sequence[float], mu: float = 0.0, kind: str = "one-sample t") -> TTest:
    """One-sided one-sample t-tests of mean(values) against ``mu``."""
    n = len(values)
    if n == 0:
        raise ValueError("no values")
    mean = math.fsum(values) / n
    if n < 2:
        return TTest(mean - mu, None, None, kind, f"n = {n}")
    if _no_spread(values):
        p_greater, p_less = _directions(values[0] - mu, None, 0)
        return TTest(values[0] - mu, p_greater, p_less, kind, f"n = {n}")
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    t = (mean - mu) / math.sqrt(var / n)
    p_greater, p_less = _directions(mean - mu, t, n - 1)
    return TTest(mean - mu, p_greater, p_less, kind, f"n = {n}")


def paired_t(a: Sequence[float], b: Sequence[float]) -> TTest:
    """One-sided paired t-tests of mean(a - b) against 0 (a[i] and b[i] are one pair)."""
    if len(a) != len(b):
        raise ValueError("a paired test needs as many values on each side")
    return one_sample_t([x - y for x, y in zip(a, b, strict=True)], 0.0, "paired t")


def welch_t(a: Sequence[float], b: Sequence[float]) -> TTest:
    """One-sided Welch t-tests of mean(a) - mean(b) against 0, with the Welch-Satterthwaite
    degrees of freedom (rounded down: see :func:`t_upper_p`)."""
    na, nb = len(a), len(b)
    if na == 0 or nb == 0:
        raise ValueError("no values")
    ma, mb = math.fsum(a) / na, math.fsum(b) / nb
    n = f"n = {na} vs {nb}"
    if na < 2 or nb < 2:
        return TTest(ma - mb, None, None, "Welch t", n)
    if _no_spread(a) and _no_spread(b):
        p_greater, p_less = _directions(a[0] - b[0], None, 0)
        return TTest(a[0] - b[0], p_greater, p_less, "Welch t", n)
    va = math.fsum((v - ma) ** 2 for v in a) / (na - 1) / na
    vb = math.fsum((v - mb) ** 2 for v in b) / (nb - 1) / nb
    df = (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1))
    p_greater, p_less = _directions(ma - mb, (ma - mb) / math.sqrt(va + vb), df)
    return TTest(ma - mb, p_greater, p_less, "Welch t", n)


Cell = tuple[Sequence[float], Sequence[float], bool]  # values of a, of b, paired by position


def bootstrap_gap(cells: Sequence[Cell], reps: int, rng: np.random.Generator) -> np.ndarray:
    """``reps`` bootstrap replicates of the gap mean(a) - mean(b) averaged over ``cells``:
    seeds are resampled with replacement within each cell (stratified), jointly for a and b
    where the cell is paired (seed i of a with seed i of b), independently otherwise."""

    def resampled(values: np.ndarray, idx: np.ndarray | None = None) -> np.ndarray:
        if idx is None:
            idx = rng.integers(0, len(values), (reps, len(values)))
        return values[idx].mean(axis=1)

    gaps = []
    for a, b, paired in cells:
        xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
        if paired:
            gaps.append(resampled(xa - xb))
        else:
            gaps.append(resampled(xa) - resampled(xb))
    return np.mean(gaps, axis=0)
