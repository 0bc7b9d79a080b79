"""Registers lapo and lapo_plus (lazy targets: torch is imported only when a run needs it)."""

from ssilbench.api import hookimpl

# 1: float32 training on CPU in channels-last (memory_format), faster there and not the same
# bits as the contiguous layout runs were recorded with.
RESULTS_REVISION = 1


@hookimpl
def ssilbench_register_methods(registry):
    registry.add(
        "lapo",
        "ssilbench_lapo.lapo:LAPO",
        "Latent IDM + forward model on D_U, latent BC on D_U, decoding head on D_L.",
    )
    registry.add(
        "lapo_plus",
        "ssilbench_lapo.lapo_plus:LAPOPlus",
        "LAPO's stage 1, latent IDM decoded on D_L, then IDM labeling of D_U.",
    )
