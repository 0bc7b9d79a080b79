"""Walk-throughs of docs/plugin-authors.md as installed plugins, for
``tests/repo/test_docs_examples.py``: the example distribution of ``docs/plugin-example`` laid
out as pip installs it, and the files a page's ``file`` blocks hold."""

from __future__ import annotations

import contextlib
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "plugin-example"


@contextlib.contextmanager
def walkthrough_installed(site: Path, files: list[tuple[str, str]]) -> Iterator[None]:
    """The example distribution laid out in ``site`` as pip installs it, and ``files``
    written there, importable for the block (modules imported from there are forgotten
    after it)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    shutil.copytree(EXAMPLE / "ssilbench_example", site / "ssilbench_example")
    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]
    info = site / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir()
    requires = "".join(f"Requires-Dist: {r}\n" for r in project.get("dependencies", []))
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\n"
                                   f"Version: {project['version']}\n{requires}")  # fmt: skip
    entries = project["entry-points"]["ssilbench"]
    (info / "entry_points.txt").write_text(
        "[ssilbench]\n" + "".join(f"{k} = {v}\n" for k, v in entries.items())
    )
    for path, text in files:
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_text(text + "\n")
    sys.path.insert(0, str(site))
    try:
        yield
    finally:
        sys.path.remove(str(site))
        for name, module in list(sys.modules.items()):
            if str(getattr(module, "__file__", None) or "").startswith(str(site)):
                del sys.modules[name]
