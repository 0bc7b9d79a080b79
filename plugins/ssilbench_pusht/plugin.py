"""Registers the ``pusht`` environment family; imports nothing heavy so listing stays fast."""

from ssilbench.api import registers

ssilbench_register_environments = registers(
    (
        "pusht",
        "ssilbench_pusht.environment:PushTEnvironment",
        "Push-T (gym-pusht): push a T block onto its goal from 96x96 pixels and the agent's "
        "position, continuous (x, y) targets; demonstrations imported from a diffusion-policy "
        "replay zarr; needs the 'pusht' extra.",
    ),
)
