"""The plugin contract stands on nothing of the core's machinery (docs/architecture.md, "The
contracts"):

- its modules (``api``, ``context``, ``env_spec``, ``models``, ``stages``) import, at module
  level, under ``TYPE_CHECKING``, inside a function or as a lazy ``"module"`` target, only
  each other, the errors, the registry, the deprecation warning, and the data and logger
  types that ``ssilbench.api`` documents as re-exported: nothing of ``train/`` or
  ``runner/``;
- nothing those imports reach imports the contract back, so no import circle runs through it;
- the names plugins import from ``ssilbench.api`` and ``ssilbench.kit`` are the very objects
  the core trains with.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "ssilbench"

CONTRACT = {
    "ssilbench.api",
    "ssilbench.context",
    "ssilbench.env_spec",
    "ssilbench.models",
    "ssilbench.stages",
}
FOUNDATION = {"ssilbench.errors", "ssilbench.registry", "ssilbench.deprecation"}
RE_EXPORTED = {
    # module -> the contract's names it defines (ssilbench.api imports them on first use)
    "ssilbench.data.split": ("LabeledView", "UnlabeledView"),
    "ssilbench.data.datasets": ("TransitionStore",),
    "ssilbench.loggers.base": ("RunLogger", "LoggedRun"),
}


def core_modules() -> dict[str, Path]:
    """Every module of the core by dotted name (a package by its own name)."""
    out = {}
    for path in CORE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = core_modules()


def _module_named(name: str) -> str | None:
    """The core module ``name`` is, or is an attribute of (``ssilbench.kit.fit_rows``)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _how(parents: list[ast.AST]) -> str:
    if any(isinstance(p, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) for p in parents):
        return "inside a function"
    for p in parents:
        if isinstance(p, ast.If) and "TYPE_CHECKING" in ast.unparse(p.test):
            return "under TYPE_CHECKING"
    return "at module level"


def imports_of(source: str, package: str) -> dict[str, set[str]]:
    """Core module -> how ``source`` (a module of ``package``) imports it: at module level,
    under TYPE_CHECKING, inside a function, or as a lazy target (a string naming the module,
    or "module:attribute", as ``ssilbench.registry.lazy_attributes`` takes them)."""
    found: dict[str, set[str]] = {}

    def add(name: str | None, how: str) -> None:
        module = _module_named(name) if name else None
        if module is not None:
            found.setdefault(module, set()).add(how)

    def visit(node: ast.AST, parents: list[ast.AST]) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, _how(parents))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                add(full if full in MODULES else base, _how(parents))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            target = node.value.partition(":")[0]
            if "." in target and target in MODULES:  # not the bare name "ssilbench"
                add(target, "as a lazy target")
        for child in ast.iter_child_nodes(node):
            visit(child, [*parents, node])

    visit(ast.parse(source), [])
    return found


def imports_of_module(module: str) -> dict[str, set[str]]:
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    imported = imports_of(path.read_text(), package)
    imported.pop(module, None)
    return imported


@pytest.mark.parametrize("module", sorted(CONTRACT))
def test_the_contract_imports_only_itself_its_foundation_and_what_it_re_exports(module):
    allowed = CONTRACT | FOUNDATION | set(RE_EXPORTED)
    crossings = {
        f"{target} ({', '.join(sorted(how))})"
        for target, how in imports_of_module(module).items()
        if target not in allowed
    }
    assert crossings == set(), (
        f"{module} imports core modules outside the contract: {sorted(crossings)}. Define the "
        "type in the contract (ssilbench/stages.py, ssilbench/models.py), or document it as "
        "re-exported in docs/architecture.md and here."
    )


def test_nothing_the_contract_imports_imports_it_back():
    reached, todo = set(), sorted(CONTRACT)
    while todo:
        module = todo.pop()
        if module in reached:
            continue
        reached.add(module)
        todo.extend(imports_of_module(module))
    back = {
        f"{module} -> {target}"
        for module in sorted(reached - CONTRACT)
        for target in imports_of_module(module)
        if target in CONTRACT
    }
    assert back == set(), f"import circles through the contract: {sorted(back)}"


def test_the_checker_sees_every_kind_of_import():
    source = (
        "from typing import TYPE_CHECKING\n"
        "from ssilbench.errors import UsageError\n"
        "from . import models\n"
        "if TYPE_CHECKING:\n"
        "    from ssilbench.train.loop import StoppingRule\n"
        "def fit():\n"
        "    import ssilbench.runner.worker\n"
        "LAZY = {'Stacked': 'ssilbench.train.batched', 'x': 'ssilbench.data.split:LabeledView'}\n"
        "'''A docstring naming ssilbench.train.memo is no import.'''\n"
    )
    assert imports_of(source, "ssilbench") == {
        "ssilbench.errors": {"at module level"},
        "ssilbench.models": {"at module level"},
        "ssilbench.train.loop": {"under TYPE_CHECKING"},
        "ssilbench.runner.worker": {"inside a function"},
        "ssilbench.train.batched": {"as a lazy target"},
        "ssilbench.data.split": {"as a lazy target"},
    }


def test_the_rule_is_stated_where_the_contract_is_described():
    page = (ROOT / "docs" / "architecture.md").read_text()
    section = page.split("## The contracts", 1)[1].split("\n## ", 1)[0]
    for module in sorted(CONTRACT | set(RE_EXPORTED)):
        path = module.removeprefix("ssilbench.").replace(".", "/") + ".py"
        assert f"`{path}`" in section, f"docs/architecture.md's contract section omits {path}"
    assert "tests/contract/test_contract_imports.py" in section


def test_plugins_and_the_core_share_the_contracts_types():
    import ssilbench.api as api
    import ssilbench.kit as kit
    from ssilbench import stages
    from ssilbench.train import loop, schedule

    for name in ("Stage", "StagePlan", "StageBudget", "StoppingRule"):
        assert getattr(api, name) is getattr(stages, name)
    for name in ("StagePlan", "StageBudget", "StoppingRule", "WarmupLinear"):
        assert getattr(kit, name) is getattr(stages, name)
    assert loop.StoppingRule is stages.StoppingRule
    assert schedule.WarmupLinear is stages.WarmupLinear
    for module, names in RE_EXPORTED.items():
        defining = __import__(module, fromlist=["_"])
        assert all(getattr(api, n) is getattr(defining, n) for n in names)
    assert set(api.__all__) <= set(dir(api)) | set(api._LAZY_TYPES)


def test_importing_the_contract_loads_none_of_the_core_machinery():
    code = (
        "import sys, ssilbench.api, ssilbench.kit\n"
        "from ssilbench.api import Stage, StagePlan, StoppingRule\n"
        "from ssilbench.kit import StageBudget, WarmupLinear\n"
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith(("
        "'ssilbench.train', 'ssilbench.runner', 'ssilbench.data'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)  # fmt: skip
    assert out.stdout.strip() == "[]"
