"""Registers the UVA architectures and the multitask ``uva`` method (lazy targets)."""

from ssilbench.api import hookimpl

# 1: the reference code's defaults (fused tokens, pooled action head, shared masks, AdamW,
# cosine, EMA, dropout) and VM-IDM paired with the initial video model.
# 2: on libero10 the reference's inputs (agent-view camera and language only) and actions
# (the axis-angle as rotation_6d, positions scaled by their range over D_L).
RESULTS_REVISION = 2


@hookimpl
def ssilbench_register_methods(registry):
    registry.add(
        "uva",
        "ssilbench_uva.uva:UVAMethod",
        "UVA trained on D_L in all five task modes; sampled as a policy or as VM-IDM.",
    )


@hookimpl
def ssilbench_register_architectures(registry):
    registry.add("uva", "ssilbench_uva.architecture:UVA", "Unified video-action model (small).")
    registry.add(
        "uva_base", "ssilbench_uva.architecture:UVABase", "Unified video-action model (paper size)."
    )
