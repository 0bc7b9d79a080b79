"""Tests of plugin discovery: entry points, -p modules, block lists, broken plugins."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from importlib.metadata import version
from pathlib import Path

import pytest

from ssilbench.errors import PluginError, UnknownNameError, UsageError
from ssilbench.plugins import AUTOLOAD_ENV, EXTRA_PLUGINS_ENV, load_plugins, parse_plugin_flags

BUILTIN_METHODS = ["bc", "idm_labeling", "lapo", "lapo_plus", "uva", "vm_idm"]
BUILTIN_ARCHS = ["cnn1", "cnn5", "continuous", "impala", "impala_bf16", "impala_mlp",
                 "impala_small", "lc", "mlp5", "uva", "uva_base"]  # fmt: skip
BUILTIN_ENVS = ["grid", "libero10", "maze", "procgen", "pusht"]
BUILTIN_PLUGINS = ("baselines", "lapo", "libero", "maze", "procgen", "pusht", "uva")

METHOD_PLUGIN = """
from ssilbench.api import Method, hookimpl


class MyMethod(Method):
    description = "a test method"


@hookimpl
def ssilbench_register_methods(registry):
    registry.add("my_method", "{module}:MyMethod", "A method from a -p module.")
"""


@pytest.fixture(autouse=True)
def clean_plugin_env(monkeypatch):
    monkeypatch.delenv(AUTOLOAD_ENV, raising=False)
    monkeypatch.delenv(EXTRA_PLUGINS_ENV, raising=False)


@pytest.fixture
def plugin_module(tmp_path, monkeypatch):
    """Writes ``NAME.py`` into an importable folder; forgets the imported modules afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    written: list[str] = []

    def write(name: str, source: str) -> str:
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source).format(module=name))
        written.append(name)
        return name

    yield write
    for name in written:
        sys.modules.pop(name, None)


def test_builtins_are_found_with_their_distribution():
    plugins = load_plugins()
    assert plugins.broken == []
    assert plugins.methods.names() == BUILTIN_METHODS
    assert plugins.environments.names() == BUILTIN_ENVS
    assert plugins.architectures.names() == BUILTIN_ARCHS
    assert sorted(o.plugin for o in plugins.loaded) == list(BUILTIN_PLUGINS)
    for registry in plugins.registries().values():
        for entry in registry.entries.values():
            assert entry.origin.distribution == "ssilbench"
    assert plugins.methods.entry("bc").origin.plugin == "baselines"
    assert plugins.environments.entry("maze").origin.plugin == "maze"
    # the plugins whose results changed within this release say so (RESULTS_REVISION)
    revised = {"lapo": 1, "libero": 1, "uva": 2}
    assert plugins.versions() == {
        p: version("ssilbench") + (f" results r{revised[p]}" if p in revised else "")
        for p in BUILTIN_PLUGINS
    }


def test_block_flag_removes_the_maze_plugin():
    plugins = load_plugins(["no:maze"])
    assert plugins.environments.names() == ["libero10", "procgen", "pusht"]
    assert plugins.methods.names() == BUILTIN_METHODS
    assert sorted(o.plugin for o in plugins.loaded) == [p for p in BUILTIN_PLUGINS if p != "maze"]
    assert plugins.broken == []


def test_disabled_autoload_loads_nothing(monkeypatch):
    monkeypatch.setenv(AUTOLOAD_ENV, "1")
    plugins = load_plugins()
    assert plugins.loaded == []
    assert plugins.methods.names() == []
    assert plugins.environments.names() == []
    assert plugins.architectures.names() == []


def test_disabled_autoload_then_p_loads_one_entry_point(monkeypatch):
    monkeypatch.setenv(AUTOLOAD_ENV, "1")
    plugins = load_plugins(["maze"])
    assert [o.plugin for o in plugins.loaded] == ["maze"]
    assert plugins.environments.names() == ["grid", "maze"]
    assert plugins.environments.entry("maze").origin.distribution == "ssilbench"
    assert plugins.methods.names() == []
    assert plugins.architectures.names() == []


