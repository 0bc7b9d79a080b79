"""Why does IDM labeling beat BC more on some games? The paper's two factors (section 5.1),
measured from the results store.

- **Complexity.** Per game, the return gap of a method over a baseline (normalised score,
  mean over seeds, then over the label budgets both were run at), grouped by a class that the
  environment declares in ``EnvSpec.metadata`` (Procgen: ``complexity`` = simple | complex).
- **Stochasticity.** Per game, the entropy gap H(baseline policy) - H(method's IDM) on the
  test split against the return gap, with Pearson's r, its two-sided t-test p-value and a
  bootstrap interval over games.

Everything here is a pure function of run records (rows of the results store) except
:func:`metadata_from_registry`, which asks the environment plugins for their metadata
because the store does not keep it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ssilbench.data.split import budget_sort_key
from ssilbench.errors import UsageError, did_you_mean
from ssilbench.leaderboard.aggregate import BOOTSTRAP_REPS, BOOTSTRAP_SEED, Interval
from ssilbench.leaderboard.stats import bootstrap_gap, mean_ci95, t_test_p

if TYPE_CHECKING:
    from ssilbench.plugins import Plugins
    from ssilbench.runs.records import RunRecord

POLICY_ENTROPY = "policy_entropy"  # names written by ssilbench.eval.diagnostics
IDM_ENTROPY = "idm_entropy"


@dataclass
class GameGap:
    """One game (an environment label: task plus non-default options)."""

    env: str
    group: str | None  # the class from the environment's metadata; None when it has none
    gap: float | None  # None when one of the two methods has no scored run at a shared budget
    interval: Interval | None  # bootstrap over seeds; None with a single seed per cell
    budgets: list[str]  # the budgets averaged
    method_runs: int
    baseline_runs: int
    policy_entropy: float | None = None  # baseline's policy, at entropy_budget
    idm_entropy: float | None = None  # method's IDM, at entropy_budget
    entropy_budget: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def entropy_gap(self) -> float | None:
        if self.policy_entropy is None or self.idm_entropy is None:
            return None
        return self.policy_entropy - self.idm_entropy


@dataclass
class GroupMean:
    group: str
    games: list[str]
    mean: float
    ci95: float | None  # Student-t half-width over the games; None for a single game


@dataclass
class Correlation:
    n: int
    r: float
    p_value: float
    low: float | None  # 95% bootstrap interval over games; None when it cannot be formed
    high: float | None


@dataclass
class Analysis:
    method: str
    baseline: str
    by: str
    games: list[GameGap]
    groups: list[GroupMean]
    correlation: Correlation | None
    notes: list[str] = field(default_factory=list)  # about the selection as a whole


# --- choosing what to compare ------------------------------------------------------------


def resolve_label(records: Sequence[RunRecord], name: str, flag: str, scope: str) -> str:
    """The method label ``name`` stands for: an exact label, else the one label of the runs
    of the method called ``name``. A name with no runs, or one naming several configured
    variants, is a UsageError that lists what there is."""
    labels = sorted({r.method_label for r in records})
    if name in labels:
        return name
    variants = sorted({r.method_label for r in records if r.method == name})
    if len(variants) == 1:
        return variants[0]
    if variants:
        raise UsageError(
            f"{flag} {name}: the store holds several variants of '{name}' on {scope}: "
            f"{'; '.join(variants)}. Pass one label, quoted, e.g. {flag} '{variants[-1]}'."
        )
    raise UsageError(
        f"{flag} {name}: no finished runs of '{name}' on {scope}.{did_you_mean(name, labels)} "
        f"Methods with runs: {', '.join(labels)}."
    )


def metadata_from_registry(plugins: Plugins) -> Callable[[RunRecord], dict[str, Any]]:
    """``EnvSpec.metadata`` of a run's environment, with the run's options, through the
    environment registry (cached per environment and options)."""
    import json

    from ssilbench.planning.values import validate_model
    from ssilbench.registry import split_env_id

    cache: dict[tuple[str, str], dict[str, Any]] = {}

    def lookup(record: RunRecord) -> dict[str, Any]:
        options = record.spec.options
        key = (record.env, json.dumps(options, sort_keys=True))
        if key not in cache:
            family, task = split_env_id(record.env)
            environment = plugins.environments.create(family)
            opts = validate_model(environment.Options, options, f"options of '{record.env}'")
            cache[key] = dict(environment.load(task, opts).spec.metadata)
        return cache[key]

    return lookup


def groups_of(
    records: Iterable[RunRecord], metadata: Callable[[RunRecord], Mapping[str, Any]], key: str
) -> dict[str, str | None]:
    """Environment label -> the value of metadata ``key`` (None when absent), asked of
    ``metadata`` once per label: the store does not keep an environment's metadata."""
    out: dict[str, str | None] = {}
    for record in records:
        if record.env_label in out:
            continue
        value = metadata(record).get(key)
        out[record.env_label] = None if value is None else str(value)
    return out


