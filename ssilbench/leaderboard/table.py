"""The one table model every leaderboard renderer reads.

One table per environment label; rows are method labels, columns are label budgets N_L,
cells are the mean over seeds with a 95% percentile-bootstrap interval
(:func:`ssilbench.leaderboard.stats.seed_interval`), the seed count and the seeds. The best mean per
column is marked. Each table names the normaliser its scores went through, its runs'
dataset, steps and protocol (``ssilbench.leaderboard.origin``), and gives each method's
sample efficiency (mean score over the budgets on a log scale).

Environments of one family run with the same options form a **suite** (``maze:all``,
``procgen:all (distribution=easy)``): per method and budget, the interquartile mean (IQM)
and the optimality gap over every run of every task, with stratified-bootstrap 95%
intervals (``ssilbench.leaderboard.aggregate``).

An environment whose runs also record the metric per named group of their evaluation's
episodes (a multitask run's tasks: ``success_rate/<task>`` beside ``success_rate``, see
``ssilbench.eval.rollout``) gets a **group table** too: per method and budget, each group's
cell with the same statistics as the environment's cell.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ssilbench.data.split import budget_sort_key
from ssilbench.errors import UsageError
from ssilbench.leaderboard.aggregate import (
    Interval,
    Profile,
    bootstrap,
    performance_profile,
    sample_efficiency,
)
from ssilbench.leaderboard.origin import origin_lines
from ssilbench.leaderboard.stats import seed_interval

if TYPE_CHECKING:
    from ssilbench.runs.records import RunRecord


@dataclass
class Cell:
    mean: float
    low: float | None  # 95% interval (seed_interval); None for a single seed
    high: float | None
    n: int
    best: bool = False
    provenance: list[str] = field(default_factory=list)  # versions, commit and device of runs
    seeds: list[int] = field(default_factory=list)  # the runs' seeds, ascending
    values: list[float] = field(default_factory=list)  # their values, in the order of seeds


@dataclass
class EnvTable:
    env: str
    metric: str
    report: str
    normalisers: list[dict[str, Any]]
    budgets: list[str]
    methods: list[str]
    cells: dict[str, dict[str, Cell]] = field(default_factory=dict)  # method -> budget -> cell
    efficiency: dict[str, float | None] = field(default_factory=dict)  # method -> AUC
    n_labeled: dict[str, float] = field(default_factory=dict)  # budget -> mean |D_L|
    unit: str = "transitions"  # what N_L counts: transitions or whole demonstrations
    plugins: list[dict[str, str]] = field(default_factory=list)
    """Every plugin behind the table's runs: ``plugin``, ``release`` (its distribution and
    version, as the runs recorded it) and ``code`` (the fingerprint of its files; "" for
    runs recorded before fingerprints), one entry per distinct combination, sorted."""
    origin: dict[str, str] = field(default_factory=dict)
    """What the numbers stand on: ``dataset``, ``steps`` and ``protocol``
    (:func:`ssilbench.leaderboard.origin.origin_lines`)."""

    def cell(self, method: str, budget: str) -> Cell | None:
        return self.cells.get(method, {}).get(budget)


@dataclass
class SuiteTable:
    suite: str
    metric: str
    tasks: list[str]
    budgets: list[str]
    methods: list[str]
    iqm: dict[str, dict[str, Interval]] = field(default_factory=dict)  # method -> budget
    optimality_gap: dict[str, dict[str, Interval]] = field(default_factory=dict)
    runs: dict[str, dict[str, int]] = field(default_factory=dict)
    efficiency: dict[str, float | None] = field(default_factory=dict)
    values: dict[str, list[float]] = field(default_factory=dict)  # method -> every run, sorted
    profile: dict[str, Profile] = field(default_factory=dict)  # method -> all budgets pooled


@dataclass
class Comparison:
    """P(X > Y) of two methods over the tasks of a suite (or one task), per budget."""

    scope: str
    method: str
    other: str
    tasks: list[str]
    improvement: dict[str, Interval] = field(default_factory=dict)  # budget -> P(X > Y)


@dataclass
class GroupTable:
    """An environment's metric per group of its evaluation's episodes (the tasks of a
    multitask run), from the runs' ``<metric>/<group>`` companions; the mean over the
    groups is the environment's own cell (:meth:`Table.env_table`)."""

    env: str
    metric: str
    groups: list[str]  # sorted by name
    budgets: list[str]
    methods: list[str]
    cells: dict[str, dict[str, dict[str, Cell]]] = field(default_factory=dict)
    # method -> budget -> group -> cell; the best mean per budget and group is marked

    def cell(self, method: str, budget: str, group: str) -> Cell | None:
        return self.cells.get(method, {}).get(budget, {}).get(group)


