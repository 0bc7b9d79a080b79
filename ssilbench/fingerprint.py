"""Fingerprints of the code a plugin runs: its import packages' Python files.

A plugin's version says which release is installed, not what its files hold: an editable
install, a working tree on ``PYTHONPATH`` or a patched copy runs other code under the same
version. Runs, stage-cache keys and generated datasets therefore also record a fingerprint
of the plugin's files (``docs/guide.md``, "Code changes, versions and results revisions").

The files are found without importing the package (``importlib.util.find_spec``), so an
installed distribution (site-packages), an editable install and a module on ``PYTHONPATH``
are read alike, and hashed once per process.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
from collections.abc import Iterable
from pathlib import Path

CORE_PACKAGE = "ssilbench"
"""The core's own package: versioned by its release and the run spec's version, never
fingerprinted (every edit of the core would otherwise make every run new)."""

UNKNOWN = "unknown"
"""The fingerprint of a package whose files cannot be found (a frozen or zipped import)."""


def top_package(module: str) -> str:
    """The import package a dotted module or ``"module:attr"`` target belongs to."""
    return module.split(":", 1)[0].split(".", 1)[0].strip()


def source_files(package: str) -> list[tuple[str, Path]]:
    """``(path relative to the package, file)`` of every ``.py`` file of ``package`` (a
    single module: its file), sorted; empty when it cannot be found."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    if spec.submodule_search_locations:
        found: dict[str, Path] = {}
        for location in spec.submodule_search_locations:
            root = Path(location)
            for path in root.rglob("*.py"):
                if "__pycache__" not in path.parts:
                    found.setdefault(path.relative_to(root).as_posix(), path)
        return sorted(found.items())
    if spec.origin and spec.origin.endswith(".py"):
        return [(Path(spec.origin).name, Path(spec.origin))]
    return []


@functools.cache
def package_fingerprint(package: str) -> str:
    """16 hex digits of the sha256 of the package's ``.py`` files (their paths within the
    package and their bytes), or :data:`UNKNOWN`. Cached for the process: a process plans
    and runs with the code it loaded."""
    files = source_files(package)
    if not files:
        return UNKNOWN
    digest = hashlib.sha256()
    for relative, path in files:
        data = path.read_bytes()
        digest.update(f"{relative}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()[:16]


def code_fingerprint(modules: Iterable[str]) -> str:
    """The fingerprint of the packages that ``modules`` (dotted names or ``"module:attr"``
    targets) belong to, the core's excluded: one package's own fingerprint, several
    packages' combined."""
    packages = sorted({top_package(m) for m in modules} - {CORE_PACKAGE, ""})
    prints = [package_fingerprint(p) for p in packages]
    if len(prints) == 1:
        return prints[0]
    if not prints:
        return UNKNOWN
    joined = ",".join(f"{p}={f}" for p, f in zip(packages, prints, strict=True))
    return hashlib.sha256(joined.encode()).hexdigest()[:16]
