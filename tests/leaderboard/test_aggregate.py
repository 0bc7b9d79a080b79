"""Suite statistics (IQM, optimality gap, probability of improvement, stratified bootstrap,
sample efficiency) against values worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ssilbench.leaderboard.aggregate import (
    bootstrap,
    iqm,
    mean_score,
    optimality_gap,
    probability_of_improvement,
    sample_efficiency,
)


@pytest.mark.parametrize(
    "scores, expected",
    [
        ([[0, 1, 2, 3], [4, 5, 6, 7]], 3.5),  # 8 runs: 2 cut from each end, mean(2..5)
        ([list(range(10))], 4.5),  # 10 runs: floor(2.5) = 2 cut, mean(2..7)
        ([[5, 1, 4], [2, 3]], 3.0),  # 5 runs: 1 cut from each end, mean(2, 3, 4)
        ([[0.7]], 0.7),
        ([[1, 2, 3]], 2.0),  # 3 runs: nothing cut
    ],
)
def test_iqm(scores, expected):
    assert iqm(scores) == pytest.approx(expected)


def test_iqm_ignores_outliers_where_the_mean_does_not():
    scores = [[0.5, 0.5, 0.5, 100.0], [0.5, 0.5, 0.5, -100.0]]
    assert iqm(scores) == pytest.approx(0.5)
    assert mean_score([[1.0, 3.0], [5.0]]) == pytest.approx(3.5)  # mean of task means


def test_optimality_gap():
    assert optimality_gap([[0.5, 1.2], [0.0, 1.0]]) == pytest.approx((0.5 + 0 + 1 + 0) / 4)


def test_probability_of_improvement():
    # Pairs (1,0) win, (1,2) lose, (2,0) win, (2,2) tie: (1 + 0 + 1 + 0.5) / 4.
    assert probability_of_improvement([[1, 2]], [[0, 2]]) == pytest.approx(0.625)
    # Averaged over tasks, not pooled: task 1 always wins, task 2 always loses.
    assert probability_of_improvement([[1, 1], [0]], [[0], [1, 1, 1]]) == pytest.approx(0.5)
    x, y = [[0.1, 0.5, 0.9], [0.3]], [[0.2, 0.5], [0.3, 0.0]]
    assert probability_of_improvement(x, y) + probability_of_improvement(y, x) == pytest.approx(1)
    with pytest.raises(ValueError, match="same tasks"):
        probability_of_improvement([[1]], [[1], [2]])


def test_bootstrap_resamples_within_each_task():
    # Task 1 has one run (always 1.0); task 2's mean over two resampled runs is 0, 0.5 or 1
    # with probabilities 1/4, 1/2, 1/4, so the mean over tasks is 0.5, 0.75 or 1.0 and the
    # 2.5% and 97.5% percentiles are 0.5 and 1.0. Pooling the tasks would allow 1/3 and 2/3.
    interval = bootstrap("mean", [[1.0], [0.0, 1.0]], reps=4000)
    assert (interval.value, interval.low, interval.high) == (0.75, 0.5, 1.0)


def test_bootstrap_is_seeded_contains_its_estimate_and_collapses_on_constant_scores():
    rng = np.random.default_rng(3)
    scores = [list(rng.random(3)) for _ in range(16)]
    a, b = bootstrap("iqm", scores), bootstrap("iqm", scores)
    assert a == b
    assert a.low <= a.value <= a.high and a.high - a.low > 0
    assert bootstrap("iqm", scores, seed=1) != a
    flat = bootstrap("optimality_gap", [[0.4, 0.4], [0.4]])
    assert (flat.value, flat.low, flat.high) == pytest.approx((0.6, 0.6, 0.6))
    pi = bootstrap("probability_of_improvement", [[1.0, 1.0]], [[0.0, 0.0]])
    assert (pi.value, pi.low, pi.high) == (1.0, 1.0, 1.0)


def test_bootstrap_rejects_a_task_without_runs():
    with pytest.raises(ValueError, match="at least one score"):
        bootstrap("iqm", [[0.5], []])


def test_sample_efficiency():
    # Score 0 at N_L = 1 and 1 at N_L = e^2: the trapezoid averages to 0.5.
    assert sample_efficiency([(1, 0.0), (math.exp(2), 1.0)]) == pytest.approx(0.5)
    assert sample_efficiency([(10, 0.4), (100, 0.4), (1000, 0.4)]) == pytest.approx(0.4)
    # Unsorted input, and log spacing: the 10 -> 1000 step weighs twice the 1 -> 10 step.
    value = sample_efficiency([(1000, 1.0), (1, 0.0), (10, 0.0)])
    assert value == pytest.approx((0 + 2 * 0.5) / 3)
    assert sample_efficiency([(16, 0.5)]) is None
    assert sample_efficiency([(16, 0.5), (16, 0.7)]) is None


def test_performance_profile_is_a_step_function_with_a_bootstrap_band():
    from ssilbench.leaderboard.aggregate import performance_profile

    p = performance_profile([[0.2, 0.4, 0.6], [0.5, 0.7]])
    # The lowest score less one, then every distinct score, where the fraction steps down.
    assert p.taus == pytest.approx([-0.8, 0.2, 0.4, 0.5, 0.6, 0.7])
    assert p.value == pytest.approx([1.0, 0.8, 0.6, 0.4, 0.2, 0.0])
    assert all(lo <= v <= hi for lo, v, hi in zip(p.low, p.value, p.high, strict=True))
    assert p.low[0] == p.high[0] == 1.0 and p.low[-1] == p.high[-1] == 0.0
    assert any(hi - lo > 0.2 for lo, hi in zip(p.low, p.high, strict=True))  # a real band
    assert performance_profile([[0.2, 0.4, 0.6], [0.5, 0.7]]) == p  # seeded
    flat = performance_profile([[0.5, 0.5], [0.5]])  # no spread: no band
    assert flat.value == flat.low == flat.high == [1.0, 0.0]
