"""The boundaries between the core and the built-in plugins, read from the sources with ``ast``.

- A plugin imports its own package, ``ssilbench.api`` and ``ssilbench.kit``: never another
  plugin, never another core module (docs/plugin-authors.md, "What a plugin may import"),
  and it registers lazy targets in its own package only.
- The core's tests (``tests/*.py``) import no built-in plugin: they reach plugins through the
  registries, by name, as users do.
- A plugin's tests (``tests/plugins/<name>/``) import their own plugin, the public modules
  and ``ssilbench.testing``.

Every import counts, wherever it is (inside functions and ``TYPE_CHECKING`` blocks too).
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLUGINS = REPO / "plugins"
TESTS = REPO / "tests"
PLUGIN_TESTS = TESTS / "plugins"

PUBLIC = ("ssilbench.api", "ssilbench.kit")
"""What a plugin may import from the core."""
PUBLIC_FOR_TESTS = (*PUBLIC, "ssilbench.testing")
"""What a plugin's tests may import from the core."""

BUILT_IN = sorted(p.name for p in PLUGINS.iterdir() if (p / "__init__.py").is_file())
"""The built-in plugin packages (``ssilbench_maze``, ...)."""


def imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, module) of every absolute import in a file; ``from package import name``
    yields ``package.name`` as well, since the name may be a module."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module
            if node.module in ("ssilbench", *BUILT_IN):
                for alias in node.names:
                    yield node.lineno, f"{node.module}.{alias.name}"


def package_of(module: str) -> str:
    return module.split(".")[0]


def core_module_allowed(module: str, allowed: tuple[str, ...]) -> bool:
    """Whether ``module`` (a core import) is one of ``allowed`` (not a submodule: those are
    the core's own), or the package itself in a ``from ssilbench import api`` (whose names
    are checked one by one)."""
    return module == "ssilbench" or module in allowed


def relative(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def violations(paths: list[Path], own: str | None, allowed: tuple[str, ...]) -> list[str]:
    """Imports of another built-in plugin, or of a core module outside ``allowed`` (None:
    any core module may be imported), in ``paths``; ``own`` is the plugin package they may
    import freely."""
    found = []
    for path in paths:
        for line, module in imports(path):
            package = package_of(module)
            if package in BUILT_IN and package != own:
                found.append(f"{relative(path)}:{line} imports {module} (another plugin)")
            elif package == "ssilbench" and allowed and not core_module_allowed(module, allowed):
                found.append(
                    f"{relative(path)}:{line} imports {module} (not one of {', '.join(allowed)})"
                )
    return found


def python_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


EXAMPLE = REPO / "docs" / "plugin-example" / "ssilbench_example"


@pytest.mark.parametrize("package", [*BUILT_IN, "ssilbench_example"])
def test_a_plugin_imports_only_itself_and_the_public_core(package):
    """The built-ins, and the third-party example the plugin authors' guide walks through."""
    folder = EXAMPLE if package == "ssilbench_example" else PLUGINS / package
    found = violations(python_files(folder), package, PUBLIC)
    assert not found, (
        "A plugin imports its own package, ssilbench.api and ssilbench.kit only "
        "(docs/plugin-authors.md, 'What a plugin may import'); look up another plugin's "
        "architecture by name (ctx.architecture, ssilbench.kit.architecture):\n" + "\n".join(found)
    )


@pytest.mark.parametrize("package", BUILT_IN)
def test_a_plugin_registers_targets_in_its_own_package(package):
    found = []
    for path in python_files(PLUGINS / package):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add"
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
                and package_of(node.args[1].value.partition(":")[0]) != package
            ):
                found.append(f"{relative(path)}:{node.lineno} registers {node.args[1].value}")
    assert not found, "\n".join(found)


def test_core_tests_import_no_plugin():
    core_tests = sorted(p for p in TESTS.glob("*.py"))
    found = violations(core_tests, None, ())
    assert not found, (
        "The core's tests reach plugins through the registries (ssilbench.plugins."
        "load_plugins); a test of a plugin's internals belongs in tests/plugins/<name>/:\n"
        + "\n".join(found)
    )


@pytest.mark.parametrize("name", sorted(p.name for p in PLUGIN_TESTS.iterdir() if p.is_dir()))
def test_plugin_tests_import_their_plugin_and_the_public_core(name):
    own = f"ssilbench_{name}"
    assert own in BUILT_IN, f"tests/plugins/{name}/ is named after no built-in plugin"
    assert (PLUGIN_TESTS / name / "__init__.py").is_file(), "pytest needs unique module names"
    found = violations(python_files(PLUGIN_TESTS / name), own, PUBLIC_FOR_TESTS)
    assert not found, (
        f"tests/plugins/{name}/ imports {own}, ssilbench.api, ssilbench.kit and "
        "ssilbench.testing only (other plugins by name, through load_plugins()):\n"
        + "\n".join(found)
    )


def test_every_built_in_plugin_has_its_tests_folder():
    missing = [p for p in BUILT_IN if not (PLUGIN_TESTS / p.removeprefix("ssilbench_")).is_dir()]
    assert not missing, missing


@pytest.mark.parametrize("module", [*PUBLIC_FOR_TESTS])
def test_every_public_name_resolves(module):
    """The public modules gather names from core modules that may move: each must import."""
    public = importlib.import_module(module)
    broken = []
    for name in public.__all__:
        try:
            getattr(public, name)
        except Exception as exc:  # a moved or renamed name: say which and why
            broken.append(f"{name}: {type(exc).__name__}: {exc}")
    assert not broken, f"{module} exports names it cannot import:\n" + "\n".join(broken)
