"""``ssilbench data demo``: every refusal is one message and exit code 2, and an imported
demo is never overwritten without --replace (the demos themselves are run end to end in
tests/plugins/pusht/test_pusht_uva.py and tests/plugins/libero/test_libero_uva.py)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from ssilbench.testing import cli_exit_code

REPO = Path(__file__).resolve().parents[2]


def _demo(capsys, *args: str) -> tuple[int, str, str]:
    code = cli_exit_code("data", "demo", *args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_families_without_a_demo_are_named_with_those_that_have_one(capsys, tmp_path):
    root = ["--data-root", str(tmp_path)]
    code, _, err = _demo(capsys, "nope", *root)
    assert code == 2 and "'nope' is not an environment" in err
    assert "the families with a demo are: libero10, pusht." in err
    code, _, err = _demo(capsys, "maze", *root)
    assert code == 2 and "'maze' offers no demo" in err and "libero10, pusht" in err
    code, _, err = _demo(capsys, "pusht", "--episodes", "0", *root)
    assert code == 2 and "'--episodes': 0 is not in the range x>=1" in err
    code, _, err = _demo(capsys, "libero10", "--tasks", "soup-sauce-baskett", *root)
    assert code == 2 and "soup-sauce-basket" in err  # did you mean
    assert not list(tmp_path.iterdir())  # nothing written


@pytest.mark.parametrize(
    ("family", "blocked", "extra"),
    [("pusht", ["gym_pusht"], "pusht"), ("libero10", ["libero", "libero.libero"], "libero")],
)
def test_a_missing_extra_names_the_pip_command(capsys, monkeypatch, tmp_path, family, blocked,
                                               extra):  # fmt: skip
    for module in blocked:
        monkeypatch.setitem(sys.modules, module, None)
    code, _, err = _demo(capsys, family, "--data-root", str(tmp_path))
    assert code == 2, err
    assert f"pip install 'ssilbench[{extra}]'" in err
    assert not (tmp_path / family).exists()


def test_an_imported_demo_is_kept_unless_replace(capsys, tmp_path):
    pytest.importorskip("gym_pusht", reason="pip install 'ssilbench[pusht]'")
    args = ["pusht", "--episodes", "1", "--episode-length", "5", "--data-root", str(tmp_path)]
    code, out, err = _demo(capsys, *args)
    assert code == 0, err
    store = tmp_path / "pusht" / "demo"
    assert f"{store}: 5 frames, 1 episodes" in out
    printed = out.split("Run on it with: ")[1].split(" --data-root")[0]
    assert printed.startswith("ssilbench run --method bc --env pusht -o dataset=demo ")
    # The guide's first runs show this very command.
    guide = re.sub(r"\s*\\\n\s*", " ", (REPO / "docs" / "guide.md").read_text())
    assert printed in guide
    manifest = (store / "manifest.json").read_text()
    code, _, err = _demo(capsys, *args)
    assert code == 2 and f"already imported at {store}; add --replace" in err
    assert (store / "manifest.json").read_text() == manifest  # untouched
    code, out, err = _demo(capsys, *args, "--episodes", "2", "--replace")
    assert code == 0, err
    assert f"{store}: 10 frames, 2 episodes" in out


@pytest.mark.parametrize("family", ["pusht", "libero10"])
def test_the_guide_shows_the_run_each_demo_suggests(family):
    from ssilbench.plugins import load_plugins

    environment = load_plugins().environments.load(family)
    guide = re.sub(r"\s*\\\n\s*", " ", (REPO / "docs" / "guide.md").read_text())
    assert f"-o dataset=demo {environment.demo_run}\n" in guide
