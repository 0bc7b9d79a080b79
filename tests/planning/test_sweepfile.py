"""Sweep files: parsing, validation messages, expansion, and the plot/report commands."""

from __future__ import annotations

import textwrap

import pytest

from ssilbench.cli import main
from ssilbench.errors import SsilbenchError, UsageError
from ssilbench.planning.sweepfile import load_sweep_file, plan_blocks
from ssilbench.plugins import load_plugins
from ssilbench.testing import cli_exit_code

GOOD = """
name = "tiny"
title = "A tiny study"
metric = "test_accuracy"

[[block]]
panel = "positions"
methods = ["bc", "vm_idm"]
envs = ["maze:10x10"]
options = { data = "states", maze_seed = [0, 1] }
config = { arch = "mlp5" }
budgets = [0.5, 1.0]
seeds = [0, 1]
steps = 40
eval_every = 40

[labels]
"vm_idm (arch=mlp5)" = "VM*-IDM"
"bc (arch=mlp5)" = "BC"

[quick]
seeds = [0]
budgets = [1.0]

[[claim]]
text = "VM*-IDM reaches some accuracy"
check = "reaches"
method = "VM*-IDM"
threshold = 0.0

[[claim]]
text = "VM*-IDM beats BC with few labels"
check = "beats"
method = "VM*-IDM"
other = "BC"
budgets = 1
"""


def write(tmp_path, text: str, name: str = "study.toml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_a_valid_file_expands_list_options_and_quick(tmp_path):
    sweep_file = load_sweep_file(write(tmp_path, GOOD))
    [block] = sweep_file.blocks()
    sweeps = block.sweeps()
    assert [s.options["maze_seed"] for s in sweeps] == [0, 1]
    assert sweeps[0].budgets == ["0.5", "1.0"] and sweeps[0].eval_every == 40
    [quick] = sweep_file.blocks(quick=True)
    assert quick.seeds == [0] and quick.budgets == ["1.0"] and quick.steps == 40
    assert sweep_file.display("vm_idm (arch=mlp5)") == "VM*-IDM"
    assert sweep_file.display("bc") == "bc"
    assert sweep_file.variant == "" and sweep_file.claim[1].scope == ""  # the paper's


def test_variant_and_scope_are_read_as_one_line(tmp_path):
    text = GOOD.replace(
        'metric = "test_accuracy"', 'metric = "test_accuracy"\nvariant = " other colours "', 1
    )
    text = text.replace("budgets = 1", 'budgets = 1\nscope = "the smallest split"', 1)
    sweep_file = load_sweep_file(write(tmp_path, text))
    assert sweep_file.variant == "other colours"
    assert sweep_file.claim[1].scope == "the smallest split"


def test_up_to_is_read_as_a_budget_label(tmp_path):
    text = GOOD.replace("budgets = 1", "budgets = 1\nup_to = 0.20", 1)
    assert load_sweep_file(write(tmp_path, text)).claim[1].up_to == "0.2"
    text = GOOD.replace("budgets = 1", "budgets = 1\nup_to = 64", 1)
    assert load_sweep_file(write(tmp_path, text)).claim[1].up_to == "64"
    assert load_sweep_file(write(tmp_path, GOOD)).claim[1].up_to is None


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (("metric =", "metrc ="), "unknown key 'metrc'"),
        (("steps = 40", "stepz = 40"), "unknown key 'block[1].stepz'"),
        (("seeds = [0, 1]", 'seeds = "zero"'), "'block[1].seeds'"),
        (('methods = ["bc", "vm_idm"]', "methods = []"), "'block[1].methods'"),
        (("budgets = [0.5, 1.0]", "budgets = [0.5, 3.5]"), "'block[1].budgets'"),
        (("maze_seed = [0, 1]", "maze_seed = []"), "empty list"),
        (('check = "beats"', 'check = "wins"'), "'claim[2].check'"),
        (("[[block]]", "[[block]"), "not valid TOML"),
        (("steps = 40", "steps = 40\nrollouts = 1"), "'block[1].rollouts'"),
        (("steps = 40", 'steps = 40\nquick = "no"'), "'block[1].quick'"),
        (("steps = 40", 'steps = 40\nsteps_scale = "0.5"'), "'block[1].steps_scale'"),
        (('metric = "test_accuracy"', "metric = 1"), "'metric'"),
        (('metric = "test_accuracy"', 'metric = "test_accuracy"\nvariant = true'), "'variant'"),
        (
            ('metric = "test_accuracy"', 'metric = "test_accuracy"\nvariant = "  "'),
            "'variant' is blank",
        ),
        (("budgets = 1", 'budgets = 1\nscope = "two\\nlines"'), "must be one line"),
        (("budgets = 1", "budgets = 1\nscope = 2"), "'claim[2].scope'"),
        (("budgets = 1", 'budgets = 1\nscop = "x"'), "unknown key 'claim[2].scop'"),
        (("budgets = 1", "budgets = 1\nup_to = 1.5"), "fraction in (0, 1]"),
        (("budgets = 1", "budgets = 1\nup_to = true"), "'claim[2].up_to'"),
        (("threshold = 0.0", "threshold = 0.0\nup_to = 0.5"), "up_to applies to beats"),
    ],
)
def test_invalid_files_name_the_file_and_the_key(tmp_path, edit, expected):
    path = write(tmp_path, GOOD.replace(*edit, 1))
    with pytest.raises(UsageError) as info:
        load_sweep_file(path)
    assert str(path) in str(info.value) and expected in str(info.value)


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (('"vm_idm"]', '"vm_idn"]'), "Did you mean 'vm_idm'"),
        (('envs = ["maze:10x10"]', 'envs = ["maze:10x11"]'), "Unknown maze task"),
        (('data = "states"', 'dat = "states"'), "Did you mean 'data'"),
        (('arch = "mlp5"', 'arch = "cnn1"'), "takes image inputs"),
    ],
)
def test_plan_errors_name_the_file_and_the_block(tmp_path, edit, expected):
    path = write(tmp_path, GOOD.replace(*edit, 1))
    with pytest.raises(SsilbenchError) as info:
        plan_blocks(load_plugins(), load_sweep_file(path), path, tmp_path / "data", quick=False)
    assert f"Sweep file {path}, block 1" in str(info.value) and expected in str(info.value)