def test_p_of_an_autoloaded_entry_point_does_not_load_it_twice():
    plugins = load_plugins(["maze"])
    assert sorted(o.plugin for o in plugins.loaded) == list(BUILTIN_PLUGINS)
    assert plugins.broken == []


def test_p_module_plugin_is_loaded_under_its_module_name(plugin_module):
    name = plugin_module("ssb_test_method_plugin", METHOD_PLUGIN)
    plugins = load_plugins([name])
    assert plugins.broken == []
    assert "my_method" in plugins.methods
    origin = plugins.methods.entry("my_method").origin
    assert origin.plugin == name
    assert origin.distribution is None
    assert name in [o.plugin for o in plugins.loaded]
    assert plugins.methods.load("my_method").__name__ == "MyMethod"
    # the built-ins are still there
    assert set(BUILTIN_METHODS) <= set(plugins.methods.names())


def test_a_plugin_declares_its_results_revision(plugin_module):
    plain = plugin_module("ssb_test_unrevised", METHOD_PLUGIN)
    source = METHOD_PLUGIN.replace("my_method", "revised") + "\nRESULTS_REVISION = 3\n"
    revised = plugin_module("ssb_test_revised", source)
    plugins = load_plugins([plain, revised])
    assert plugins.broken == []
    assert plugins.methods.entry("my_method").origin.release == "unversioned"
    origin = plugins.methods.entry("revised").origin
    assert origin.revision == 3 and origin.release == "unversioned results r3"
    assert plugins.versions()[revised] == "unversioned results r3"


@pytest.mark.parametrize("value", ["0", "-1", "'2'", "True", "1.5"])
def test_a_results_revision_that_is_not_a_positive_int_breaks_the_plugin(plugin_module, value):
    name = plugin_module(
        f"ssb_test_bad_revision_{abs(hash(value))}",
        METHOD_PLUGIN + f"\nRESULTS_REVISION = {value}\n",
    )
    plugins = load_plugins([name])
    [broken] = plugins.broken
    assert broken.origin.plugin == name and "RESULTS_REVISION" in broken.error
    assert "my_method" not in plugins.methods


@pytest.mark.parametrize(
    "module, listed",
    [("ssb_test_env_var_plugin", "{name},"), ("ssb_test_env_var_spaces", "maze, {name}")],
    ids=["trailing-comma", "spaces"],
)
def test_extra_plugins_environment_variable(plugin_module, monkeypatch, module, listed):
    name = plugin_module(module, METHOD_PLUGIN)
    monkeypatch.setenv(EXTRA_PLUGINS_ENV, listed.format(name=name))
    plugins = load_plugins()
    assert plugins.broken == []
    assert plugins.methods.entry("my_method").origin.plugin == name


def test_a_p_module_plugin_can_be_blocked(plugin_module):
    name = plugin_module("ssb_test_blocked_plugin", METHOD_PLUGIN)
    plugins = load_plugins([name, f"no:{name}"])
    assert "my_method" not in plugins.methods
    assert name not in [o.plugin for o in plugins.loaded]


def test_plugin_whose_import_raises_is_recorded_as_broken(plugin_module):
    name = plugin_module("ssb_test_import_raises", "raise RuntimeError('boom at import')\n")
    plugins = load_plugins([name])
    assert len(plugins.broken) == 1
    broken = plugins.broken[0]
    assert broken.origin.plugin == name
    assert "RuntimeError" in broken.error and "boom at import" in broken.error
    assert name not in [o.plugin for o in plugins.loaded]
    # the built-ins still load, and lookups mention the broken plugin
    assert plugins.methods.names() == BUILTIN_METHODS
    assert plugins.environments.names() == BUILTIN_ENVS
    assert plugins.methods.broken == plugins.broken
    with pytest.raises(UnknownNameError, match="boom at import"):
        plugins.methods.entry("missing_method")


