"""What a plugin is checked for when it loads, before anything it registers is used.

- **The API version it needs.** A plugin module may declare ``SSILBENCH_API = "1.2"``: it
  was written against version 1.2 of the contract (:data:`ssilbench.api.API_VERSION`) and
  works with every 1.x from 1.2 on. A plugin for another major version, or for a later
  minor one than this ssilbench provides, is refused.
- **Its distribution's requirement on ssilbench** (``dependencies = ["ssilbench>=0.3"]``),
  which pip checks at install time only: a plugin on ``PYTHONPATH``, or a ssilbench
  installed later with ``--no-deps``, may break it.
- **Its hooks.** A function whose name looks like a hook but is none (a misspelling) or a
  hook function that is not marked with ``@hookimpl`` would register nothing, silently.

Each check returns one line saying what is wrong and what to do, or None; the loader then
lists the plugin as broken (``ssilbench list``) and loads the others.
"""

from __future__ import annotations

import re
from importlib import metadata
from types import ModuleType
from typing import Any

from ssilbench.errors import did_you_mean

API_ATTRIBUTE = "SSILBENCH_API"
HOOK_PREFIX = "ssilbench_"
_VERSION = re.compile(r"^(\d+)\.(\d+)$")


def parse_api_version(text: object) -> tuple[int, int] | None:
    """``"1.2"`` -> ``(1, 2)``; None for anything else."""
    match = _VERSION.match(text.strip()) if isinstance(text, str) else None
    return (int(match[1]), int(match[2])) if match else None


def api_problem(module: ModuleType, provided: str) -> str | None:
    """Why the API version the module declares (``SSILBENCH_API``) does not fit the
    ``provided`` one, or None (also when it declares none)."""
    wanted_text = getattr(module, API_ATTRIBUTE, None)
    if wanted_text is None:
        return None
    wanted, have = parse_api_version(wanted_text), parse_api_version(provided)
    assert have is not None, provided
    if wanted is None:
        return (f"{API_ATTRIBUTE} = {wanted_text!r} is not a version: write the API "
                f"version the plugin was written against, e.g. {API_ATTRIBUTE} = "
                f"\"{provided}\"")  # fmt: skip
    if wanted[0] != have[0]:
        newer = wanted[0] > have[0]
        return (
            f"written for ssilbench API {wanted_text}, and this ssilbench provides API "
            f"{provided}: install "
            + (
                f"a ssilbench that provides API {wanted[0]}.x"
                if newer
                else f"a release of the plugin written for API {have[0]}.x"
            )
            + " (or uninstall it, or block it with -p no:PLUGIN)"
        )
    if wanted[1] > have[1]:
        return (
            f"written for ssilbench API {wanted_text}, and this ssilbench provides API "
            f"{provided} only: upgrade ssilbench (or block the plugin with -p no:PLUGIN)"
        )
    return None


def _core_version() -> str | None:
    try:
        return metadata.version("ssilbench")
    except metadata.PackageNotFoundError:
        return None


def requirement_problem(dist: Any) -> str | None:
    """Why the installed ssilbench does not satisfy the requirement on ``ssilbench`` that
    the plugin's distribution ``dist`` (an ``importlib.metadata.Distribution``, or None)
    declares, or None."""
    if dist is None:
        return None
    # Most distributions require no ssilbench (the built-ins are ssilbench): then nothing
    # is parsed, and discovery imports no more than it did.
    texts = [t for t in (dist.requires or []) if t.strip().lower().startswith("ssilbench")]
    installed = _core_version() if texts else None
    if installed is None:
        return None
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    for text in texts:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        if canonicalize_name(requirement.name) != "ssilbench":
            continue
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        if not requirement.specifier.contains(installed, prereleases=True):
            name = dist.metadata["Name"]
            wanted = f"ssilbench{requirement.specifier}"
            return (f"{name} {dist.version} requires {wanted}, and ssilbench {installed} "
                    f"is installed: install a release of {name} made for ssilbench "
                    f"{installed}, or {wanted}")  # fmt: skip
    return None


def hook_problem(module: ModuleType, hooks: list[str], marked: set[str]) -> str | None:
    """Why the module's hook functions would not register what they seem to, or None: a
    function marked as a hook implementation (``marked``: the names pluggy took) that is not
    one of ``hooks``, or an unmarked one named like a registration hook
    (``ssilbench_register_...``) that is none (the closest is suggested); or a hook function
    that is not marked."""
    problems = []
    for name in sorted(vars(module)):
        if not callable(getattr(module, name)):
            continue
        looks_like_one = name.startswith(f"{HOOK_PREFIX}register")
        if name not in hooks and (name in marked or looks_like_one):
            suggestion = did_you_mean(name, hooks).strip() or f"The hooks are {', '.join(hooks)}."
            problems.append(f"'{name}' is not a hook of ssilbench. {suggestion}")
        elif name in hooks and name not in marked:
            problems.append(f"'{name}' is not marked with @ssilbench.api.hookimpl, so it "
                            "registers nothing")  # fmt: skip
    return "; ".join(problems) or None