def test_quick_without_a_quick_section(tmp_path):
    path = write(tmp_path, GOOD.split("[quick]")[0])
    with pytest.raises(UsageError, match="no \\[quick\\] section"):
        load_sweep_file(path).blocks(quick=True)


def _cli(capsys, *args) -> tuple[int, str]:
    return cli_exit_code(*args), capsys.readouterr().err


def without_datasets_or_simulators(tmp_path, monkeypatch) -> None:
    """Drawing from the store must need neither: remove the datasets and make opening one,
    or checking the simulator, fail."""
    import shutil

    shutil.rmtree(tmp_path / "data")
    task_cls = type(load_plugins().environments.create("maze").load("10x10"))

    def forbidden(*args, **kwargs):
        raise AssertionError("a dataset or a simulator was needed")

    monkeypatch.setattr(task_cls, "dataset", forbidden)
    monkeypatch.setattr(task_cls, "check_rollouts", forbidden)


def test_run_plot_and_report_from_a_sweep_file(tmp_path, capsys, monkeypatch):
    path = write(tmp_path, GOOD)
    common = ["--results", str(tmp_path / "results"), "--data-root", str(tmp_path / "data")]
    code, err = _cli(capsys, "run", "--sweep", str(path), "-q", *common)
    assert code == 0, err
    assert "16 run(s) done" in err  # 2 methods x 2 maze seeds x 2 budgets x 2 seeds

    without_datasets_or_simulators(tmp_path, monkeypatch)
    common = ["--results", str(tmp_path / "results")]
    code, err = _cli(capsys, "plot", "--sweep", str(path), *common, "--out", str(tmp_path / "f"))
    assert code == 0, err
    assert (tmp_path / "f" / "tiny.png").stat().st_size > 1000
    assert (tmp_path / "f" / "tiny.svg").read_text().lstrip().startswith("<?xml")

    out = tmp_path / "docs" / "report.md"
    code, err = _cli(capsys, "report", "--sweep", str(path), *common, "--out", str(out))
    assert code == 0, err
    text = out.read_text()
    assert "## A tiny study" in text and "![tiny](figures/tiny.png)" in text
    assert "| VM*-IDM reaches some accuracy | yes |" in text
    assert (
        "positions: maze:10x10, maze_seed=0" in text
        and "positions: maze:10x10, maze_seed=1" in text
    )
    assert (out.parent / "figures" / "tiny.png").exists()
    assert not (tmp_path / "data").exists()
    monkeypatch.undo()

    code, err = _cli(capsys, "run", "--sweep", str(path), "--quick", "-q", *common,
                     "--data-root", str(tmp_path / "data"))  # fmt: skip
    assert code == 0 and "already recorded" in err  # the quick runs are a subset

    unrun = write(tmp_path, GOOD.replace('name = "tiny"', 'name = "later"').replace(
        "maze_seed = [0, 1]", "maze_seed = [5]"), "later.toml")  # fmt: skip
    code, err = _cli(capsys, "report", "--sweep", str(path), "--sweep", str(unrun), *common,
                     "--out", str(out))  # fmt: skip
    assert code == 0, err
    text = out.read_text()
    assert "No run of this study is in the results store yet" in text
    assert "not checked: 2" in text  # the unrun study's two claims


