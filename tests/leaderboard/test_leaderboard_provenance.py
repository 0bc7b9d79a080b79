"""Every leaderboard export names each plugin distribution and version behind its numbers,
with the fingerprint of its code (a third-party plugin as much as ssilbench)."""

from __future__ import annotations

import csv
import io
import json

import pytest

from ssilbench.leaderboard.render import render
from ssilbench.leaderboard.table import build_table
from ssilbench.runs.records import RunRecord
from ssilbench.runs.spec import RunSpec

FORMATS = ("md", "csv", "json", "tex", "html")
# env -> the plugins its runs recorded: name -> (release, code fingerprint)
BEHIND = {
    "frozenlake:4x4": {"kidm": ("kidm-ensemble 0.4.1", "a1b2c3d4e5f60718"),
                       "frozenlake": ("ssilbench-frozenlake 1.0.0", "0f1e2d3c4b5a6978")},
    "maze:10x10": {"baselines": ("ssilbench 0.3.0", "0ca5b84731a8fef7"),
                   "maze": ("ssilbench 0.3.0", "715e4debb8c724ee")},
}  # fmt: skip


def records() -> list[RunRecord]:
    out = []
    for env, plugins in BEHIND.items():
        method = "kidm" if env.startswith("frozenlake") else "bc"
        for seed, score in enumerate((0.25, 0.75)):
            spec = RunSpec(method=method, config={}, env=env, options={}, budget="16",
                           seed=seed, steps=100, eval_every=50, protocol="p",
                           plugins={n: r for n, (r, _) in plugins.items()},
                           code={n: c for n, (_, c) in plugins.items()}, data="d")  # fmt: skip
            out.append(RunRecord.of(spec, score=score, metrics={}, report="final",
                                    normaliser={"name": "raw", "low": 0.0, "high": 1.0},
                                    n_labeled=16, versions={"ssilbench": "0.3.0"},
                                    device="cpu"))  # fmt: skip
    return out


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_export_names_every_plugin_with_its_release_and_code(fmt):
    text = render(build_table(records()), fmt)
    for plugins in BEHIND.values():
        for name, (release, code) in plugins.items():
            for part in (name, release, code):
                assert part in text, f"{fmt} lacks {part!r}"


def test_the_plugins_are_listed_per_table_where_a_reader_finds_them():
    table = build_table(records())
    md = render(table, "md")
    # Under each environment's table, the plugins of that environment's runs only.
    maze = md.split("## maze:10x10")[1]
    assert ("Plugins: baselines (ssilbench 0.3.0, code 0ca5b84731a8fef7); maze (ssilbench "
            "0.3.0, code 715e4debb8c724ee).") in maze  # fmt: skip
    assert "kidm" not in maze
    rows = [r for r in csv.DictReader(io.StringIO(render(table, "csv"))) if r["kind"] == "plugin"]
    assert {(r["env"], r["method"], r["metric"], r["statistic"]) for r in rows} == {
        (env, name, release, code)
        for env, plugins in BEHIND.items()
        for name, (release, code) in plugins.items()
    }
    tables = {t["env"]: t for t in json.loads(render(table, "json"))["tables"]}
    assert tables["frozenlake:4x4"]["plugins"] == [
        {"plugin": "frozenlake", "release": "ssilbench-frozenlake 1.0.0",
         "code": "0f1e2d3c4b5a6978"},
        {"plugin": "kidm", "release": "kidm-ensemble 0.4.1", "code": "a1b2c3d4e5f60718"},
    ]  # fmt: skip
    cell = tables["frozenlake:4x4"]["cells"]["kidm"]["16"]
    assert "kidm (kidm-ensemble 0.4.1, code a1b2c3d4e5f60718)" in cell["provenance"][0]


def test_runs_recorded_without_plugins_add_no_plugin_line():
    old = [RunRecord.of(RunSpec(method="bc", config={}, env="maze:10x10", options={},
                                budget="16", seed=s, steps=100, eval_every=50, version=3),
                        score=0.5, metrics={}, report="final") for s in (0, 1)]  # fmt: skip
    for fmt in FORMATS:
        assert "Plugins:" not in render(build_table(old), fmt)
