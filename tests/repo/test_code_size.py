"""The code stays readable in pieces: no module of the core (``ssilbench/``), the plugins,
the benchmarks or the tests is over 500 lines and no function (method, nested function) over
80, with no exception. A function's length runs from
its ``def`` line to its last line; its decorators (a command's click options) are
declarations and not counted."""

from __future__ import annotations

import ast
from pathlib import Path

MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80
REPO = Path(__file__).resolve().parents[2]
# Each tree and the fewest modules it has, so that a moved folder fails instead of passing empty.
TREES = {"ssilbench": 100, "plugins": 40, "benchmarks": 10, "tests": 100}


def oversized(source: str, name: str) -> list[str]:
    """What in one module's ``source`` is over the limits, one line each."""
    found = []
    lines = len(source.splitlines())
    if lines > MAX_MODULE_LINES:
        found.append(f"{name}: {lines} lines (at most {MAX_MODULE_LINES})")

    def visit(node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                qualified = f"{scope}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    length = child.end_lineno - child.lineno + 1  # type: ignore[operator]
                    if length > MAX_FUNCTION_LINES:
                        found.append(f"{name}:{child.lineno}: {qualified} is {length} lines "
                                     f"(at most {MAX_FUNCTION_LINES})")  # fmt: skip
                visit(child, qualified + ".")
            else:
                visit(child, scope)

    visit(ast.parse(source), "")
    return found


def test_no_module_is_over_500_lines_nor_any_function_over_80():
    found = []
    for tree, fewest in TREES.items():
        modules = sorted((REPO / tree).rglob("*.py"))
        assert len(modules) >= fewest, f"{tree}/ has {len(modules)} modules"  # walked, not empty
        for path in modules:
            found += oversized(path.read_text(encoding="utf-8"), str(path.relative_to(REPO)))
    advice = "split these (a module by what it does, a function by its steps):\n"
    assert not found, advice + "\n".join(found)


def _function(name: str, lines: int, indent: str = "") -> str:
    """A function of exactly ``lines`` lines, its ``def`` line included."""
    body = "".join(f"{indent}    x{i} = {i}\n" for i in range(lines - 2))
    return f"{indent}def {name}():\n{body}{indent}    return 0\n"


def test_the_check_names_each_long_module_and_function_and_passes_those_at_the_limit():
    at_limit = _function("fits", MAX_FUNCTION_LINES)
    decorated = "@click.option('--a')\n" * 30 + _function("command", MAX_FUNCTION_LINES)
    assert oversized(at_limit + decorated, "ok.py") == []

    nested = _function("outer", 3)[: -len("    return 0\n")] + _function("inner", 81, "    ")
    method = "class Holder:\n" + _function("method", 90, "    ")
    source = _function("long", 81) + nested + "    return 0\n" + method
    found = oversized(source, "m.py")
    assert found == [
        "m.py:1: long is 81 lines (at most 80)",
        "m.py:82: outer is 84 lines (at most 80)",
        "m.py:84: outer.inner is 81 lines (at most 80)",
        "m.py:167: Holder.method is 90 lines (at most 80)",
    ]

    filler = "x = 0\n" * MAX_MODULE_LINES
    assert oversized(filler, "full.py") == []
    assert oversized(filler + "x = 1\n", "long.py") == ["long.py: 501 lines (at most 500)"]
