"""``ssilbench data build --sweep FILE`` builds every dataset a sweep file's runs need, so
that a plan prices runs whose label budget is a fraction at their datasets' sizes; before
that, the plan says which runs it prices without their sizes, and how to build them."""

from __future__ import annotations

import textwrap

import pytest

from ssilbench.testing import cli_exit_code

SWEEP = """
name = "noops"
[[block]]
methods = ["bc"]
envs = ["maze:10x10", "maze:20x20"]
options = {{ state = "position", noop = [0.25] }}
budgets = [{budgets}]
seeds = [0, 1]
steps = 10
rollouts = false
"""


def _sweep(tmp_path, budgets: str = "0.5, 1.0"):
    path = tmp_path / "noops.toml"
    path.write_text(textwrap.dedent(SWEEP.format(budgets=budgets)))
    return path


def _plan(tmp_path, sweep, capsys) -> str:
    code = cli_exit_code("plan", "--sweep", str(sweep), "--results", str(tmp_path / "r"),
                         "--data-root", str(tmp_path / "d"))  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out + captured.err


def test_a_sweep_files_datasets_are_built_and_then_priced_at_their_sizes(tmp_path, capsys):
    sweep = _sweep(tmp_path)
    before = _plan(tmp_path, sweep, capsys)
    # the no-ops follow the seed: a dataset per maze and seed
    assert "Datasets a run builds first: maze:10x10 (2 datasets), maze:20x20 (2 datasets)" in before
    assert "8 of the runs to train take a fraction of such a dataset" in before
    assert "'ssilbench data build' (--sweep FILE for a sweep file's)" in before
    code = cli_exit_code("data", "build", "--sweep", str(sweep), "--data-root",
                         str(tmp_path / "d"))  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert f"maze:10x10: 2 datasets ready under {tmp_path / 'd'}" in out
    assert f"maze:20x20: 2 datasets ready under {tmp_path / 'd'}" in out
    after = _plan(tmp_path, sweep, capsys)
    assert "Datasets a run builds first" not in after and "fraction of such" not in after


def test_runs_with_counts_as_budgets_are_priced_at_them_without_the_dataset(tmp_path, capsys):
    text = _plan(tmp_path, _sweep(tmp_path, budgets="4, 16"), capsys)
    assert "Datasets a run builds first" in text and "fraction of such" not in text


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["maze:10x10", "--sweep", "SWEEP"], "Give either ENV_IDS (with -o and --rebuild) or"),
        (["--sweep", "SWEEP", "--rebuild"], "Give either ENV_IDS (with -o and --rebuild) or"),
        ([], "Give the environments to build (e.g. 'ssilbench data build maze:all')"),
        (["maze:10x10", "--quick"], "or a sweep file (--sweep FILE, with --quick and --blocks)"),
        (["--sweep", "SWEEP", "--blocks", "nope"], "has no block named 'nope'"),
    ],
)
def test_build_arguments_that_do_not_go_together_exit_2_and_build_nothing(
    tmp_path, capsys, args, says
):
    sweep = str(_sweep(tmp_path))
    args = [sweep if a == "SWEEP" else a for a in args]
    code = cli_exit_code("data", "build", *args, "--data-root", str(tmp_path / "d"))
    assert code == 2
    assert says in capsys.readouterr().err
    assert not (tmp_path / "d").exists()


def test_a_dataset_to_import_stops_the_build_with_what_to_do(tmp_path, capsys):
    sweep = tmp_path / "games.toml"
    sweep.write_text(
        'name = "games"\n[[block]]\nmethods = ["bc"]\n'
        'envs = ["maze:10x10", "procgen:bigfish"]\nbudgets = [16]\nseeds = [0]\n'
    )
    code = cli_exit_code("data", "build", "--sweep", str(sweep), "--data-root",
                         str(tmp_path / "d"))  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"Sweep file {sweep}" in err and "procgen:bigfish" in err
    assert "ssilbench data download procgen" in err or "ssilbench data import procgen" in err
