"""Registers the ``libero10`` environment family; imports nothing heavy so listing stays fast."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ssilbench.api import hookimpl

if TYPE_CHECKING:
    from ssilbench.api import BoundRegistry


@hookimpl
def ssilbench_register_environments(registry: BoundRegistry) -> None:
    registry.add(
        "libero10",
        "ssilbench_libero.environment:Libero10Environment",
        "LIBERO-10: ten long-horizon robot manipulation tasks (128x128 agent-view and wrist "
        "cameras, 7-D continuous actions) with imported HDF5 demonstrations; needs the "
        "'libero' extra.",
    )