def test_plugin_with_a_missing_dependency_is_recorded_as_broken(plugin_module):
    name = plugin_module("ssb_test_missing_dep", "import ssb_no_such_dependency_xyz\n")
    plugins = load_plugins([name])
    assert [b.origin.plugin for b in plugins.broken] == [name]
    assert "ssb_no_such_dependency_xyz" in plugins.broken[0].error
    assert plugins.methods.names() == BUILTIN_METHODS


def test_plugin_whose_hook_raises_is_recorded_as_broken(plugin_module):
    source = """
    from ssilbench.api import hookimpl


    @hookimpl
    def ssilbench_register_environments(registry):
        raise ValueError("hook exploded")
    """
    name = plugin_module("ssb_test_hook_raises", source)
    plugins = load_plugins([name])
    assert [b.origin.plugin for b in plugins.broken] == [name]
    assert "ValueError: hook exploded" in plugins.broken[0].error
    assert name not in [o.plugin for o in plugins.loaded]
    assert plugins.environments.names() == BUILTIN_ENVS
    assert plugins.methods.names() == BUILTIN_METHODS


def test_collision_with_a_builtin_is_a_plugin_error(plugin_module):
    source = """
    from ssilbench.api import hookimpl


    @hookimpl
    def ssilbench_register_methods(registry):
        registry.add("bc", "collections:OrderedDict", "another bc")
    """
    name = plugin_module("ssb_test_collision", source)
    with pytest.raises(PluginError) as info:
        load_plugins([name])
    message = str(info.value)
    assert "plugin 'baselines'" in message
    assert f"plugin '{name}'" in message


def test_p_of_a_module_that_does_not_exist_is_a_plugin_error():
    with pytest.raises(PluginError, match="does_not_exist_mod"):
        load_plugins(["does_not_exist_mod"])


def test_p_of_a_module_that_does_not_exist_is_reported():
    # Whatever the outcome (error or broken entry), the name must reach the user.
    try:
        plugins = load_plugins(["does_not_exist_mod"])
    except PluginError as exc:
        assert "does_not_exist_mod" in str(exc)
    else:
        assert [b.origin.plugin for b in plugins.broken] == ["does_not_exist_mod"]
        assert "not importable" in plugins.broken[0].error


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ([], ([], [])),
        (["maze"], (["maze"], [])),
        (["a,b", "no:maze, c"], (["a", "b", "c"], ["maze"])),
        (["no:maze,no:baselines"], ([], ["maze", "baselines"])),
        ([" , ", ""], ([], [])),
        (["pkg.mod"], (["pkg.mod"], [])),
    ],
)
def test_parse_plugin_flags(flags, expected):
    assert parse_plugin_flags(flags) == expected


@pytest.mark.parametrize("flags", [["no:"], ["maze,no:"], [" no: "]])
def test_parse_plugin_flags_rejects_bare_no(flags):
    with pytest.raises(UsageError, match="needs a plugin name"):
        parse_plugin_flags(flags)


def _clean_env() -> dict[str, str]:
    import os

    env = dict(os.environ)
    env.pop(AUTOLOAD_ENV, None)
    env.pop(EXTRA_PLUGINS_ENV, None)
    return env


def test_discovery_does_not_import_torch():
    code = (
        "from ssilbench.plugins import load_plugins; p = load_plugins(); "
        "import sys; print('torch' in sys.modules, len(p.methods.names()))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_clean_env(), timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", str(len(BUILTIN_METHODS))]


def test_cli_list_json_does_not_import_torch(tmp_path: Path):
    code = (
        "import sys; from ssilbench.cli import main; "
        "sys.argv = ['ssilbench', 'list', '--json']; main()"
    )
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        env=_clean_env(),
        cwd=tmp_path,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    listing = json.loads(result.stdout)
    names = {(e["kind"], e["name"]) for e in listing["entries"]}
    assert ("method", "vm_idm") in names and ("environment", "maze") in names
    assert listing["broken"] == []
    imported = [
        line.rsplit("|", 1)[-1].strip()
        for line in result.stderr.splitlines()
        if line.startswith("import time:")
    ]
    assert "ssilbench.plugins" in imported  # -X importtime did report the imports
    assert not [m for m in imported if m == "torch" or m.startswith("torch.")]