# --- the analysis ------------------------------------------------------------------------


def _cells(records: Iterable[RunRecord], label: str, metric: str) -> dict[str, list[float]]:
    """Budget -> values of ``metric`` in the runs of ``label`` (runs without it left out)."""
    out: dict[str, list[float]] = defaultdict(list)
    for r in records:
        if r.method_label == label and (v := r.value(metric)) is not None:
            out[r.budget].append(float(v))
    return out


def _gap_interval(
    mine: list[list[float]], theirs: list[list[float]], reps: int, seed: int
) -> Interval | None:
    """Stratified bootstrap of the budget-averaged gap: seeds resampled within each cell."""
    if all(len(c) == 1 for c in mine + theirs):
        return None
    rng = np.random.Generator(np.random.PCG64(seed))
    cells = [(m, t, False) for m, t in zip(mine, theirs, strict=True)]
    gaps = bootstrap_gap(cells, reps, rng)
    point = float(np.mean([np.mean(m) - np.mean(t) for m, t in zip(mine, theirs, strict=True)]))
    low, high = np.percentile(gaps, [2.5, 97.5])
    return Interval(point, float(low), float(high))


def _game(
    env: str,
    records: list[RunRecord],
    method: str,
    baseline: str,
    group: str | None,
    entropy_budget: str | None,
    reps: int,
    seed: int,
) -> GameGap:
    runs = {m: [r for r in records if r.method_label == m] for m in (method, baseline)}
    mine, theirs = _cells(records, method, "score"), _cells(records, baseline, "score")
    shared = sorted(set(mine) & set(theirs), key=budget_sort_key)
    game = GameGap(env, group, None, None, shared, len(runs[method]), len(runs[baseline]))
    for m in (method, baseline):
        if not runs[m]:
            game.notes.append(f"no runs of {m}")
        elif unscored := sum(r.score is None for r in runs[m]):
            game.notes.append(f"{unscored} run(s) of {m} without a rollout score")
        steps = sorted({r.spec.steps for r in runs[m]}, key=str)
        if len(steps) > 1:
            game.notes.append(f"runs of {m} mix step settings ({', '.join(map(str, steps))})")
    for m, cells, other in ((method, mine, theirs), (baseline, theirs, mine)):
        alone = sorted(set(cells) - set(other), key=budget_sort_key)
        if alone and other:
            game.notes.append(f"N_L={', '.join(alone)} run with {m} only (left out of the gap)")
    if shared:
        game.gap = float(np.mean([np.mean(mine[b]) - np.mean(theirs[b]) for b in shared]))
        game.interval = _gap_interval([mine[b] for b in shared], [theirs[b] for b in shared],
                                      reps, seed)  # fmt: skip
    elif mine and theirs:
        game.notes.append(f"{method} and {baseline} share no label budget")

    pol = _cells(records, baseline, POLICY_ENTROPY)
    idm = _cells(records, method, IDM_ENTROPY)
    if runs[baseline] and not pol:
        game.notes.append(f"no {POLICY_ENTROPY} in the runs of {baseline}")
    if runs[method] and not idm:
        game.notes.append(f"no {IDM_ENTROPY} in the runs of {method}")
    if pol and idm:
        both = sorted(set(pol) & set(idm), key=budget_sort_key)
        if entropy_budget is not None and entropy_budget not in both:
            game.notes.append(f"no entropies of both methods at N_L={entropy_budget}")
        elif not both:
            game.notes.append("no label budget with entropies of both methods")
        else:
            # The paper compares the models trained on the most labels (all transitions).
            chosen = entropy_budget or both[-1]
            game.entropy_budget = chosen
            game.policy_entropy = float(np.mean(pol[chosen]))
            game.idm_entropy = float(np.mean(idm[chosen]))
    return game