@dataclass
class Table:
    tables: list[EnvTable]
    suites: list[SuiteTable] = field(default_factory=list)
    comparisons: list[Comparison] = field(default_factory=list)
    groups: list[GroupTable] = field(default_factory=list)  # per-group breakdowns, by env

    def env_table(self, env: str) -> EnvTable | None:
        return next((t for t in self.tables if t.env == env), None)

    def group_table(self, env: str) -> GroupTable | None:
        return next((g for g in self.groups if g.env == env), None)

    def to_dict(self) -> dict[str, Any]:
        out = {
            "tables": [asdict(t) for t in self.tables],
            "suites": [asdict(s) for s in self.suites],
            "comparisons": [asdict(c) for c in self.comparisons],
        }
        # Only where some run has groups: a store without them exports as it always did.
        if self.groups:
            out["groups"] = [asdict(g) for g in self.groups]
        return out


def provenance(record: RunRecord) -> str:
    """Where a number came from: ssilbench version and commit, torch, the device, and each
    plugin the run used with its release and code fingerprint."""
    v = record.versions or {}
    text = (f"ssilbench {v.get('ssilbench', '?')} (git {v.get('git') or 'unknown'}), "
            f"torch {v.get('torch', '?')}, {record.device or 'unknown device'}")  # fmt: skip
    used = plugin_sources(record)
    if used:
        text += "; plugins: " + ", ".join(plugin_text(p) for p in used)
    return text


def plugin_sources(record: RunRecord) -> list[dict[str, str]]:
    """The plugins a run used, as its spec records them: name, release and code."""
    code = record.spec.code
    return [{"plugin": name, "release": release, "code": code.get(name, "")}
            for name, release in sorted(record.spec.plugins.items())]  # fmt: skip


def plugins_behind(records: list[RunRecord], metric: str) -> list[dict[str, str]]:
    """The plugins behind the numbers of ``records`` that have a value of ``metric``: each
    distinct (plugin, release, code), sorted."""
    found = {tuple(s.items()) for r in records if r.value(metric) is not None
             for s in plugin_sources(r)}  # fmt: skip
    return [dict(items) for items in sorted(found)]


def plugin_text(source: dict[str, str]) -> str:
    """``maze (ssilbench 0.3.0, code 715e4debb8c724ee)``: a plugin behind a number."""
    code = f", code {source['code']}" if source.get("code") else ""
    return f"{source['plugin']} ({source['release']}{code})"


def plugins_sentence(table: EnvTable) -> str:
    """The plugins behind a table's numbers, with their releases and code fingerprints."""
    return "Plugins: " + "; ".join(plugin_text(p) for p in table.plugins) + "."


def plugin_rows(table: Table) -> list[list[str]]:
    """The CSV export's rows of kind ``plugin``: per environment, each plugin behind its
    numbers (``method``: the plugin, ``metric``: its distribution and version,
    ``statistic``: the fingerprint of its code), in the export's 14 columns."""
    return [["plugin", t.env, p["plugin"], "", p["release"], p["code"], *[""] * 8]
            for t in table.tables for p in t.plugins]  # fmt: skip


def _settings(record: RunRecord) -> str:
    parts = [f"steps={record.spec.steps}"]
    if record.spec.stop_early is True:
        parts.append("stop_early")
    elif record.spec.stop_early:
        parts.append(f"stop_early={record.spec.stop_early}")
    return ", ".join(parts)


