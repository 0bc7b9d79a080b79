"""Registers the example's method and environment.

Targets are lazy ``"module:attr"`` strings: this module imports nothing but the hook marker,
so ``ssilbench list`` never imports torch or gymnasium on the example's account.
"""

from ssilbench.api import hookimpl

SSILBENCH_API = "1.2"  # the contract this plugin was written against (ssilbench.api.API_VERSION)


@hookimpl
def ssilbench_register_methods(registry):
    registry.add(
        "nearest_idm",
        "ssilbench_example.nearest:NearestIDM",
        "Each D_U transition takes the action of its nearest D_L transition; BC on the result.",
    )


@hookimpl
def ssilbench_register_environments(registry):
    registry.add(
        "corridor",
        "ssilbench_example.corridor:CorridorEnvironment",
        "Walk right along a line of cells to the goal (short: 8 cells, long: 32).",
    )
