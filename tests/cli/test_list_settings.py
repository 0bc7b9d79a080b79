"""``ssilbench list NAME``: a method's config, an environment family's options or an
architecture's options, each field with its type, default and meaning, read from the
plugin's own pydantic model, so that what a user may set is visible without the docs."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import ssilbench.cli
from ssilbench.testing import cli_exit_code


def listed(*args: str, columns: int = 100):
    return CliRunner().invoke(ssilbench.cli.cli, ["list", *args], env={"COLUMNS": str(columns)})


def test_an_environment_lists_its_options_with_defaults_and_the_per_seed_ones():
    shown = listed("maze")
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert lines[0].startswith("environment maze (plugin maze): ")
    assert "options, -o KEY=VALUE:" in lines
    # A run takes the paper's layout; a recorded spec without the option means the suite's.
    layout = '  layout: suite | paper; default "paper" (a recorded run that leaves it out: "suite")'
    assert layout in lines
    # A default that depends on other options (the maze's palette for images) says under which.
    joined = " ".join(line.strip() for line in lines)  # the line is wrapped to the terminal
    assert ('palette: ssilbench | paper; default "ssilbench"; "paper" with state=image (a '
            'recorded run that leaves it out: "ssilbench")') in joined  # fmt: skip
    [item] = json.loads(listed("maze", "--json").output)
    palette = next(f for f in item["fields"] if f["name"] == "palette")
    assert palette["default_when"] == [{"value": "paper", "options": {"state": "image"}}]
    assert palette["recorded_default"] == "ssilbench"
    assert "  noop: number; default 0.0" in lines
    assert '  noop_seed: maze | integer; default "maze", or the run\'s seed (per seed)' in lines
    assert max(len(line) for line in lines) <= 100


def test_a_method_lists_its_config_and_json_gives_the_same_fields():
    shown = listed("idm_labeling")
    assert shown.exit_code == 0, shown.output
    assert '  labels: soft | hard; default "hard"' in shown.output.splitlines()
    [item] = json.loads(listed("idm_labeling", "--json").output)
    assert (item["kind"], item["name"], item["plugin"]) == ("method", "idm_labeling", "baselines")
    fields = {f["name"]: f for f in item["fields"]}
    assert fields["labels"]["default"] == "hard" and fields["labels"]["type"] == "soft | hard"
    assert not any(f["per_seed"] for f in item["fields"])


@pytest.mark.parametrize(
    ("name", "expected"), [("mlp5", "  no options"), ("uva_base", "  profile: paper | small")]
)
def test_an_architecture_lists_its_options_or_says_it_has_none(name, expected):
    shown = listed(name)
    assert shown.exit_code == 0, shown.output
    assert any(line.startswith(expected) for line in shown.output.splitlines()), shown.output


def test_an_unknown_name_exits_2_suggesting_the_closest(capsys):
    assert cli_exit_code("list", "mazee") == 2
    err = capsys.readouterr().err
    assert "Unknown method, environment or architecture 'mazee'. Did you mean 'maze'?" in err
