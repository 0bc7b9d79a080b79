"""The core's imports point one way (docs/architecture.md, "Layers"): no import circle among
``ssilbench`` modules, counting imports at module level, under ``if TYPE_CHECKING:`` and
deferred into functions alike; and each layer imports only the layers below it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "ssilbench"

# The shared machinery and the contract stand below every layer of sweeps and results.
BELOW = {"data", "train", "eval", "kit", "loggers", "contract"}
# What each layer may import besides itself and what stands below.
LAYERS = {
    "runs": set(),
    "planning": {"runs"},
    "runner": {"runs", "planning"},
    "leaderboard": {"runs"},
    "studies": {"runs", "planning", "leaderboard"},
    "cli": {"runs", "planning", "runner", "leaderboard", "studies"},
    "harness": {"runs", "planning", "runner", "leaderboard", "studies", "cli"},
}
HARNESS = {"ssilbench.testing", "ssilbench.method_checks"}  # what plugins' tests drive


def modules() -> dict[str, Path]:
    out = {}
    for path in CORE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The core modules ``name`` imports, wherever the import statement stands."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            parts = target.split(".")
            for k in range(len(parts), 1, -1):  # the longest prefix that is a core module
                candidate = ".".join(parts[:k])
                if candidate in known:
                    if candidate != name:
                        found.add(candidate)
                    break
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def layer(module: str) -> str:
    if module in HARNESS:
        return "harness"
    if module == "ssilbench.__main__":  # `python -m ssilbench`: the command itself
        return "cli"
    parts = module.split(".")
    if len(parts) > 2 or (len(parts) == 2 and (CORE / parts[1]).is_dir()):
        return parts[1] if parts[1] in LAYERS or parts[1] in BELOW else "contract"
    return "contract"  # a top-level module of the core: the contract and its helpers


def test_no_import_circle_among_core_modules():
    assert cycles(graph()) == []


def test_each_layer_imports_only_the_layers_below_it():
    crossings = []
    for module, targets in sorted(graph().items()):
        mine = layer(module)
        allowed = (LAYERS.get(mine, set()) | BELOW | {mine}) if mine in LAYERS else BELOW
        crossings += [f"{module} -> {t}" for t in sorted(targets) if layer(t) not in allowed]
    assert crossings == []


def test_the_checks_see_circles_and_crossings():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert layer("ssilbench.runs.store") == "runs"
    assert layer("ssilbench.api") == "contract" and layer("ssilbench.testing") == "harness"
    edges = graph()
    assert "ssilbench.runs.spec" in edges["ssilbench.planning.plan"]  # deferred ones count
    assert "ssilbench.planning.sweepfile" in edges["ssilbench.planning.options"]
