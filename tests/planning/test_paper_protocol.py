"""The user's line runs the paper's experiment: an environment family declares the budgets,
seeds and steps of the paper's figure (``Environment.paper_protocol``), and ``run`` takes them
when the command gives no ``--budgets`` or ``--seeds``, says so, and without the data stops
with one message naming every missing dataset and the commands that get it."""

from __future__ import annotations

from pathlib import Path

import pytest

from ssilbench.api import PaperProtocol
from ssilbench.errors import UsageError
from ssilbench.planning.options import RunOptions
from ssilbench.planning.plan import resolve_plan
from ssilbench.testing import cli_exit_code

FIGURE_3 = ["16", "32", "64", "128", "256", "512", "1024", "2048", "4096", "8192", "32768",
            "131072", "524288", "all"]  # fmt: skip


def plan_of(plugins, tmp_path: Path, **settings):
    options = RunOptions.of(results=tmp_path / "r", data_root=tmp_path / "d", **settings)
    return resolve_plan(plugins, options.sweep())


def test_procgen_without_budgets_or_seeds_is_the_papers_figure(plugins, tmp_path):
    plan = plan_of(plugins, tmp_path, methods="lapo_plus", envs="procgen:all")
    assert len(plan.runs) == 16 * len(FIGURE_3) * 3
    bigfish = [s for s in plan.runs if s.env == "procgen:bigfish"]
    assert [s.budget for s in bigfish[::3]] == FIGURE_3
    assert {s.seed for s in plan.runs} == {11, 22, 33} and {s.steps for s in plan.runs} == {120_000}
    [note] = plan.notes
    assert "procgen: the paper's protocol (Figure 3), as no --budgets or --seeds was given" in note
    assert "seeds 11,22,33" in note and "120,000 steps" in note


def test_what_the_command_gives_wins_and_the_rest_comes_from_the_paper(plugins, tmp_path):
    plan = plan_of(plugins, tmp_path, methods="bc", envs="procgen:bigfish", budgets="1024",
                   steps=500)  # fmt: skip
    assert {(s.budget, s.seed, s.steps) for s in plan.runs} == {("1024", seed, 500)
                                                              for seed in (11, 22, 33)}  # fmt: skip
    assert plan.notes == ["procgen: the paper's protocol (Figure 3), as no --seeds was given: "
                          "budgets 1024; seeds 11,22,33; 500 steps per run"]  # fmt: skip
    given = plan_of(plugins, tmp_path, methods="bc", envs="procgen:bigfish", budgets="16",
                    seeds="0")  # fmt: skip
    assert [(s.budget, s.seed) for s in given.runs] == [("16", 0)] and given.notes == []


@pytest.mark.parametrize("env, budget", [("pusht", "10"), ("libero10:all", "2")])
def test_the_manipulation_families_are_figure_6(plugins, tmp_path, env, budget):
    plan = plan_of(plugins, tmp_path, methods="bc", envs=env)
    assert {(s.budget, s.seed, s.steps) for s in plan.runs} == {(budget, seed, 50_000)
                                                              for seed in (0, 1, 2)}  # fmt: skip
    assert "(Figure 6)" in plan.notes[0]


def test_a_family_without_a_paper_protocol_needs_budgets(plugins, tmp_path):
    with pytest.raises(UsageError, match="'maze' declares no paper protocol") as refused:
        plan_of(plugins, tmp_path, methods="bc", envs="procgen:bigfish,maze:10x10")
    assert "--budgets 16,64,all" in str(refused.value)
    plan = plan_of(plugins, tmp_path, methods="bc", envs="maze:10x10", budgets="16")
    assert {s.seed for s in plan.runs} == {0} and plan.notes == []  # seed 0, as always


def test_without_the_data_the_users_line_names_every_game_and_how_to_get_it(capsys, tmp_path):
    code = cli_exit_code("run", "--method", "lapo_plus", "--env", "procgen:all", "--results",
                         str(tmp_path / "r"), "--data-root", str(tmp_path / "d"))  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2, err
    assert "the paper's protocol (Figure 3)" in err and "seeds 11,22,33" in err
    assert "16 datasets" in err
    for game in ("bigfish", "bossfight", "caveflyer", "chaser", "climber", "coinrun",
                 "dodgeball", "fruitbot", "heist", "jumper", "leaper", "maze", "miner",
                 "ninja", "plunder", "starpilot"):  # fmt: skip
        assert game in err
    for command in ("ssilbench data download procgen", "ssilbench data import procgen",
                    "ssilbench data collect procgen"):  # fmt: skip
        assert command in err
    assert not (tmp_path / "r" / "results.sqlite").exists()
    # The guide shows this message as it is, with /data for the data root.
    guide = (Path(__file__).parents[2] / "docs" / "guide.md").read_text()
    shown = guide.split("`procgen:all` with no data:\n\n```\n", 1)[1].split("```", 1)[0]
    assert shown.strip() == err.replace(str(tmp_path / "d"), "/data").strip()


def test_a_sweep_file_block_without_budgets_takes_the_familys(plugins, tmp_path):
    from ssilbench.planning.sweepfile import load_sweep_file, plan_blocks

    path = tmp_path / "s.toml"
    path.write_text('name = "s"\n[[block]]\nmethods = ["bc"]\nenvs = ["pusht"]\n')
    plan, _ = plan_blocks(plugins, load_sweep_file(path), path, None, False)
    assert {(s.budget, s.seed) for s in plan.runs} == {("10", 0), ("10", 1), ("10", 2)}


def test_a_protocol_reads_budgets_as_text():
    protocol = PaperProtocol(budgets=[16, 0.5, "all"], seeds=[1], figure="Figure 1")
    assert protocol.budgets == ("16", "0.5", "all") and protocol.steps is None
    with pytest.raises(ValueError):
        PaperProtocol(budgets=[], seeds=[1], figure="Figure 1")
