"""Each run setting is declared once (``ssilbench.runs.settings``): every one is a flag of
``run`` and ``plan`` and a key of a sweep file's block with the same bounds and default, and
neither has a run setting the other lacks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from ssilbench.cli import cli
from ssilbench.errors import UsageError
from ssilbench.planning.options import RunOptions
from ssilbench.planning.sweepfile import Block, QuickOverrides
from ssilbench.runs import settings as st
from ssilbench.runs.spec import RunSpec, Sweep

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide.md"
BLOCK_ONLY = {"panel", "name", "quick"}  # where a block's runs are drawn: not run settings
REQUIRED = {"methods": "bc", "envs": "maze:10x10", "budgets": "16"}


def flags_of(command_name: str) -> dict[str, list[str]]:
    command = cli.commands[command_name]
    return {p.name: [*p.opts, *p.secondary_opts] for p in command.params}


@pytest.mark.parametrize("command", ["run", "plan"])
def test_every_setting_is_a_flag_spelled_as_declared(command):
    flags = flags_of(command)
    for name in st.settings():
        declared = [f for spelled in st.extra(name)["flags"] for f in spelled.split("/")]
        assert sorted(flags.get(name, [])) == sorted(declared), name


def test_a_block_has_every_setting_and_no_other_run_setting():
    keys = set(Block.model_fields) - BLOCK_ONLY
    assert keys == set(st.settings())
    assert set(Sweep.model_fields) == set(st.settings())
    for name in st.settings():  # inherited: the same type, default and bounds
        assert Block.model_fields[name].annotation == st.settings()[name].annotation
        assert Block.model_fields[name].default == st.settings()[name].default
        assert Block.model_fields[name].metadata == st.settings()[name].metadata


def test_quick_overrides_replace_settings_with_their_declared_types():
    for name, info in QuickOverrides.model_fields.items():
        declared = st.settings()[name]
        assert info.annotation in (declared.annotation, declared.annotation | None), name


def test_a_run_spec_holds_the_per_run_settings_with_their_declared_types():
    for name in ("stop_early", "rollouts"):
        assert RunSpec.model_fields[name].annotation == st.settings()[name].annotation
    # The axes become one value each; steps and steps_scale become the run's step count.
    per_run = {"methods": "method", "envs": "env", "budgets": "budget", "seeds": "seed",
               "config": "config", "options": "options", "steps": "steps",
               "steps_scale": "steps", "eval_every": "eval_every", "stop_early": "stop_early",
               "rollouts": "rollouts"}  # fmt: skip
    assert set(per_run) == set(st.settings())
    assert set(per_run.values()) <= set(RunSpec.model_fields)


def block(**values) -> Block:
    base = {"methods": ["bc"], "envs": ["maze:10x10"], "budgets": [16]}
    return Block.model_validate({**base, **values})


def flags(tmp_path, **values) -> RunOptions:
    return RunOptions.of(results=tmp_path / "r", data_root=tmp_path / "d", **REQUIRED, **values)


def test_defaults_are_the_same_from_flags_and_from_a_file(tmp_path):
    from_flags = flags(tmp_path).sweep()
    [from_file] = block().sweeps()
    assert from_flags == from_file


NUMBERS = [name for name in st.settings() if st.extra(name)["kind"] in ("count", "fraction")]


@pytest.mark.parametrize("name", NUMBERS)
def test_numeric_bounds_are_the_same_from_flags_and_from_a_file(tmp_path, name):
    limits = st.bounds(name)
    high = limits["le"]
    low = limits.get("ge", limits.get("gt"))
    kind = st.extra(name)["kind"]
    inside = [high] + ([low] if "ge" in limits else [low + (1 if kind == "count" else 1e-6)])
    outside = [high + 1] + ([low - 1] if "ge" in limits else [low])
    for value in inside:
        assert getattr(flags(tmp_path, **{name: value}).sweep(), name) == value
        assert getattr(block(**{name: value}), name) == value
    for value in outside:
        with pytest.raises(UsageError) as refused:
            flags(tmp_path, **{name: value})
        assert st.flag(name) in str(refused.value)
        with pytest.raises(ValidationError) as invalid:
            block(**{name: value})
        assert name in str(invalid.value)


@pytest.mark.parametrize("rule", [True, False, "converged", "paper"])
def test_every_stopping_rule_is_taken_from_flags_and_from_a_file(tmp_path, rule):
    assert flags(tmp_path, stop_early=rule).sweep().stop_early == block(stop_early=rule).stop_early


def test_the_stopping_flag_alone_is_the_suites_rule_as_recorded_before():
    import click

    command = cli.commands["run"]
    for args, expected in ([["--stop-early"], True], [["--stop-early", "paper"], "paper"]):
        params = command.make_context("run", [*args, "--steps", "5"]).params
        assert params["stop_early"] == expected and params["steps"] == 5
    assert command.make_context("run", []).params["stop_early"] is None  # not given
    with pytest.raises(click.BadParameter, match="not a stopping rule"):
        command.make_context("run", ["--stop-early", "sometimes"])


def test_the_guide_lists_every_setting_with_its_flag_and_key():
    section = GUIDE.read_text().split("### Run settings", 1)[1].split("\n### ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) == 4 and re.fullmatch(r"`\w+`", cells[1]):
            rows[cells[1].strip("`")] = cells[0]
    assert set(rows) == set(st.settings())
    for name, spelled in rows.items():
        assert st.flag(name) in spelled, name
