"""Defaults that changed after runs were recorded (``Environment.run_defaults``): the maze's
``layout`` and, for images, ``palette``. New runs take the paper's mazes and colours, written
into their spec; a recorded spec without the option still means the suite's maze (ssilbench's
colours), and ``-o layout=suite`` plans the runs recorded before."""

from __future__ import annotations

from ssilbench.cli.tasks import environment_options
from ssilbench.planning.plan import resolve, resolve_plan
from ssilbench.planning.values import validate_model
from ssilbench.runner.sweep import run_label
from ssilbench.runs.spec import Sweep
from ssilbench_maze.options import MazeOptions


def maze_sweep(options: dict | None = None) -> Sweep:
    return Sweep(methods=["bc"], envs=["maze:20x20"], budgets=["16"], seeds=[0],
                 options=options or {})  # fmt: skip


def free_cells(plan, spec) -> int:
    return int((~plan.task_of(spec).task.maze.walls).sum())


def test_a_new_run_takes_the_paper_layout_and_a_recorded_spec_keeps_the_suite(plugins):
    plan = resolve_plan(plugins, maze_sweep())
    [new] = plan.runs
    assert new.options["layout"] == "paper"  # in the spec: never the design of an older run
    assert free_cells(plan, new) == 205  # the paper's 20x20 maze
    assert run_label(plan, new)[1] == "maze:20x20"  # what the user did not set is not shown

    suite = resolve_plan(plugins, maze_sweep({"layout": "suite"}))
    [old] = suite.runs
    assert "layout" not in old.options  # the spec of a run recorded before the option
    assert free_cells(suite, old) == 202
    assert run_label(suite, old)[1] == "maze:20x20 (layout=suite)"
    assert old.design_id != new.design_id
    # Read back (a worker, `ssilbench eval`): a spec without the option is the suite's maze.
    assert validate_model(MazeOptions, old.options, "options").layout == "suite"
    assert validate_model(MazeOptions, new.options, "options").layout == "paper"


def test_commands_other_than_run_take_the_same_defaults(plugins):
    environment = plugins.environments.create("maze")
    assert environment_options(environment, "maze", {}).layout == "paper"  # data build, list
    assert environment_options(environment, "maze", {"layout": "suite"}).layout == "suite"
    # The grid has no run defaults: its specs are what they were.
    [grid] = resolve(plugins, Sweep(methods=["bc"], envs=["grid:20x20"], budgets=["0.1"],
                                    seeds=[0], options={"data_seed": 0}))  # fmt: skip
    assert "layout" not in grid.options


def test_image_runs_take_the_paper_colours_and_positions_record_no_palette(plugins):
    [image] = resolve(plugins, maze_sweep({"state": "image"}))
    assert image.options["palette"] == "paper"
    [position] = resolve(plugins, maze_sweep())
    assert "palette" not in position.options  # positions ignore it: their ids stay
    [earlier] = resolve(plugins, maze_sweep({"state": "image", "palette": "ssilbench"}))
    assert "palette" not in earlier.options and earlier.design_id != image.design_id
