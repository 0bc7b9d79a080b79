"""Plugin discovery: entry points of the ``ssilbench`` group, ``-p`` modules, block lists.

Autoloading can be switched off with ``SSILBENCH_DISABLE_PLUGIN_AUTOLOAD=1``; then only the
plugins named with ``-p NAME`` (an entry-point name or a module path) are loaded. Extra
plugin modules can also be listed in ``SSILBENCH_PLUGINS`` (comma separated). A plugin whose
import or registration raises is recorded as broken, never silently dropped, and the other
plugins keep working.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import io
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from types import ModuleType
from typing import Any

import pluggy

from ssilbench import hookspecs, plugin_checks
from ssilbench.errors import PluginError, UsageError
from ssilbench.registry import BoundRegistry, BrokenPlugin, Origin, Registry

ENTRY_POINT_GROUP = "ssilbench"
AUTOLOAD_ENV = "SSILBENCH_DISABLE_PLUGIN_AUTOLOAD"
EXTRA_PLUGINS_ENV = "SSILBENCH_PLUGINS"

_HOOKS = {
    "methods": "ssilbench_register_methods",
    "environments": "ssilbench_register_environments",
    "architectures": "ssilbench_register_architectures",
    "loggers": "ssilbench_register_loggers",
}

# The loggers ssilbench ships, registered like a plugin's (origin "ssilbench").
BUILTIN_LOGGERS = {
    "tensorboard": ("ssilbench.loggers.tensorboard:TensorBoardLogger",
                    "TensorBoard event files under LOG_DIR/tensorboard (no server needed)"),
    "wandb": ("ssilbench.loggers.external:WandbLogger",
              "Weights & Biases, offline, under LOG_DIR/wandb (extra [wandb])"),
    "mlflow": ("ssilbench.loggers.external:MlflowLogger",
               "MLflow file store LOG_DIR/mlruns (extra [mlflow])"),
}  # fmt: skip


@dataclass
class Plugins:
    """Everything the loaded plugins registered, plus the ones that failed."""

    methods: Registry[Any]
    environments: Registry[Any]
    architectures: Registry[Any]
    loaded: list[Origin] = field(default_factory=list)
    broken: list[BrokenPlugin] = field(default_factory=list)
    loggers: Registry[Any] = field(default_factory=lambda: _loggers())
    blocked: list[tuple[str, EntryPoint | str]] = field(default_factory=list)
    """The plugins ``-p no:NAME`` kept from loading: (name, entry point or module)."""
    _blocked_names: dict[tuple[str, str], str] | None = field(default=None, repr=False)

    def blocked_provider(self) -> dict[tuple[str, str], str]:
        """(kind, name) -> the blocked plugin that registers it. The blocked plugins'
        registrations are read on first use only, that is when a name is asked for and
        not found, so that the message can say which ``-p no:NAME`` hides it."""
        if self._blocked_names is None:
            self._blocked_names = {}
            for plugin, source in self.blocked:
                for kind, name in _registrations(plugin, source):
                    self._blocked_names.setdefault((kind, name), plugin)
        return self._blocked_names

    def registries(self) -> dict[str, Registry[Any]]:
        return {
            "methods": self.methods,
            "environments": self.environments,
            "architectures": self.architectures,
        }

    def hooked(self) -> dict[str, Registry[Any]]:
        """Every registry a hook fills: :meth:`registries` and the loggers'."""
        return {**self.registries(), "loggers": self.loggers}

    def versions(self) -> dict[str, str]:
        """Plugin name -> distribution version and results revision (for run provenance)."""
        return {o.plugin: o.release for o in self.loaded}


def parse_plugin_flags(flags: Iterable[str]) -> tuple[list[str], list[str]]:
    """Split ``-p`` values into (modules to load, names to block)."""
    extra: list[str] = []
    blocked: list[str] = []
    for flag in flags:
        for item in filter(None, (f.strip() for f in flag.split(","))):
            if item.startswith("no:"):
                if not item[3:]:
                    raise UsageError("'-p no:' needs a plugin name, e.g. '-p no:maze'.")
                blocked.append(item[3:])
            else:
                extra.append(item)
    return extra, blocked


def load_plugins(flags: Sequence[str] = ()) -> Plugins:
    """Discover, import and register plugins according to ``-p`` flags and the environment."""
    from ssilbench import api  # the base classes the registries check against

    extra, blocked = parse_plugin_flags(flags)
    extra += [m.strip() for m in os.environ.get(EXTRA_PLUGINS_ENV, "").split(",") if m.strip()]
    autoload = os.environ.get(AUTOLOAD_ENV, "").strip().lower() not in ("1", "true", "yes")

    plugins = Plugins(
        methods=Registry("method", api.Method),
        environments=Registry("environment", api.Environment),
        architectures=Registry("architecture", api.Architecture),
    )
    pm = pluggy.PluginManager(ENTRY_POINT_GROUP)
    pm.add_hookspecs(hookspecs)

    eps = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    candidates: list[tuple[str, EntryPoint | str]] = []
    if autoload:
        candidates += [(name, ep) for name, ep in eps.items()]
    for item in extra:
        if item in eps and (item, eps[item]) not in candidates:
            candidates.append((item, eps[item]))
        elif item not in eps:
            candidates.append((item, item))

    for name, source in candidates:
        if name in blocked:
            plugins.blocked.append((name, source))
            continue
        origin = _origin(name, source)
        try:
            # Not isinstance(source, EntryPoint): once a package that imports the
            # importlib_metadata backport is loaded (mlflow does), entry points come back as the
            # backport's class.
            module = _import(source) if isinstance(source, str) else source.load()
            if pm.is_registered(module):
                continue  # already loaded under its entry-point name
            pm.register(module, name=name)
        except PluginError:
            raise  # a -p name that is not importable at all is the user's typo, not a plugin bug
        except Exception as exc:
            plugins.broken.append(BrokenPlugin(origin, f"{type(exc).__name__}: {exc}"))
            continue
        try:
            origin = _with_revision(origin, module)
            problem = _contract_problem(pm, module, source)
            if problem is None:
                _register(pm, module, origin, plugins)
        except PluginError:
            raise
        except Exception as exc:
            problem = f"{type(exc).__name__}: {exc}"
        if problem is not None:
            pm.unregister(module)
            plugins.broken.append(BrokenPlugin(origin, problem))
            continue
        plugins.loaded.append(origin)

    for registry in plugins.hooked().values():
        registry.broken = plugins.broken
        registry.blocked = plugins.blocked_provider
    return plugins