def _distinguish(records: list[RunRecord]) -> list[RunRecord]:
    """Runs of one method label trained with different step settings get separate rows, so
    that a cell only averages seeds of one setting."""
    seen: dict[tuple[str, str], set[str]] = defaultdict(set)
    for r in records:
        seen[(r.env_label, r.method_label)].add(_settings(r))
    out = []
    for r in records:
        if len(seen[(r.env_label, r.method_label)]) > 1:
            r = replace(r, method_label=f"{r.method_label} [{_settings(r)}]")
        out.append(r)
    return out


# Spec fields a cell's runs may differ in: the seed it pools over, the budget that is its
# column, and the step settings that _distinguish gives rows of their own.
_POOLED = ("seed", "budget", "steps", "stop_early")
# Spec fields a user reads as "the protocol", named first in a refusal.
_PROTOCOL = ("version", "protocol", "data", "plugins", "code")


def _identity(record: RunRecord) -> dict[str, Any]:
    # The spec as recorded, not re-dumped: a run of an older spec version differs from a
    # newer one in the fields it lacks, and a refusal names them.
    identity = {k: v for k, v in record.spec_doc.items() if k not in _POOLED}
    if record.spec.seeded:
        # Options that follow the seed draw each seed's dataset: the cell pools over them.
        identity["options"] = record.spec.shared_options()
        identity.pop("data", None)
    return identity


def _cell_of(record: RunRecord) -> tuple[str, str, str]:
    return record.env_label, record.method_label, record.budget


