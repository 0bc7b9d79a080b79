"""The leaderboard's per-task breakdown: an environment whose runs record a metric per group
of their evaluation's episodes (``success_rate/<task>`` beside ``success_rate``, as a
multitask ``libero10:all`` run does) gets a table of each task's cell per method and budget;
a store without such metrics renders as it did before."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import replace

import pytest

from ssilbench.leaderboard.render import render, to_csv, to_json, to_markdown, to_tex
from ssilbench.leaderboard.stats import seed_interval
from ssilbench.leaderboard.table import Table, build_table
from ssilbench.runs.records import RunRecord
from ssilbench.runs.spec import RunSpec
from ssilbench.runs.store import ResultsStore

NORM = {"name": "success rate", "low": 0.0, "high": 1.0, "source": "rollout success"}
ENV = "libero10:all"
# (method, budget) -> per seed, the success rate of each task; the run's mean is their mean.
RATES = {
    ("bc", "2"): [{"bowl-drawer": 0.1, "soup-sauce": 0.5},
                  {"bowl-drawer": 0.3, "soup-sauce": 0.4},
                  {"bowl-drawer": 0.2, "soup-sauce": 0.9}],
    ("uva", "2"): [{"bowl-drawer": 0.6, "soup-sauce": 0.2},
                   {"bowl-drawer": 0.8, "soup-sauce": 0.3}],
    ("uva", "all"): [{"bowl-drawer": 0.95}],  # one seed, and one task only recorded
}  # fmt: skip


def run(env, method, budget, seed, metrics, score) -> RunRecord:
    spec = RunSpec(method=method, config={}, env=env, options={}, budget=budget, seed=seed,
                   steps=100, eval_every=50)  # fmt: skip
    return RunRecord.of(spec, score=score, metrics=metrics, report="final", normaliser=NORM)


def multitask_runs() -> list[RunRecord]:
    out = []
    for (method, budget), seeds in RATES.items():
        for seed, rates in enumerate(seeds):
            mean = sum(rates.values()) / len(rates)
            metrics = {"success_rate": mean, "labeled_demonstrations": 2}
            metrics |= {f"success_rate/{task}": v for task, v in rates.items()}
            metrics |= {f"score/{task}": v for task, v in rates.items()}
            out.append(run(ENV, method, budget, seed, metrics, mean))
    return out


def plain_runs() -> list[RunRecord]:
    """A per-task environment beside it: no groups."""
    return [run("maze:10x10", m, "16", s, {"success_rate": v}, v)
            for m, values in (("bc", [0.2, 0.4, 0.6]), ("vm_idm", [0.5, 0.7]))
            for s, v in enumerate(values)]  # fmt: skip


@pytest.mark.parametrize("metric", ["success_rate", "score"])
def test_each_tasks_cell_is_its_mean_interval_and_seed_count(metric):
    table = build_table(multitask_runs() + plain_runs(), metric=metric)
    assert [g.env for g in table.groups] == [ENV]  # maze:10x10 has no groups
    g = table.group_table(ENV)
    assert g.metric == metric
    assert g.groups == ["bowl-drawer", "soup-sauce"]
    assert g.methods == ["bc", "uva"] and g.budgets == ["2", "all"]
    for (method, budget), seeds in RATES.items():
        for task in g.groups:
            values = [r[task] for r in seeds if task in r]
            cell = g.cell(method, budget, task)
            if not values:
                assert cell is None
                continue
            assert (cell.mean, cell.low, cell.high) == pytest.approx(seed_interval(values))
            assert cell.n == len(values) and cell.values == values
            assert cell.seeds == list(range(len(values)))
    bc = g.cell("bc", "2", "soup-sauce")
    assert (bc.mean, bc.low, bc.high) == pytest.approx((0.6, 0.4, 0.9))
    assert g.cell("uva", "all", "bowl-drawer").low is None  # a single seed: no interval
    # Best mean per budget and task: uva on bowl-drawer (0.7 > 0.2), bc on soup-sauce.
    assert g.cell("uva", "2", "bowl-drawer").best and not g.cell("bc", "2", "bowl-drawer").best
    assert g.cell("bc", "2", "soup-sauce").best and not g.cell("uva", "2", "soup-sauce").best
    # The environment's own cell is the mean over the tasks, in the main table.
    assert table.env_table(ENV).cell("bc", "2").mean == pytest.approx((0.2 + 0.6) / 2)


def test_a_tasks_cell_does_not_depend_on_the_order_of_the_runs():
    forward = build_table(multitask_runs(), metric="success_rate")
    backward = build_table(list(reversed(multitask_runs())), metric="success_rate")
    assert forward.to_dict() == backward.to_dict()


def test_markdown_shows_the_breakdown_after_the_environments_table():
    md = to_markdown(build_table(multitask_runs() + plain_runs(), metric="success_rate"))
    lines = md.splitlines()
    start = lines.index("### libero10:all — success_rate per task")
    assert lines.index("## libero10:all") < start < lines.index("## maze:10x10")
    assert lines[start + 2] == "| method | N_L | mean | bowl-drawer | soup-sauce |"
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines[start + 4 :]
            if line.startswith("|")][:3]  # fmt: skip
    assert rows[0] == ["bc", "2 demos", "0.400 [0.300, 0.550] (n=3)",
                       "0.200 [0.100, 0.300] (n=3)", "**0.600 [0.400, 0.900] (n=3)**"]  # fmt: skip
    assert rows[1][:4] == ["uva", "2 demos", "**0.475 [0.400, 0.550] (n=2)**",
                           "**0.700 [0.600, 0.800] (n=2)**"]  # fmt: skip
    assert rows[2] == ["uva", "all demos", "**0.950 (n=1)**", "**0.950 (n=1)**", "–"]
    assert "Per task: each run's success_rate/<task>" in md
    assert md.count("per task") == 1  # maze:10x10 has no breakdown


def test_csv_and_json_carry_every_tasks_cell():
    table = build_table(multitask_runs() + plain_runs(), metric="success_rate")
    rows = list(csv.DictReader(io.StringIO(to_csv(table))))
    groups = {(r["method"], r["budget"], r["metric"]): r for r in rows if r["kind"] == "group"}
    assert len(groups) == 5  # 3 (method, budget) pairs x 2 tasks, less uva/all/soup-sauce
    row = groups[("bc", "2", "success_rate/soup-sauce")]
    assert (row["env"], row["statistic"], row["mean"], row["low"], row["high"]) == (
        ENV, "mean", "0.6", "0.4", "0.9")  # fmt: skip
    assert (row["n"], row["seeds"], row["best"]) == ("3", "0 1 2", "1")
    assert groups[("uva", "all", "success_rate/bowl-drawer")]["low"] == ""
    assert [r["kind"] for r in rows].count("task") == 3 + 2  # the main cells as before
    data = json.loads(to_json(table))
    (g,) = data["groups"]
    assert g["env"] == ENV and g["groups"] == ["bowl-drawer", "soup-sauce"]
    assert g["cells"]["uva"]["2"]["bowl-drawer"]["values"] == [0.6, 0.8]
    assert g["cells"]["bc"]["2"]["soup-sauce"]["mean"] == pytest.approx(0.6)


def test_latex_has_a_table_per_environment_with_groups():
    tex = to_tex(build_table(multitask_runs() + plain_runs(), metric="success_rate"))
    assert tex.count(r"\begin{table}") == 3  # libero10:all, its tasks, maze:10x10
    assert r"success\_rate per task" in tex
    assert r"Method & $N_L$ & Mean & bowl-drawer & soup-sauce \\" in tex


def test_the_page_has_a_sortable_table_per_environment_with_groups():
    page = render(build_table(multitask_runs() + plain_runs(), metric="success_rate"), "html")
    assert page.count(" per task</h3>") == 1
    section = page[page.index("<h3>libero10:all — success_rate per task</h3>") :]
    section = section[: section.index("</table>")]
    head = "<th>method</th><th>N_L</th><th>mean</th><th>bowl-drawer</th><th>soup-sauce</th>"
    assert head in section
    assert section.count("<tr>") == 1 + 3  # the header and a row per method and budget
    assert '<td class="best" data-value="0.6" title="bc, N_L=2, soup-sauce: seeds 0, 1, 2: ' in (
        section
    )
    assert "0.600 [0.400, 0.900] <span class=note>(n=3)</span>" in section


def strip_groups(records: list[RunRecord]) -> list[RunRecord]:
    return [replace(r, metrics={k: v for k, v in r.metrics.items() if "/" not in k})
            for r in records]  # fmt: skip


@pytest.mark.parametrize("fmt", ["md", "csv", "json", "tex", "html"])
def test_a_store_without_groups_renders_as_without_the_breakdown(fmt):
    plain = build_table(plain_runs())
    assert plain.groups == [] and "groups" not in plain.to_dict()
    text = render(plain, fmt)
    assert "per task" not in text and "group" not in text
    # The same runs with per-task metrics: every other part of the output is unchanged.
    runs = multitask_runs() + plain_runs()
    with_groups = build_table(runs, metric="success_rate")
    without = build_table(strip_groups(runs), metric="success_rate")
    assert without.groups == []
    assert render(without, fmt) == render(Table(with_groups.tables, with_groups.suites), fmt)
    assert render(with_groups, fmt) != render(without, fmt)


def test_the_command_shows_the_breakdown_of_a_stores_runs(cli):
    with ResultsStore(cli.results) as store:
        store.put_rows(multitask_runs() + plain_runs())
    args = ["leaderboard", "--results", str(cli.results), "--metric", "success_rate"]
    shown = cli(*args)
    assert shown.returncode == 0, shown.stderr
    assert "### libero10:all — success_rate per task" in shown.stdout
    row = "| bc | 2 demos | 0.400 [0.300, 0.550] (n=3) | 0.200 [0.100, 0.300] (n=3) |"
    assert row in shown.stdout
    exported = cli(*args, "--export", "csv")
    assert exported.returncode == 0, exported.stderr
    assert "group,libero10:all,uva,2,success_rate/bowl-drawer," in exported.stdout
