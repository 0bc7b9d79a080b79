"""docs/architecture.md names only modules that exist, and lists every core module."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
ENTRY = re.compile(r"^(?P<indent> *)(?P<name>[\w.-]+/?)(?:\s{2,}|$)")


def layout_paths() -> list[Path]:
    """The files and folders of the page's layout block: two spaces of indentation per
    level, folders end with '/'."""
    text = DOC.read_text()
    block = text.split("## Layout", 1)[1].split("```", 2)[1]
    stack: list[tuple[int, str]] = []
    out = []
    for line in block.splitlines():
        match = ENTRY.match(line)
        if not match or not line.strip():
            continue
        indent, name = len(match["indent"]), match["name"]
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = Path(*[s for _, s in stack], name.rstrip("/"))
        out.append(path)
        if name.endswith("/"):
            stack.append((indent, name.rstrip("/")))
    return out


def test_every_path_the_layout_names_exists():
    paths = layout_paths()
    assert len(paths) > 40
    missing = [str(p) for p in paths if not (ROOT / p).exists()]
    assert missing == [], f"docs/architecture.md names paths that do not exist: {missing}"


def test_every_module_the_text_names_exists():
    text = DOC.read_text()
    dotted = set(re.findall(r"`(ssilbench(?:\.[a-z_]+)+)", text))
    missing = []
    for name in sorted(dotted):
        parts = name.split(".")
        # The longest prefix that is a module; the rest may be an attribute of it.
        found = any(
            (ROOT / Path(*parts[:k])).with_suffix(".py").exists()
            or (ROOT / Path(*parts[:k]) / "__init__.py").exists()
            for k in range(len(parts), 1, -1)
        )
        if not found:
            missing.append(name)
    assert dotted and missing == [], f"docs/architecture.md names missing modules: {missing}"


def test_the_layout_lists_every_core_module():
    listed = {str(p) for p in layout_paths()}
    modules = sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "ssilbench").rglob("*.py")
        if p.name not in ("__init__.py", "__main__.py")
    )
    unlisted = [m for m in modules if m not in listed]
    assert unlisted == [], f"docs/architecture.md's layout leaves out: {unlisted}"