def _differences(first: dict[str, Any], other: dict[str, Any]) -> list[str]:
    """The identity fields in which two runs differ, the protocol's first; inside the options
    and the config, the keys themselves (``options.layout``), which a user can pass."""
    rank = {k: i for i, k in enumerate(_PROTOCOL)}
    out = []
    for key in sorted(set(first) | set(other), key=lambda k: (rank.get(k, 99), k)):
        a, b = first.get(key), other.get(key)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            out += [f"{key}.{k}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        else:
            out.append(key)
    return out


def check_pooling(records: list[RunRecord]) -> None:
    """Refuse to pool runs of one cell that differ in more than their seed: another
    protocol, dataset, plugin version or spec version (runs recorded before one of them
    changed). Raises UsageError naming the cell, what differs and what to do."""
    seen: dict[tuple[str, str, str], dict[str, Any]] = {}
    for record in records:
        cell, identity = _cell_of(record), _identity(record)
        first = seen.setdefault(cell, identity)
        if identity != first:
            differ = _differences(first, identity)
            env, method, budget = cell
            raise UsageError(
                f"The runs of {method} on {env} at N_L={budget} differ in "
                f"{', '.join(differ)} (recorded before and after the environment's protocol, "
                "its dataset or a plugin changed), and a cell never pools them. Pass "
                "--latest to keep, per cell, the runs like the most recently finished one, "
                "or keep the two in separate stores."
            )


def latest_only(records: list[RunRecord]) -> list[RunRecord]:
    """Per cell, the runs that share the identity of its most recently finished run."""
    newest: dict[tuple[str, str, str], tuple[float, dict[str, Any]]] = {}
    for record in records:
        when = record.finished_at or 0.0
        cell = _cell_of(record)
        if cell not in newest or when > newest[cell][0]:
            newest[cell] = (when, _identity(record))
    return [r for r in records if _identity(r) == newest[_cell_of(r)][1]]


def build_table(
    records: Iterable[RunRecord],
    metric: str = "score",
    compare: tuple[str, str] | None = None,
    latest: bool = False,
) -> Table:
    """Aggregate finished run records (rows of the results store) into tables; with ``compare``
    (two method labels), the probability that the first beats the second. Runs of one cell that
    differ in more than their seed are refused (:func:`check_pooling`) unless ``latest``."""
    records = _distinguish(list(records))
    records = latest_only(records) if latest else records
    check_pooling(records)
    values: dict[str, dict[str, dict[str, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    seeds: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    meta: dict[str, dict[str, Any]] = defaultdict(lambda: {"normalisers": [], "reports": set()})
    sizes: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    origins: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    by_group: dict[tuple[str, str, str], dict[str, list[tuple[int, float]]]] = defaultdict(
        lambda: defaultdict(list)
    )  # (env, method, budget) -> group -> (seed, value) of each run
    for record in records:
        value = record.value(metric)
        if value is None:
            continue
        env, method, budget = _cell_of(record)
        for group, v in _groups_of(record, metric).items():
            by_group[(env, method, budget)][group].append((record.seed, v))
        values[env][method][budget].append(float(value))
        seeds[(env, method, budget)].append(record.seed)
        origins[(env, method, budget)].add(provenance(record))
        if record.n_labeled:
            sizes[env][budget].append(int(record.n_labeled))
        info = meta[env]
        if record.normaliser and record.normaliser not in info["normalisers"]:
            info["normalisers"].append(record.normaliser)
        info["reports"].add(record.report or "final")
        if "labeled_demonstrations" in (record.metrics or {}):
            info["unit"] = "demonstrations"

    tables = []
    for env in sorted(values):
        by_method = values[env]
        budgets = sorted({b for m in by_method.values() for b in m}, key=budget_sort_key)
        table = EnvTable(
            env=env, metric=metric, report="/".join(sorted(meta[env]["reports"])),
            normalisers=meta[env]["normalisers"] if metric == "score" else [],
            budgets=budgets, methods=sorted(by_method),
            n_labeled={b: sum(n) / len(n) for b, n in sizes[env].items()},
            unit=meta[env].get("unit", "transitions"),
            plugins=plugins_behind(mine := [r for r in records if r.env_label == env], metric),
            origin=origin_lines([r for r in mine if r.value(metric) is not None]),
        )  # fmt: skip
        for method, by_budget in by_method.items():
            for budget, samples in by_budget.items():
                # In seed order, here and in the suites' bootstraps below: the draws index
                # the values, so no interval depends on the order the store gave the runs.
                by_seed = sorted(zip(seeds[(env, method, budget)], samples, strict=True))
                samples[:] = [v for _, v in by_seed]
                mean, low, high = seed_interval(samples)
                table.cells.setdefault(method, {})[budget] = Cell(
                    mean, low, high, len(samples),
                    provenance=sorted(origins[(env, method, budget)]),
                    seeds=[s for s, _ in by_seed], values=list(samples),
                )  # fmt: skip
            table.efficiency[method] = sample_efficiency(
                [(table.n_labeled.get(b, 0), table.cells[method][b].mean) for b in by_budget]
            )
        for budget in budgets:
            column = [c for m in table.methods if (c := table.cell(m, budget))]
            top = max(c.mean for c in column)
            for c in column:
                c.best = abs(c.mean - top) <= 1e-12
        tables.append(table)
    suites = _suites(tables, values, metric)
    comparisons = _compare(tables, values, compare) if compare else []
    return Table(tables, suites, comparisons, _group_tables(tables, by_group, origins))


def _groups_of(record: RunRecord, metric: str) -> dict[str, float]:
    """The run's ``<metric>/<group>`` values by group name."""
    prefix = f"{metric}/"
    return {k[len(prefix):]: float(v) for k, v in (record.metrics or {}).items()
            if k.startswith(prefix) and len(k) > len(prefix) and v is not None}  # fmt: skip


def _group_tables(tables: list[EnvTable], by_group, origins) -> list[GroupTable]:
    """Per environment with groups, each group's cell per method and budget: the mean over
    the seeds that recorded it, its seed interval and seed count, like the main cells."""
    out = []
    for t in tables:
        keys = [(t.env, m, b) for m in t.methods for b in t.budgets if (t.env, m, b) in by_group]
        if not keys:
            continue
        groups = sorted({g for k in keys for g in by_group[k]})
        table = GroupTable(t.env, t.metric, groups, t.budgets, t.methods)
        for key in keys:
            _, method, budget = key
            for group, runs in by_group[key].items():
                runs.sort()  # seed order, so no interval depends on the store's order
                samples = [v for _, v in runs]
                mean, low, high = seed_interval(samples)
                table.cells.setdefault(method, {}).setdefault(budget, {})[group] = Cell(
                    mean, low, high, len(samples), provenance=sorted(origins[key]),
                    seeds=[s for s, _ in runs], values=samples,
                )  # fmt: skip
        for budget in t.budgets:
            for group in groups:
                column = [c for m in t.methods if (c := table.cell(m, budget, group))]
                if not column:
                    continue
                top = max(c.mean for c in column)
                for c in column:
                    c.best = abs(c.mean - top) <= 1e-12
        out.append(table)
    return out


def _compare(tables: list[EnvTable], values, pair: tuple[str, str]) -> list[Comparison]:
    """Per suite of two tasks or more, else per environment: P(pair[0] > pair[1])."""
    a, b = pair
    out = []
    for name, envs in _by_suite(tables):
        for scope, members in ([(name, envs)] if len(envs) > 1 else
                               [(t.env, [t]) for t in envs]):  # fmt: skip
            c = Comparison(scope, a, b, [suite_of(t.env)[1] for t in members])
            budgets = sorted({x for t in members for x in t.budgets}, key=budget_sort_key)
            for budget in budgets:
                xs = [values[t.env].get(a, {}).get(budget) for t in members]
                ys = [values[t.env].get(b, {}).get(budget) for t in members]
                if all(xs) and all(ys):
                    c.improvement[budget] = bootstrap("probability_of_improvement", xs, ys)
            if c.improvement:
                out.append(c)
    return out


def _by_suite(tables: list[EnvTable]) -> list[tuple[str, list[EnvTable]]]:
    """The environment tables grouped by suite name, in name order."""
    members: dict[str, list[EnvTable]] = defaultdict(list)
    for t in tables:
        members[suite_of(t.env)[0]].append(t)
    return sorted(members.items())


def suite_of(env_label: str) -> tuple[str, str]:
    """(suite name, task) of an environment label: 'maze:10x10 (state=image)' is the task
    '10x10' of the suite 'maze:all (state=image)'."""
    head, _, options = env_label.partition(" ")
    family, _, task = head.partition(":")
    return f"{family}:all" + (f" {options}" if options else ""), task


def _suites(tables: list[EnvTable], values, metric: str) -> list[SuiteTable]:
    out = []
    for name, envs in _by_suite(tables):
        if len(envs) < 2:
            continue
        methods = sorted({m for t in envs for m in t.methods})
        budgets = sorted({b for t in envs for b in t.budgets}, key=budget_sort_key)
        suite = SuiteTable(name, metric, [suite_of(t.env)[1] for t in envs], budgets, methods)
        for method in methods:
            curve = []
            for budget in budgets:
                scores = [values[t.env].get(method, {}).get(budget) for t in envs]
                if not all(scores):  # the suite needs every task at this budget
                    continue
                suite.iqm.setdefault(method, {})[budget] = bootstrap("iqm", scores)
                suite.optimality_gap.setdefault(method, {})[budget] = bootstrap(
                    "optimality_gap", scores
                )
                suite.runs.setdefault(method, {})[budget] = sum(len(s) for s in scores)
                sizes = [t.n_labeled.get(budget, 0) for t in envs]
                curve.append((sum(sizes) / len(sizes), suite.iqm[method][budget].value))
            suite.efficiency[method] = sample_efficiency(curve)
            suite.values[method] = sorted(
                v for t in envs for runs in values[t.env].get(method, {}).values() for v in runs
            )
            # Per task, its runs at every budget in budget order (each in seed order); a
            # task the method did not run is left out of its profile.
            per_task = [[v for b in budgets for v in values[t.env].get(method, {}).get(b, [])]
                        for t in envs]  # fmt: skip
            if any(per_task):
                suite.profile[method] = performance_profile([p for p in per_task if p])
        out.append(suite)
    return out


def interval_text(low: float | None, high: float | None) -> str:
    """' [low, high]' of a cell's interval, or nothing for a single seed."""
    return "" if low is None or high is None else f" [{low:.3f}, {high:.3f}]"


def group_rows(g: GroupTable, t: EnvTable) -> list[tuple[str, str, list[Cell | None]]]:
    """The rows of a group table: (method, budget, [the environment's cell, then each
    group's]) per budget and method that has the environment's cell."""
    return [(m, b, [t.cell(m, b), *(g.cell(m, b, x) for x in g.groups)])
            for b in g.budgets for m in g.methods if t.cell(m, b) is not None]  # fmt: skip
