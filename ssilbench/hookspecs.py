"""Hook specifications: what a plugin may provide.

A plugin is a module (usually named by an entry point in the ``ssilbench`` group) holding
functions marked with :data:`ssilbench.api.hookimpl`. Each hook receives a registry bound to
the calling plugin; entries are lazy ``"module:attr"`` strings so that discovering and
listing plugins never imports torch models or simulators.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from ssilbench.registry import BoundRegistry

hookspec = pluggy.HookspecMarker("ssilbench")


@hookspec
def ssilbench_register_methods(registry: BoundRegistry) -> None:
    """Register SSIL methods.

    Call ``registry.add(name, "package.module:MethodClass", description)`` once per method.
    The target must be a subclass of :class:`ssilbench.api.Method`; it is imported only when
    a run needs it. Method names are snake_case and unique across all plugins.
    """


@hookspec
def ssilbench_register_environments(registry: BoundRegistry) -> None:
    """Register environment families.

    Call ``registry.add(family, "package.module:EnvironmentClass", description)`` once per
    family (``maze``, ``procgen``, ...). The target must be a subclass of
    :class:`ssilbench.api.Environment`; users address its tasks as ``family:task`` and
    ``family:all``.
    """


@hookspec
def ssilbench_register_architectures(registry: BoundRegistry) -> None:
    """Register network architectures that methods can be built from.

    Call ``registry.add(name, "package.module:ArchitectureClass", description)``. The target
    must be a subclass of :class:`ssilbench.api.Architecture`; methods select it by name
    through their ``arch`` config field, so one method module serves every architecture.
    """


@hookspec
def ssilbench_register_loggers(registry: BoundRegistry) -> None:
    """Register loggers: where a sweep sends each recorded run besides the results store.

    Call ``registry.add(name, "package.module:LoggerClass", description)``. The target must
    be a subclass of :class:`ssilbench.api.RunLogger`; ``ssilbench run --log NAME`` builds
    one instance with the log directory (``--log-dir``) and calls its ``run_started``,
    ``run_finished`` (a :class:`ssilbench.api.LoggedRun`: numbers, evaluations, curves) and
    ``close`` in the process that writes the store. Built in: ``tensorboard``, ``wandb``,
    ``mlflow``.
    """