def _contract_problem(pm: pluggy.PluginManager, module: ModuleType, source: Any) -> str | None:
    """Why a registered plugin module cannot be used (:mod:`ssilbench.plugin_checks`): the
    API version it needs, its distribution's requirement on ssilbench, its hooks."""
    from ssilbench.api import API_VERSION

    marked = {caller.name for caller in pm.get_hookcallers(module) or []}
    return (
        plugin_checks.api_problem(module, API_VERSION)
        or plugin_checks.requirement_problem(getattr(source, "dist", None))
        or plugin_checks.hook_problem(module, list(_HOOKS.values()), marked)
    )


def _registrations(plugin: str, source: EntryPoint | str) -> list[tuple[str, str]]:
    """The (kind, name) pairs a plugin registers, or none where it does not load."""
    found: list[tuple[str, str]] = []
    try:
        module = importlib.import_module(source) if isinstance(source, str) else source.load()
        pm = pluggy.PluginManager(ENTRY_POINT_GROUP)
        pm.add_hookspecs(hookspecs)
        pm.register(module, name=plugin)
        for key, hook_name in _HOOKS.items():
            kind = key.removesuffix("s")
            for impl in getattr(pm.hook, hook_name).get_hookimpls():
                impl.function(registry=_Collector(kind, found))
    except Exception:  # noqa: BLE001 - a blocked plugin that does not load hides nothing
        return []
    return found


class _Collector(BoundRegistry):
    """Collects the names a blocked plugin registers."""

    def __init__(self, kind: str, found: list[tuple[str, str]]) -> None:
        self._kind = kind
        self._found = found

    def add(self, name: str, target: str, description: str = "") -> None:
        self._found.append((self._kind, name))


def _loggers() -> Registry[Any]:
    """The loggers' registry with the built-in ones."""
    from ssilbench.loggers.base import RunLogger

    registry: Registry[Any] = Registry("logger", RunLogger)
    for name, (target, description) in BUILTIN_LOGGERS.items():
        registry.add(name, target, description, Origin("ssilbench"))
    return registry


def _import(module: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name == module:
            raise PluginError(
                f"Plugin module '{module}' named with -p or {EXTRA_PLUGINS_ENV} is not "
                "importable: check the name and that its package is installed."
            ) from exc
        raise


def _origin(name: str, source: EntryPoint | str) -> Origin:
    module = source if isinstance(source, str) else source.value.partition(":")[0].strip()
    if not isinstance(source, str) and source.dist is not None:
        return Origin(name, source.dist.metadata["Name"], source.dist.version, module=module)
    return Origin(name, module=module)


def _with_revision(origin: Origin, module: ModuleType) -> Origin:
    """``origin`` with the module's ``RESULTS_REVISION`` (a positive int), if it has one."""
    revision = getattr(module, "RESULTS_REVISION", None)
    if revision is None:
        return origin
    if isinstance(revision, bool) or not isinstance(revision, int) or revision < 1:
        raise ValueError(f"RESULTS_REVISION must be a positive int, not {revision!r}")
    return dataclasses.replace(origin, revision=revision)


def _register(
    pm: pluggy.PluginManager, module: ModuleType, origin: Origin, plugins: Plugins
) -> None:
    # Each hook implementation is called on its own so that every entry is attributed to
    # the plugin that registered it. Entries are staged and added only when all of the
    # plugin's hooks succeeded, so a plugin that fails half-way leaves nothing behind.
    registries = plugins.hooked()
    staged: list[tuple[Registry[Any], str, str, str]] = []
    for key, hook_name in _HOOKS.items():
        for impl in getattr(pm.hook, hook_name).get_hookimpls():
            if impl.plugin is module:
                impl.function(registry=_Staging(registries[key], staged))
    for registry, name, target, description in staged:
        registry.add(name, target, description, origin)


class _Staging(BoundRegistry):
    """Collects a plugin's registrations until all its hooks have run."""

    def __init__(self, registry: Registry[Any], staged: list) -> None:
        self._registry = registry
        self._staged = staged

    def add(self, name: str, target: str, description: str = "") -> None:
        self._staged.append((self._registry, name, target, description))


def import_optional(module: str, needed_by: str, hint: str) -> ModuleType:
    """Import a plugin's optional dependency (a simulator), or raise a PluginError that says
    who needs it (``needed_by``: "The pusht environment needs") and how to install it.
    Simulators greet on stdout or warn on stderr when imported; that output concerns nobody
    here and is dropped."""
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            return importlib.import_module(module)
    except ImportError as exc:
        raise PluginError(f"{needed_by} the module '{module}' ({exc}). {hint}") from None


def available(load: Callable[[], object]) -> bool:
    """Whether ``load`` (e.g. a plugin's wrapper around :func:`import_optional`) succeeds."""
    try:
        load()
    except PluginError:
        return False
    return True
