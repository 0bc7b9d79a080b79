"""The maze option ``layout``: the suite's seeded mazes (the default) and the paper's code's
exact layouts (its vendored generator, seeded with 42)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from ssilbench.testing import cli_exit_code
from ssilbench_maze.environment import MazeEnvironment, MazeTask
from ssilbench_maze.generate import LegacyIntegers, generate_maze, paper_walls

# The paper's code gives 50 / 205 / 1,281 free cells for 10x10 / 20x20 / 50x50; the sha256
# is of the wall grid as row-major bytes, 1 for a wall and 0 for a free cell.
PAPER_LAYOUTS = {
    10: (50, "0efed443bd9843fe9bddb4cb45048601a6b49247bd791666df0da95765c3df9f"),
    20: (205, "b61f39cff1bc3ad35c9aae0a981c795973be0ffccf65477624ec486941792898"),
    50: (1281, "4f4d1080dd786fb2f48382ea9b11832771b3914d8b3f1d15b00bbf72c7091707"),
}


def load(task: str = "10x10", **options) -> MazeTask:
    return MazeEnvironment().load(task, MazeEnvironment.Options(**options))


def test_legacy_integers_are_randomstates_scalar_draws():
    # Every bound the generator uses (2-4 neighbours, 6 / 11 / 26 island coordinates), one
    # that draws nothing, and bounds whose mask rejects most words.
    bounds = [2, 3, 4, 6, 11, 26, 1, 5, 17, 33, 1 << 20] * 400
    legacy = np.random.RandomState(42)
    fast = LegacyIntegers(42)
    assert [fast.below(n) for n in bounds] == [int(legacy.randint(0, n)) for n in bounds]


@pytest.mark.parametrize("size", sorted(PAPER_LAYOUTS))
def test_the_papers_layouts_have_its_free_cells_and_checksums(size):
    free, digest = PAPER_LAYOUTS[size]
    walls = paper_walls(size, size)
    assert walls.shape == (size // 2 * 2 + 1,) * 2 and not walls.flags.writeable
    assert int((~walls).sum()) == free
    assert hashlib.sha256(walls.astype(np.uint8).tobytes()).hexdigest() == digest
    # Whatever the seed, the paper's walls; the goal is a free cell drawn from the seed, and
    # every free cell reaches it (the walls never close a loop).
    mazes = [generate_maze(size, seed, "paper") for seed in (0, 1, 2)]
    assert all(m.walls is walls for m in mazes)
    assert all(not walls.reshape(-1)[m.goal] for m in mazes)
    assert all(int(m.feasible.sum()) == free for m in mazes)


def test_layouts_differ_from_the_suites_and_goals_follow_the_seed():
    suite, paper = generate_maze(20, 0), generate_maze(20, 0, "paper")
    assert int((~suite.walls).sum()) == 202 and not np.array_equal(suite.walls, paper.walls)
    assert len({generate_maze(20, seed, "paper").goal for seed in range(6)}) > 1


def test_layout_option_keeps_earlier_runs_ids_and_names_a_new_dataset(tmp_path):
    suite, paper = load(data="states"), load(data="states", layout="paper")
    assert "layout" not in suite.options.model_dump() and "layout" not in suite.data_key
    assert paper.options.model_dump()["layout"] == "paper"
    assert paper.data_key == {**suite.data_key, "layout": "paper"}
    assert paper.dataset_path(tmp_path) != suite.dataset_path(tmp_path)
    assert paper.spec.metadata["layout"] == "paper" and "layout" not in suite.spec.metadata
    assert paper.spec.metadata["grid_size"] == [11, 11]
    assert paper.spec.metadata["feasible_states"] == 50
    assert paper.spec.metadata["test_states"] == 49  # every feasible non-goal state


def test_an_unknown_layout_is_one_message_and_exit_2(tmp_path, capsys):
    code = cli_exit_code("run", "--method", "bc", "--env", "maze:10x10", "-o", "layout=papr",
                         "--budgets", "4", "--dry-run", "--results", str(tmp_path / "r"),
                         "--data-root", str(tmp_path / "d"))  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "layout" in err and "'suite' or 'paper'" in err, err
    assert "Traceback" not in err
