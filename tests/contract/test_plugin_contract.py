"""The plugin contract's checks at load time and its deprecation shims.

- A plugin declares the API version it needs (``SSILBENCH_API``) or its distribution
  requires a ssilbench release: a mismatch lists it as broken, in one line naming both.
- A misspelled hook, or a hook function without ``@hookimpl``, would register nothing:
  the plugin is listed as broken with the hook's name and the closest real one.
- A name of a plugin blocked with ``-p no:NAME`` says so where it is asked for.
- What API 1.1 removed without notice works again, with a DeprecationWarning.
"""

from __future__ import annotations

import json
import textwrap
import warnings

import pytest
import torch

from ssilbench.api import API_VERSION, RunContext, stream_seed
from ssilbench.plugin_checks import parse_api_version
from ssilbench.testing import cli_exit_code, load_plugins

MAJOR, MINOR = parse_api_version(API_VERSION)
REGISTERS = """
from ssilbench.api import hookimpl, registers

ssilbench_register_architectures = registers(
    ("{name}", "ssilbench_baselines.architectures:MLP5", "an alias"),
)
"""


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SSILBENCH_PLUGINS", raising=False)
    monkeypatch.delenv("SSILBENCH_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    return tmp_path


def write(folder, name: str, source: str) -> str:
    (folder / f"{name}.py").write_text(textwrap.dedent(source))
    return name


def broken(capsys, *flags: str) -> dict[str, str]:
    """Plugin name -> error of every broken plugin ``ssilbench list --json`` reports."""
    assert cli_exit_code(*flags, "list", "--json") == 0
    return {b["plugin"]: b["error"] for b in json.loads(capsys.readouterr().out)["broken"]}


# --- hooks ---------------------------------------------------------------------------------


def test_a_misspelled_hook_is_listed_broken_with_the_closest_real_one(plugin_dir, capsys):
    name = write(plugin_dir, "typo_plugin", """
        from ssilbench.api import hookimpl

        @hookimpl
        def ssilbench_register_method(registry):
            registry.add("typo_method", "typo_plugin:Nothing", "never registered")
    """)  # fmt: skip
    errors = broken(capsys, "-p", name)
    assert errors == {
        name: "'ssilbench_register_method' is not a hook of ssilbench. Did you mean "
        "'ssilbench_register_methods'?"
    }
    # The human listing shows it too, and the other plugins work.
    assert cli_exit_code("-p", name, "list") == 0
    out = capsys.readouterr().out
    assert "broken plugins" in out and "ssilbench_register_method" in out
    assert "bc" in load_plugins([name]).methods


def test_a_hook_without_hookimpl_is_listed_broken(plugin_dir, capsys):
    name = write(plugin_dir, "unmarked_plugin", """
        def ssilbench_register_methods(registry):
            registry.add("unmarked", "unmarked_plugin:Nothing", "never registered")
    """)  # fmt: skip
    assert broken(capsys, "-p", name) == {
        name: "'ssilbench_register_methods' is not marked with @ssilbench.api.hookimpl, so it "
        "registers nothing"
    }


def test_a_marked_function_of_an_unknown_hook_is_listed_broken(plugin_dir, capsys):
    name = write(plugin_dir, "unknown_hook_plugin", """
        from ssilbench.api import hookimpl

        @hookimpl
        def register_methods(registry):
            registry.add("lost", "unknown_hook_plugin:Nothing", "never registered")
    """)  # fmt: skip
    errors = broken(capsys, "-p", name)
    assert errors[name].startswith("'register_methods' is not a hook of ssilbench.")


def test_a_correct_plugin_of_this_api_loads(plugin_dir, capsys):
    # A helper of its own named like ssilbench's is no hook, and no problem.
    name = write(plugin_dir, "good_plugin", f"SSILBENCH_API = '{MAJOR}.0'\n"
                 + REGISTERS.format(name="alias_mlp")
                 + "\ndef ssilbench_version_of_data():\n    return 3\n")  # fmt: skip
    assert broken(capsys, "-p", name) == {}
    plugins = load_plugins([name])
    assert plugins.architectures.entries["alias_mlp"].origin.plugin == name


# --- API versions and requirements ---------------------------------------------------------


@pytest.mark.parametrize(
    ("declared", "error"),
    [
        (f"{MAJOR + 1}.0", f"written for ssilbench API {MAJOR + 1}.0, and this ssilbench "
         f"provides API {API_VERSION}: install a ssilbench that provides API {MAJOR + 1}.x"),
        (f"{MAJOR - 1}.4", f"written for ssilbench API {MAJOR - 1}.4, and this ssilbench "
         f"provides API {API_VERSION}: install a release of the plugin written for API "
         f"{MAJOR}.x"),
        (f"{MAJOR}.{MINOR + 1}", f"written for ssilbench API {MAJOR}.{MINOR + 1}, and this "
         f"ssilbench provides API {API_VERSION} only: upgrade ssilbench"),
        ("one", "SSILBENCH_API = 'one' is not a version"),
    ],
)  # fmt: skip
def test_a_plugin_for_another_api_version_is_refused_at_load(plugin_dir, capsys, declared, error):
    module = "versioned_" + "".join(c if c.isalnum() else "_" for c in declared)
    name = write(plugin_dir, module, f"SSILBENCH_API = {declared!r}\n"
                 + REGISTERS.format(name="versioned_mlp"))  # fmt: skip
    errors = broken(capsys, "-p", name)
    assert list(errors) == [name] and errors[name].startswith(error), errors
    assert "\n" not in errors[name]
    assert "versioned_mlp" not in load_plugins([name]).architectures


def test_a_distribution_requiring_another_ssilbench_is_refused(plugin_dir, capsys):
    from importlib.metadata import version

    write(plugin_dir, "pinned_plugin", REGISTERS.format(name="pinned_mlp"))
    info = plugin_dir / "pinned_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: pinned-plugin\nVersion: 1.0\n"
        "Requires-Dist: numpy\nRequires-Dist: ssilbench<0.1\n"
    )
    (info / "entry_points.txt").write_text("[ssilbench]\npinned = pinned_plugin\n")
    installed = version("ssilbench")
    assert broken(capsys) == {
        "pinned": f"pinned-plugin 1.0 requires ssilbench<0.1, and ssilbench {installed} is "
        f"installed: install a release of pinned-plugin made for ssilbench {installed}, or "
        "ssilbench<0.1"
    }
    # A requirement the installed release meets loads.
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: pinned-plugin\nVersion: 1.0\n"
        f"Requires-Dist: ssilbench>={installed}\n"
    )
    assert broken(capsys) == {}
    assert "pinned_mlp" in load_plugins().architectures