def _pearson_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pearson's r of each row pair; NaN where a row has no spread."""
    dx = x - x.mean(axis=-1, keepdims=True)
    dy = y - y.mean(axis=-1, keepdims=True)
    den = np.sqrt((dx * dx).sum(-1) * (dy * dy).sum(-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (dx * dy).sum(-1) / np.where(den > 0, den, 1.0), np.nan)


def pearson(
    x: Sequence[float], y: Sequence[float], reps: int = BOOTSTRAP_REPS, seed: int = BOOTSTRAP_SEED
) -> Correlation | None:
    """Pearson's r with its t-test p-value (H0: no correlation) and a 95% percentile
    bootstrap interval (pairs resampled; resamples without spread are skipped). None below
    three pairs or without spread in x or y."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n = len(xs)
    if n < 3:
        return None
    r = float(_pearson_rows(xs, ys))
    if math.isnan(r):
        return None
    r = max(-1.0, min(1.0, r))
    df = n - 2
    p = 0.0 if abs(r) == 1.0 else t_test_p(r * math.sqrt(df / (1 - r * r)), df)
    rng = np.random.Generator(np.random.PCG64(seed))
    idx = rng.integers(0, n, (reps, n))
    boot = _pearson_rows(xs[idx], ys[idx])
    boot = boot[~np.isnan(boot)]
    low, high = np.percentile(boot, [2.5, 97.5]) if len(boot) else (None, None)
    return Correlation(n, r, p, None if low is None else float(low),
                       None if high is None else float(high))  # fmt: skip


def analyze(
    records: Iterable[RunRecord],
    method: str,
    baseline: str,
    groups: Mapping[str, str | None],
    by: str = "complexity",
    expected: Sequence[str] = (),
    entropy_budget: str | None = None,
    reps: int = BOOTSTRAP_REPS,
    seed: int = BOOTSTRAP_SEED,
) -> Analysis:
    """The complexity and stochasticity analysis of ``method`` over ``baseline`` (method
    labels) on the games of ``records``. ``groups`` maps each environment label to its
    class; ``expected`` are the environment ids asked for, so that games without any run are
    named rather than silently missing."""
    records = [r for r in records if r.method_label in (method, baseline)]
    by_env: dict[str, list[RunRecord]] = defaultdict(list)
    for r in records:
        by_env[r.env_label].append(r)
    games = [
        _game(env, by_env[env], method, baseline, groups.get(env), entropy_budget, reps, seed)
        for env in sorted(by_env)
    ]
    result = Analysis(method, baseline, by, games, [], None)
    seen = {r.env for r in records}
    if missing := [e for e in expected if e not in seen]:
        result.notes.append(f"no runs of {method} or {baseline}: {', '.join(missing)}")
    if unclassed := [g.env for g in games if g.group is None]:
        result.notes.append(f"no '{by}' in the metadata of: {', '.join(unclassed)}")
    members: dict[str, list[GameGap]] = defaultdict(list)
    for g in games:
        if g.group is not None and g.gap is not None:
            members[g.group].append(g)
    for group in sorted(members):
        mean, ci = mean_ci95([g.gap for g in members[group]])
        result.groups.append(GroupMean(group, [g.env for g in members[group]], mean, ci))
    paired = [g for g in games if g.gap is not None and g.entropy_gap is not None]
    result.correlation = pearson([g.entropy_gap for g in paired], [g.gap for g in paired],
                                 reps, seed)  # fmt: skip
    if result.correlation is None:
        result.notes.append(
            f"no correlation: {len(paired)} game(s) with both a return gap and an entropy gap "
            "(three or more, with spread, are needed)"
        )
    return result
