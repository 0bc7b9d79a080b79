"""Registers the ``procgen`` environment family; imports nothing heavy so listing stays fast."""

from ssilbench.api import registers

ssilbench_register_environments = registers(
    (
        "procgen",
        "ssilbench_procgen.environment:ProcgenEnvironment",
        "The 16 Procgen games (64x64 pixels, 15 actions) with imported or collected expert "
        "data; needs the 'procgen' extra.",
    ),
)
