"""Registers the ``pusht`` environment family; imports nothing heavy so listing stays fast."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ssilbench.api import hookimpl

if TYPE_CHECKING:
    from ssilbench.api import BoundRegistry


@hookimpl
def ssilbench_register_environments(registry: BoundRegistry) -> None:
    registry.add(
        "pusht",
        "ssilbench_pusht.environment:PushTEnvironment",
        "Push-T (gym-pusht): push a T block onto its goal from 96x96 pixels and the agent's "
        "position, continuous (x, y) targets; demonstrations imported from a diffusion-policy "
        "replay zarr; needs the 'pusht' extra.",
    )
