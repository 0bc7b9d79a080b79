"""Every leaderboard table says what its numbers stand on: the runs' dataset and where it
came from, their steps against the paper's, the protocol and the normaliser; runs recorded
before runs kept these say "unknown"."""

from __future__ import annotations

import csv
import io
import json

from ssilbench.leaderboard.render import render
from ssilbench.leaderboard.table import build_table
from ssilbench.runs.records import RunRecord
from ssilbench.runs.spec import RunSpec

PAPER = {"figure": "Figure 3", "budgets": ["16", "1024", "all"], "seeds": [11, 22, 33],
         "steps": 120_000}  # fmt: skip
COLLECTED = {"name": "dataset", "low": 0.87, "high": 0.66 + 5, "source": "its own expert"}


def _runs(env: str, steps: int, seeds, budgets, versions: dict | None, norm: dict) -> list:
    out = []
    for budget in budgets:
        for seed in seeds:
            spec = RunSpec(method="bc", config={}, env=env, options={}, budget=budget, seed=seed,
                           steps=steps, eval_every=50, protocol="p", data="d")  # fmt: skip
            out.append(RunRecord.of(spec, score=0.25 + seed / 100, metrics={}, report="max",
                                    normaliser=norm, n_labeled=16, versions=versions))  # fmt: skip
    return out


def _setup(path: str, source: str, paper: dict | None, plugin: str = "ssilbench_procgen"):
    return {"ssilbench": "0.3.0", "protocol": {"default_steps": 120_000, "paper": paper},
            "dataset": {"path": path, "source": source, "plugin": plugin}}  # fmt: skip


def store() -> list[RunRecord]:
    lapo = {"name": "lapo", "low": 0.87, "high": 36.3, "source": "LAPO's table"}
    return [
        *_runs("procgen:bigfish", 1_200, [0, 1], ["16"],
               _setup("procgen/mine/bigfish/train", "collect", PAPER), COLLECTED),
        *_runs("procgen:coinrun", 120_000, [11, 22], ["16", "all"],
               _setup("procgen/expert/coinrun/train", "import", PAPER), lapo),
        *_runs("maze:10x10", 100, [0, 1], ["16"],
               _setup("maze/10x10-bf3a", "built", None, "ssilbench_maze")
               | {"protocol": {"default_steps": 1_500, "paper": None}},
               {"name": "success rate", "low": 0.0, "high": 1.0}),
        *_runs("maze:20x20", 100, [0, 1], ["16"], {"ssilbench": "0.2.0"},
               {"name": "success rate", "low": 0.0, "high": 1.0}),
    ]  # fmt: skip


def _section(md: str, env: str) -> str:
    return md.split(f"## {env}\n")[1].split("\n## ")[0]


def test_the_markdown_export_states_dataset_steps_protocol_and_normaliser():
    md = render(build_table(store()), "md")
    collected = _section(md, "procgen:bigfish")
    assert "Dataset: procgen/mine/bigfish/train (collected here).\n" in collected
    assert "Steps: 1,200 per run (not the paper's 120,000).\n" in collected
    assert "Protocol: custom seeds and steps, not the paper's (Figure 3).\n" in collected
    assert "Normalised score: dataset, (R − 0.87) / (5.66 − 0.87) — its own expert." in collected
    paper = _section(md, "procgen:coinrun")
    assert "Dataset: procgen/expert/coinrun/train (imported).\n" in paper
    assert "Steps: 120,000 per run (the paper's).\n" in paper
    assert "Protocol: the paper's (Figure 3): 2 of its 3 budgets, 2 of its 3 seeds.\n" in paper
    assert "Normalised score: lapo," in paper
    built = _section(md, "maze:10x10")
    assert "Dataset: maze/10x10-bf3a (built here by ssilbench_maze).\n" in built
    assert "Steps: 100 per run (the task's default is 1,500).\n" in built
    assert "Protocol: custom budgets and seeds (the environment family declares no paper" in built


def test_runs_recorded_before_the_fields_say_unknown():
    old = _section(render(build_table(store()), "md"), "maze:20x20")
    assert "Dataset: unknown (not recorded by these runs).\n" in old
    assert "Steps: 100 per run (the paper's: unknown).\n" in old
    assert "Protocol: unknown (not recorded by these runs).\n" in old
    assert "Normalised score: success rate" in old


def test_csv_json_tex_and_html_carry_the_same_lines():
    table = build_table(store())
    rows = [r for r in csv.DictReader(io.StringIO(render(table, "csv"))) if r["kind"] == "origin"]
    found = {(r["env"], r["metric"]): r["statistic"] for r in rows}
    assert found[("procgen:bigfish", "steps")] == "1,200 per run (not the paper's 120,000)"
    assert found[("maze:20x20", "dataset")] == "unknown (not recorded by these runs)"
    assert len(rows) == 4 * 3
    tables = {t["env"]: t for t in json.loads(render(table, "json"))["tables"]}
    assert tables["procgen:coinrun"]["origin"]["dataset"] == (
        "procgen/expert/coinrun/train (imported)")  # fmt: skip
    assert r"Steps: 120,000 per run (the paper's). Protocol: the paper's (Figure 3)" in render(
        table, "tex")  # fmt: skip
    html = render(table, "html")
    assert "Dataset: procgen/mine/bigfish/train (collected here). Steps: 1,200 per run" in html
