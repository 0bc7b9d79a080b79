"""Registers the ``libero10`` environment family; imports nothing heavy so listing stays fast."""

from ssilbench.api import registers

# 1: libero10:all is one multitask task; evaluation follows the paper's 100 rollouts.
RESULTS_REVISION = 1

ssilbench_register_environments = registers(
    (
        "libero10",
        "ssilbench_libero.environment:Libero10Environment",
        "LIBERO-10: ten long-horizon robot manipulation tasks (128x128 agent-view and wrist "
        "cameras, 7-D continuous actions) with imported HDF5 demonstrations; needs the "
        "'libero' extra.",
    ),
)