def test_sweep_cli_errors_exit_2(tmp_path, capsys):
    path = write(tmp_path, GOOD.replace("metric =", "metrc =", 1))
    common = ["--results", str(tmp_path / "results"), "--data-root", str(tmp_path / "data")]
    code, err = _cli(capsys, "run", "--sweep", str(path), *common)
    assert code == 2 and "unknown key 'metrc'" in err
    good = write(tmp_path, GOOD, "good.toml")
    code, err = _cli(capsys, "run", "--sweep", str(good), "--method", "bc", *common)
    assert code == 2 and "drop --method" in err
    code, err = _cli(capsys, "run", "--sweep", str(good), "--seeds", "3", *common)
    assert code == 2 and "drop --seeds" in err
    code, err = _cli(capsys, "run", "--quick", "--method", "bc", "--env", "maze:10x10",
                     "--budgets", "16", *common)  # fmt: skip
    assert code == 2 and "--quick needs --sweep" in err
    code, err = _cli(capsys, "plot", "--sweep", str(good), "--results", str(tmp_path / "r"))
    assert code == 2 and "No results store" in err


def test_blocks_selects_blocks_by_name_or_panel(tmp_path, capsys):
    two = GOOD.replace('panel = "positions"', 'panel = "positions"\nname = "first"', 1).replace(
        "[labels]",
        '[[block]]\npanel = "other"\nmethods = ["bc"]\nenvs = ["maze:10x10"]\n'
        'options = { data = "states" }\nbudgets = [1.0]\nseeds = [0]\nsteps = 40\n\n[labels]',
    )
    path = write(tmp_path, two)
    common = ["--results", str(tmp_path / "results"), "--data-root", str(tmp_path / "data")]
    code, err = _cli(capsys, "run", "--sweep", str(path), "--blocks", "other", "-q", *common)
    assert code == 0 and "1 run(s) done" in err, err
    code, err = _cli(capsys, "run", "--sweep", str(path), "--blocks", "first,other", "-q",
                     "--quick", *common)  # fmt: skip
    assert code == 0 and "4 run(s) done, 1 already recorded" in err, err
    code, err = _cli(capsys, "run", "--sweep", str(path), "--blocks", "frist", *common)
    assert code == 2 and "no block named 'frist'" in err and "first, other, positions" in err
    code, err = _cli(capsys, "run", "--blocks", "first", "--method", "bc", "--env",
                     "maze:10x10", "--budgets", "16", *common)  # fmt: skip
    assert code == 2 and "--blocks needs --sweep" in err


def test_status_counts_a_sweep_files_runs(tmp_path, capsys, monkeypatch):
    path = write(tmp_path, GOOD)
    common = ["--results", str(tmp_path / "results"), "--data-root", str(tmp_path / "data")]
    code, err = _cli(capsys, "run", "--sweep", str(path), "--quick", "-q", *common)
    assert code == 0, err
    without_datasets_or_simulators(tmp_path, monkeypatch)
    common = ["--results", str(tmp_path / "results")]
    try:
        main(["status", "--sweep", str(path), *common])
    except SystemExit as exc:
        assert exc.code == 0
    out = capsys.readouterr().out
    assert out.startswith("4 done, 0 running, 0 failed, 0 interrupted, 12 not started"), out
    assert "min to go: 12 runs" in out
    code, err = _cli(capsys, "status", "--quick", *common)
    assert code == 2 and "--quick needs --sweep" in err


@pytest.mark.parametrize("path", sorted(__import__("pathlib").Path(__file__).parents[2]
                                        .joinpath("benchmarks", "paper").glob("*.toml")),
                         ids=lambda p: p.stem)  # fmt: skip
def test_paper_studies_label_every_method_their_claims_name(path, tmp_path):
    # A claim names display labels; every method of the study must get one, or its claims
    # would silently find no runs.
    from ssilbench.runner.sweep import run_label

    sweep_file = load_sweep_file(path)
    # The maze studies' datasets are generated here; the others' are downloads: resolved.
    data = tmp_path / "data" if path.stem not in ("procgen", "manipulation") else None
    plan, _ = plan_blocks(load_plugins(), sweep_file, path, data, quick=False)
    shown = {sweep_file.display(run_label(plan, spec)[0]) for spec in plan.runs}
    unlabeled = sorted(m for m in shown if m not in sweep_file.labels.values())
    assert not unlabeled, f"no display label for {unlabeled}"
    for claim in sweep_file.claim:
        assert claim.method in shown, claim.text
        assert not claim.other or claim.other in shown, claim.text
