"""Registered names looked up from code that runs outside a run's :class:`RunContext`."""

from __future__ import annotations

from ssilbench.api import Architecture


def architecture(name: str) -> Architecture:
    """A fresh instance of the architecture registered as ``name`` by the installed plugins.

    A method asks its run instead (``ctx.architecture(name)``), which honours the plugins the
    command line selected; this lookup is for code outside a run, such as an environment's
    hand-built models or a plugin's tests, and finds whatever plugin provides the name
    (an UnknownNameError lists the registered ones).
    """
    from ssilbench.plugins import load_plugins  # discovery: only when a lookup happens

    return load_plugins().architectures.create(name)