# --- blocked plugins -----------------------------------------------------------------------


def test_a_blocked_plugins_names_say_which_flag_blocks_them(plugin_dir, capsys):
    args = ["--budgets", "16", "--results", "r", "--data-root", "d"]
    code = cli_exit_code("-p", "no:maze", "run", "--method", "bc", "--env", "maze:10x10", *args)
    assert code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "error: Unknown environment 'maze': it is registered by plugin 'maze', which is "
        "blocked by -p no:maze (drop that flag to use it)."
    )
    code = cli_exit_code("-p", "no:baselines", "run", "--method", "vm_idm", "--env",
                         "maze:10x10", *args)  # fmt: skip
    assert code == 2 and "blocked by -p no:baselines" in capsys.readouterr().err
    # A name no plugin has is still unknown, with its suggestions.
    code = cli_exit_code("-p", "no:maze", "run", "--method", "bcc", "--env", "maze:10x10", *args)
    assert code == 2 and "Did you mean 'bc'?" in capsys.readouterr().err


# --- deprecation shims ---------------------------------------------------------------------


@pytest.fixture
def ctx(tmp_path):
    from ssilbench.testing import offline_context

    spec = load_plugins().environments.create("maze").load("10x10").spec
    context, _ = offline_context(spec, tmp_path, seed=0)
    return context


def test_run_context_extras_works_and_warns(ctx):
    with pytest.warns(DeprecationWarning, match=r"RunContext.extras is deprecated .* stage cache"):
        ctx.extras["labels"] = [1, 2]
    with pytest.warns(DeprecationWarning):
        assert ctx.extras == {"labels": [1, 2]}


def test_an_integer_generator_salt_seeds_as_in_api_1_0_and_warns(ctx):
    with pytest.warns(DeprecationWarning, match=r"name the stream instead, e.g. ctx.generator"):
        old = ctx.generator(3)
    expected = torch.Generator().manual_seed(ctx.seed * 1_000_003 + 3)
    assert torch.equal(torch.rand(4, generator=old), torch.rand(4, generator=expected))
    with pytest.warns(DeprecationWarning):
        ctx.generator()  # API 1.0's default salt 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        named = ctx.generator("policy")  # the API 1.1 way: no warning
    assert named.initial_seed() == stream_seed(ctx.seed, "policy")


def test_every_removed_name_has_its_replacement_in_the_changelog():
    from pathlib import Path

    changelog = (Path(__file__).resolve().parents[2] / "CHANGELOG.md").read_text()
    for old in ("RunContext.extras", "RunContext.generator(salt)", "ssilbench.data.store"):
        assert old in changelog, old
    assert f"API {API_VERSION}" in changelog
    assert isinstance(RunContext.extras, property)
