"""Registers the ring environment and the ring_idm method (lazy targets only)."""

from ssilbench.api import hookimpl


@hookimpl
def ssilbench_register_methods(registry):
    registry.add(
        "ring_idm",
        "ssilbench_ring.method:RingIDM",
        "An IDM trained on D_L labels D_U; a policy is cloned from a subset of the labels.",
    )


@hookimpl
def ssilbench_register_environments(registry):
    registry.add(
        "ring",
        "ssilbench_ring.environment:RingEnvironment",
        "Walk around a ring of cells to the cell opposite the start of the ring.",
    )
