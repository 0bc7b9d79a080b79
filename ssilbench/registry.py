"""Typed registries of methods, environments and architectures with lazy ``module:attr`` entries."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ssilbench.errors import PluginError, UnknownNameError, UsageError, unknown

T = TypeVar("T")


def lazy_attributes(namespace: dict[str, Any], module_of: dict[str, str]) -> Any:
    """A module-level ``__getattr__`` for the module whose globals are ``namespace``: each
    name of ``module_of`` is imported from its defining module on first access (so that
    importing the module stays light) and kept in ``namespace`` for later accesses."""

    def __getattr__(name: str) -> Any:
        if name in module_of:
            value = getattr(importlib.import_module(module_of[name]), name)
            namespace[name] = value
            return value
        raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")

    return __getattr__


@dataclass(frozen=True)
class Origin:
    """Where a registry entry comes from: the plugin and the distribution that ships it."""

    plugin: str
    distribution: str | None = None
    version: str | None = None
    revision: int | None = None
    """The plugin module's ``RESULTS_REVISION``: bumped by a plugin whose results change
    within one release of its distribution (the built-in plugins share one distribution)."""
    module: str | None = None
    """The plugin module (an entry point's module, or the module path given with ``-p``):
    its import package is the plugin's code (:mod:`ssilbench.fingerprint`)."""

    @property
    def release(self) -> str:
        """``version``, with ``results rN`` appended when the plugin declares a revision: the
        plugin's part of a run's identity."""
        version = self.version or "unversioned"
        return version if self.revision is None else f"{version} results r{self.revision}"

    def describe(self) -> str:
        if self.distribution:
            return f"plugin '{self.plugin}' (distribution {self.distribution} {self.release})"
        return f"plugin '{self.plugin}'"


@dataclass(frozen=True)
class Entry:
    """One registered name; ``target`` is imported only on first use."""

    name: str
    target: str
    description: str
    origin: Origin


@dataclass(frozen=True)
class BrokenPlugin:
    """A plugin whose import raised: kept so that listing and lookups can report it."""

    origin: Origin
    error: str


@dataclass
class Registry(Generic[T]):
    """Names of one kind (``method``, ``environment``, ``architecture``) mapped to lazy targets."""

    kind: str
    base: type
    entries: dict[str, Entry] = field(default_factory=dict)
    broken: list[BrokenPlugin] = field(default_factory=list)
    blocked: Callable[[], dict[tuple[str, str], str]] | None = None
    """(kind, name) -> the plugin ``-p no:NAME`` blocked that registers it (read on first
    use: :meth:`ssilbench.plugins.Plugins.blocked_provider`)."""
    _loaded: dict[str, Any] = field(default_factory=dict)

    def add(self, name: str, target: str, description: str, origin: Origin) -> None:
        if not name or not name.replace("_", "").replace("-", "").isalnum():
            raise PluginError(
                f"{origin.describe()} registers the {self.kind} name {name!r}: names are "
                "letters, digits, '_' and '-' only."
            )
        module, _, attr = target.partition(":")
        if not module.strip() or not attr.strip():
            raise PluginError(
                f"{origin.describe()} registers {self.kind} '{name}' with target {target!r}; "
                "a target is 'package.module:attribute'."
            )
        if name in self.entries:
            other = self.entries[name].origin
            raise PluginError(
                f"Two plugins register the {self.kind} '{name}': {other.describe()} and "
                f"{origin.describe()}. Uninstall one, or block one with '-p no:PLUGIN'."
            )
        self.entries[name] = Entry(name, target, description, origin)

    def names(self) -> list[str]:
        return sorted(self.entries)

    def __contains__(self, name: object) -> bool:
        return name in self.entries

    def entry(self, name: str) -> Entry:
        if name not in self.entries:
            plugin = self.blocked().get((self.kind, name)) if self.blocked else None
            if plugin is not None:
                raise UnknownNameError(
                    f"Unknown {self.kind} '{name}': it is registered by plugin '{plugin}', "
                    f"which is blocked by -p no:{plugin} (drop that flag to use it)."
                )
            hint = ""
            if self.broken:
                hint = (
                    " Some plugins failed to load and may provide it: "
                    + "; ".join(f"{b.origin.describe()}: {b.error}" for b in self.broken)
                    + "."
                )
            raise unknown(self.kind, name, self.entries, hint)
        return self.entries[name]

    def load(self, name: str) -> type[T]:
        """Import and return the class registered under ``name`` (cached)."""
        if name in self._loaded:
            return self._loaded[name]
        entry = self.entry(name)
        module_name, _, attr = entry.target.partition(":")
        try:
            obj: Any = importlib.import_module(module_name)
            for part in attr.split("."):
                obj = getattr(obj, part)
        except Exception as exc:  # the plugin's own code failed: say whose
            raise PluginError(
                f"{entry.origin.describe()} registers {self.kind} '{name}' as "
                f"'{entry.target}', but importing it failed: {type(exc).__name__}: {exc}"
            ) from exc
        if not (isinstance(obj, type) and issubclass(obj, self.base)):
            raise PluginError(
                f"{entry.origin.describe()} registers {self.kind} '{name}' as "
                f"'{entry.target}', which is not a subclass of {self.base.__name__}."
            )
        self._loaded[name] = obj
        return obj

    def create(self, name: str) -> T:
        return self.load(name)()


class BoundRegistry:
    """The view of a registry handed to one plugin's hook: ``add`` records that plugin as origin."""

    def __init__(self, registry: Registry[Any], origin: Origin) -> None:
        self._registry = registry
        self._origin = origin

    def add(self, name: str, target: str, description: str = "") -> None:
        """Register ``name`` as the lazy ``"module:attr"`` target with a one-line description."""
        self._registry.add(name, target, description, self._origin)


def split_env_id(env_id: str) -> tuple[str, str]:
    """``"maze:10x10"`` -> ``("maze", "10x10")``; a bare family means ``family:all``."""
    family, sep, task = env_id.strip().partition(":")
    if not family or (sep and not task):
        raise UsageError(
            f"Malformed environment id {env_id!r}: write 'family:task' or 'family:all', "
            "for example 'maze:10x10'."
        )
    return family, task or "all"
