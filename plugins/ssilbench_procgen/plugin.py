"""Registers the ``procgen`` environment family; imports nothing heavy so listing stays fast."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ssilbench.api import hookimpl

if TYPE_CHECKING:
    from ssilbench.api import BoundRegistry


@hookimpl
def ssilbench_register_environments(registry: BoundRegistry) -> None:
    registry.add(
        "procgen",
        "ssilbench_procgen.environment:ProcgenEnvironment",
        "The 16 Procgen games (64x64 pixels, 15 actions) with imported or collected expert "
        "data; needs the 'procgen' extra.",
    )
