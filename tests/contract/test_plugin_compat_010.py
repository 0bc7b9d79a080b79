"""A plugin written against ssilbench 0.1.0 (API 1.0) still works, with deprecation warnings
only, until API 2.0.

The plugin is ``tests/compat_010/ssilbench_ring``, written from the 0.1.0 plugin authors'
guide: it imports ``ssilbench.data.store`` (renamed in 0.2.0), keeps state in
``RunContext.extras`` (removed in 0.2.0) and seeds ``RunContext.generator(salt)`` with an
integer (streams are named since 0.2.0). Each of these must warn, naming what to use
instead, and nothing else may.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest

from ssilbench.api import API_VERSION
from ssilbench.testing import cli_exit_code, run_records

COMPAT = Path(__file__).resolve().parents[1] / "compat_010"
CORE = Path(__file__).resolve().parents[2] / "ssilbench"
# What each deprecated use must say: the old name and its replacement.
EXPECTED = {
    "data.store": ("the module ssilbench.data.store is deprecated", "from ssilbench.api"),
    "extras": ("RunContext.extras is deprecated", "stage cache"),
    "generator": ("RunContext.generator(salt) with an integer salt", 'ctx.generator("policy")'),
}


@pytest.fixture
def old_plugin(tmp_path, monkeypatch):
    """The 0.1.0 plugin importable, freshly (so that its imports warn again)."""
    monkeypatch.syspath_prepend(str(COMPAT))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SSILBENCH_PLUGINS", raising=False)
    monkeypatch.delenv("SSILBENCH_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    for name in [m for m in sys.modules if m.split(".")[0] == "ssilbench_ring"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.delitem(sys.modules, "ssilbench.data.store", raising=False)
    return tmp_path


def test_the_api_is_still_major_version_1():
    # When this fails, API 2.0 may drop the shims: move this plugin to the 2.0 contract.
    assert API_VERSION.split(".")[0] == "1"


def test_a_010_plugin_runs_a_tiny_sweep_with_deprecation_warnings_only(old_plugin, capsys):
    args = ["-q", "-p", "ssilbench_ring.plugin", "run", "--method", "ring_idm,bc", "--env",
            "ring:all", "--budgets", "4", "--seeds", "0", "--steps", "20",
            "--results", "results", "--data-root", "data"]  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = cli_exit_code(*args)
    assert code == 0, capsys.readouterr().err
    runs = run_records(old_plugin / "results")
    assert len(runs) == 4 and {r["status"] for r in runs} == {"done"}
    assert {r["method"] for r in runs} == {"ring_idm", "bc"}

    # Every warning the plugin's code or the core raised is a deprecation naming its
    # replacement; each deprecated use was reported.
    ours = [w for w in caught if Path(w.filename).is_relative_to(COMPAT)
            or Path(w.filename).is_relative_to(CORE)]  # fmt: skip
    others = [f"{w.category.__name__}: {w.message} ({w.filename}:{w.lineno})"
              for w in ours if not issubclass(w.category, DeprecationWarning)]  # fmt: skip
    assert not others, others
    messages = {str(w.message) for w in ours}
    for use, (old, new) in EXPECTED.items():
        said = [m for m in messages if old in m]
        assert said, f"no deprecation warning for {use}: {sorted(messages)}"
        assert all(new in m and "API 2.0" in m for m in said), said
    # The warnings point at the plugin's own lines.
    assert all(Path(w.filename).is_relative_to(COMPAT) for w in ours), [w.filename for w in ours]


def test_the_010_plugin_lists_as_loaded(old_plugin, capsys):
    import json

    assert cli_exit_code("-p", "ssilbench_ring.plugin", "list", "--json") == 0
    listing = json.loads(capsys.readouterr().out)
    assert listing["broken"] == []
    names = {(e["kind"], e["name"]) for e in listing["entries"] if e["plugin"] != "baselines"}
    assert {("method", "ring_idm"), ("environment", "ring")} <= names
