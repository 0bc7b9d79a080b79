"""What UVA reads of a task and how it sizes a window there: the options an environment's
``auto`` settings resolve to (the reference's setup, by profile), its cameras, proprioception
and conditioning vector, and the token counts of one window (``layout_for``)."""

from __future__ import annotations

from ssilbench.api import ConfigError, EnvSpec
from ssilbench_uva.actions import check_representation, model_action_dim
from ssilbench_uva.model import Layout
from ssilbench_uva.options import UVAOptions

# What "auto" becomes on the environments whose UVA setup in the reference code ssilbench
# follows, per profile. The reference (config/task/*.yaml, dataset/*_dataset.py): LIBERO-10
# reads the agent-view camera and the language only, its actions with the rotation as
# rotation_6d, colour-jittered images; Push-T the image only (use_proprioception: null), with
# a random crop and blur. The small profile keeps the CPU-fast setup of before: no
# augmentation, and every input on Push-T. Elsewhere "auto" keeps every input and the
# environment's actions, unaugmented.
REFERENCE_SETUP: dict[str, dict[str, str]] = {
    "libero10": {"inputs": "main", "actions": "rotation_6d", "augment": "colour_jitter"},
    "pusht": {"inputs": "main", "augment": "crop_blur"},
}
SMALL_SETUP: dict[str, dict[str, str]] = {
    "libero10": {"inputs": "main", "actions": "rotation_6d"},
}
FALLBACK = {"inputs": "all", "actions": "native", "augment": "none"}


def resolve(spec: EnvSpec, o: UVAOptions) -> UVAOptions:
    """The options for this task: ``auto`` inputs, actions and augmentation replaced by the
    profile's choice for the environment, the condition input sized for its conditioning
    vector."""
    setups = REFERENCE_SETUP if o.profile == "paper" else SMALL_SETUP
    chosen = {**FALLBACK, **setups.get(spec.env_id.split(":", 1)[0], {})}
    update = {key: chosen[key] for key in FALLBACK if getattr(o, key) == "auto"}
    o = with_condition(spec, o.model_copy(update=update) if update else o)
    check_representation(spec, o.actions)  # type: ignore[arg-type]
    return o


def cameras(spec: EnvSpec, inputs: str = "all") -> list[str]:
    """Image streams of a frame: the main one, then (``inputs=all``) every uint8 image extra."""
    if inputs == "main":
        return ["obs"]
    extra = [
        k for k, (shape, dtype) in spec.extra_obs.items() if len(shape) == 3 and dtype == "uint8"
    ]
    return ["obs", *extra]


def vectors(spec: EnvSpec, inputs: str = "all") -> list[str]:
    """Proprioceptive streams: every 1-D extra (agent position, joint states) but the
    conditioning vector; none with ``inputs=main``."""
    if inputs == "main":
        return []
    cond = conditioning(spec)
    return [k for k, (shape, _) in spec.extra_obs.items()
            if len(shape) == 1 and (cond is None or k != cond[0])]  # fmt: skip


def conditioning(spec: EnvSpec) -> tuple[str, int] | None:
    """The extra a multitask task conditions on (``metadata["conditioning"]["key"]``: a
    per-frame vector, e.g. LIBERO-10's instruction embedding) and its width, or None."""
    declared = spec.metadata.get("conditioning")
    if not isinstance(declared, dict) or declared.get("key") not in spec.extra_obs:
        return None
    key = str(declared["key"])
    return key, int(spec.extra_obs[key][0][0])


def with_condition(spec: EnvSpec, o: UVAOptions) -> UVAOptions:
    """The options with the network's condition input sized for the task's conditioning
    vector (an explicit ``condition_dim`` must agree with it)."""
    cond = conditioning(spec)
    if cond is None:
        return o
    given = getattr(o, "condition_dim", None)
    if given is not None and given != cond[1]:
        raise ConfigError(
            f"uva: {spec.env_id} conditions on '{cond[0]}' vectors of {cond[1]} numbers, "
            f"but arch_options sets condition_dim={given}; leave condition_dim unset."
        )
    return o.model_copy(update={"condition_dim": cond[1]})


def history_frames(spec: EnvSpec, o: UVAOptions) -> int:
    """History frames of a window: ``history``, or as many as future frames (the reference's
    4: the fused layout pairs them); the sequence layout takes fewer where the environment's
    frame stack holds fewer at ``history_stride``."""
    if o.history is not None:
        return o.history
    if o.token_layout == "fused":
        return o.future
    return min(o.future, (spec.frame_stack - 1) // o.history_stride + 1)


def layout_for(spec: EnvSpec, o: UVAOptions) -> Layout:
    """Token counts of a window for this task; refuses image sizes the autoencoder cannot
    downsample evenly, widths the heads do not divide and frame stacks too short for the
    history."""
    if "auto" in (o.inputs, o.actions, o.augment):
        o = resolve(spec, o)
    downsample = 2 ** (len(o.vae_ch_mult) - 1)
    size = (o.image_size, o.image_size) if o.image_size else spec.obs_shape[:2]
    if any(s % downsample for s in size):
        what = "images resized by image_size" if o.image_size else f"{spec.env_id}'s images"
        hint = f" or an image_size divisible by {downsample}" if o.image_size else ""
        raise ConfigError(
            f"uva: {what} of {size[0]}x{size[1]} are not divisible by the "
            f"autoencoder's downsampling {downsample} (vae_ch_mult has {len(o.vae_ch_mult)} "
            f"levels); give arch_options a vae_ch_mult with fewer levels{hint}."
        )
    if o.width % o.heads:
        raise ConfigError(f"uva: width {o.width} is not a multiple of heads {o.heads}.")
    h, w = (s // downsample for s in size)
    history = history_frames(spec, o)
    if o.token_layout == "fused" and history != o.future:
        raise ConfigError(
            f"uva: the fused token layout pairs each future frame with a history frame, but "
            f"there are {history} history frames and {o.future} future ones; set arch_options "
            f"history and future to the same number, or token_layout=sequence."
        )
    span = (history - 1) * o.history_stride + 1
    # A stride reads frames the policy cannot rebuild, and the fused layout needs every
    # history frame it pairs: both need the stack to hold them.
    if (o.history_stride > 1 or o.token_layout == "fused") and spec.frame_stack < span:
        other = ("lower history_stride" if o.history_stride > 1 else
                 "set arch_options history and future to fewer frames")  # fmt: skip
        raise ConfigError(
            f"uva: history_stride={o.history_stride} with {history} history frames reads frames "
            f"t-{span - 1} .. t, {span} frames, but {spec.env_id}'s observations stack "
            f"{spec.frame_stack}; give the environment -o frame_stack={span}, or {other}."
        )
    return Layout(
        history=history,
        future=o.future,
        cameras=len(cameras(spec, o.inputs)),
        patches=h * w,
        latent=o.latent_channels,
        chunk=o.chunk or spec.action_chunk,
        action_dim=model_action_dim(spec, o.actions),  # type: ignore[arg-type]
        proprio_dim=sum(spec.extra_obs[k][0][0] for k in vectors(spec, o.inputs)),
        grid=(h, w),
    )
