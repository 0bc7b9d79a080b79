"""UVA as a unified architecture: the shared initialisation (autoencoder, latents, video
pretraining on D_U) and the role model that BC, IDM labeling, VM-IDM and ``uva`` train.

Order of work for one run:

1. the image autoencoder: loaded from a local checkpoint, or trained on D_U's images;
2. every stored image is encoded once into latent tokens (normalised per channel);
3. the network, built under a fixed seed, is pretrained in video-model mode on D_U;
4. the method trains it in its roles on D_L (or on D_U with IDM labels).

Steps 1 and 3 are the same for every method, budget and seed of a task: they are stage-cache
entries keyed by their inputs' content, trained once. Their steps are not part of a run's
step budget, which covers the method's own stages only.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from ssilbench.api import ConfigError, EnvSpec, Policy, RunContext, Stage
from ssilbench.kit import (
    LabeledView,
    RoleModel,
    SamplingPath,
    StageBudget,
    StagePlan,
    StoppingRule,
    UnifiedArchitecture,
    UnlabeledView,
    optimise,
    reuse_or_train,
)
from ssilbench_uva.actions import ActionCodec, check_representation, model_action_dim
from ssilbench_uva.autoencoder import KLAutoencoder
from ssilbench_uva.checkpoints import load_autoencoder, load_backbone
from ssilbench_uva.model import FusedUVANet, Layout, UVANet
from ssilbench_uva.modes import Masks, mode_masks, modes_of
from ssilbench_uva.options import UVABaseOptions, UVAOptions
from ssilbench_uva.training import fit
from ssilbench_uva.windows import Windows, chunk_targets, make_windows

_ENCODE_BATCH = 256


# Environments whose UVA setup in the reference code ssilbench follows when an option is
# "auto": LIBERO-10 (config/task/libero10.yaml: the agent-view camera and the language only,
# actions with the rotation as rotation_6d). Elsewhere "auto" keeps every input and the
# environment's actions.
REFERENCE_SETUP: dict[str, dict[str, str]] = {
    "libero10": {"inputs": "main", "actions": "rotation_6d"},
}


def resolve(spec: EnvSpec, o: UVAOptions) -> UVAOptions:
    """The options for this task: ``auto`` inputs and actions replaced by the reference's
    choice for the environment, the condition input sized for its conditioning vector."""
    reference = REFERENCE_SETUP.get(spec.env_id.split(":", 1)[0], {})
    update = {}
    if o.inputs == "auto":
        update["inputs"] = reference.get("inputs", "all")
    if o.actions == "auto":
        update["actions"] = reference.get("actions", "native")
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


def _side_budget(ctx: RunContext, name: str, steps: int) -> StageBudget:
    """A budget outside the run's declared stages (shared initialisation), cached alike."""
    plan = StagePlan([Stage(name, steps)], eval_every=max(steps, 1), evaluate=lambda p: None,
                     cache=ctx.plan.cache)  # fmt: skip
    return plan.stage(name)


def _hwc_to_input(images: torch.Tensor, size: int | None = None) -> torch.Tensor:
    """(..., H, W, 3) uint8 or [0, 1] floats -> (N, 3, H, W) floats in [0, 1]; resized to
    ``size`` x ``size`` where given (bilinear, as the reference's resize_image)."""
    flat = images.reshape(-1, *images.shape[-3:])
    if flat.dtype == torch.uint8:
        flat = flat.float().div_(255.0)
    out = flat.permute(0, 3, 1, 2).contiguous()
    if size is not None and tuple(out.shape[-2:]) != (size, size):
        out = F.interpolate(out.float(), size=(size, size), mode="bilinear", align_corners=False)
    return out


@dataclass
class Encoded:
    """Every stored frame as latent tokens, with the statistics that normalise inputs."""

    tokens: torch.Tensor  # (frames, cameras * patches, latent), normalised
    proprio: torch.Tensor | None  # (frames, D), normalised
    latent_mean: torch.Tensor
    latent_std: torch.Tensor
    proprio_mean: torch.Tensor | None
    proprio_std: torch.Tensor | None
    digest: str


def _digest(arrays: list[np.ndarray], block: int = 4096) -> str:
    """sha256 of arrays read block by block (memory maps are never loaded whole)."""
    h = hashlib.sha256()
    for array in arrays:
        h.update(f"{array.dtype}|{array.shape}|".encode())
        for i in range(0, len(array), block):
            h.update(np.ascontiguousarray(array[i : i + block]).tobytes())
    return h.hexdigest()


def autoencoder(o: UVAOptions) -> KLAutoencoder:
    return KLAutoencoder(o.vae_ch, o.vae_ch_mult, o.vae_blocks, o.latent_channels,
                         o.vae_attention)  # fmt: skip


def network(layout: Layout, o: UVAOptions) -> UVANet | FusedUVANet:
    kind = FusedUVANet if o.token_layout == "fused" else UVANet
    return kind(layout, o.width, o.depth, o.heads, o.head_width, o.head_depth, o.action_head,
                o.diffusion_steps, o.sample_steps, dropout=o.dropout,
                condition_dim=o.condition_dim, condition_tokens=o.condition_tokens,
                condition_drop=o.condition_drop)  # fmt: skip


def layout_for(spec: EnvSpec, o: UVAOptions) -> Layout:
    """Token counts of a window for this task; refuses image sizes the autoencoder cannot
    downsample evenly and widths the heads do not divide."""
    if "auto" in (o.inputs, o.actions):
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
    # Unset: as many history frames as the environment's frame stack holds at the stride.
    history = o.history or (spec.frame_stack - 1) // o.history_stride + 1
    if o.history is None and o.history_stride > 1 and o.token_layout == "fused":
        # The fused layout needs one history frame per future frame: a stack too short for
        # them is the frame stack's fault, which the check below names.
        history = max(history, o.future)
    if o.token_layout == "fused" and history != o.future:
        raise ConfigError(
            f"uva: the fused token layout pairs each future frame with a history frame, but "
            f"there are {history} history frames and {o.future} future ones; set arch_options "
            f"history and future to the same number, or token_layout=sequence."
        )
    span = (history - 1) * o.history_stride + 1
    if o.history_stride > 1 and spec.frame_stack < span:
        raise ConfigError(
            f"uva: history_stride={o.history_stride} with {history} history frames reads frames "
            f"t-{span - 1} .. t, {span} frames, but {spec.env_id}'s observations stack "
            f"{spec.frame_stack}; give the environment -o frame_stack={span}, or lower "
            "history_stride."
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


class Shared:
    """What every run of one task shares: the frozen autoencoder and the encoded frames."""

    def __init__(self, ctx: RunContext, options: UVAOptions) -> None:
        self.spec = ctx.spec
        self.options = o = resolve(ctx.spec, options)
        self.device = ctx.device
        self.cameras = cameras(ctx.spec, o.inputs)
        self.vectors = vectors(ctx.spec, o.inputs)
        self.condition_key = (conditioning(ctx.spec) or (None, 0))[0]
        self.layout = layout_for(ctx.spec, o)  # first: it refuses impossible sizes
        # rotation_6d scales positions by their range over D_L (the reference's normaliser
        # takes the range over its training data; here only D_L has actions).
        labeled = ctx.labeled.actions if ctx.labeled is not None else None
        self.actions = ActionCodec(ctx.spec, o.actions, labeled, ctx.device)  # type: ignore[arg-type]
        self.vae = self._autoencoder(ctx)
        self.encoded = self._encode(ctx.unlabeled)

    # --- autoencoder ---------------------------------------------------------------------
    def _streams(self, view: UnlabeledView) -> list[np.ndarray]:
        """Every camera's stored images (memory maps, (frames, H, W, 3) uint8)."""
        return [view.frames, *(view.extras[name] for name in self.cameras[1:])]

    def _autoencoder(self, ctx: RunContext) -> KLAutoencoder:
        o = self.options
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(o.init_seed)
            vae = autoencoder(o)
        vae = vae.to(ctx.device)
        if o.vae_checkpoint:
            load_autoencoder(vae, o.vae_checkpoint, o.checkpoint_layout, log=ctx.log)
        elif o.vae_steps:
            streams = self._streams(ctx.unlabeled)
            frames = len(streams[0])
            generator = torch.Generator().manual_seed(o.init_seed)

            def loss(rows):
                # rows number the images of every camera: camera = row // frames
                rows = np.arange(frames * len(streams))[rows]
                images = np.concatenate([streams[c][rows[rows // frames == c] % frames]
                                         for c in range(len(streams))])  # fmt: skip
                batch = _hwc_to_input(torch.from_numpy(images).to(ctx.device), o.image_size)
                return vae.loss(batch, generator=generator)

            def train() -> None:
                optimise(vae.parameters(), loss, frames * len(streams), budget, lr=o.vae_lr,
                         batch_size=o.vae_batch, seed=o.init_seed)  # fmt: skip

            budget = _side_budget(ctx, "uva_autoencoder", o.vae_steps)
            settings = {"lr": o.vae_lr, "batch": o.vae_batch, "seed": o.init_seed,
                        "images": _digest(streams)}  # fmt: skip
            reuse_or_train("uva_autoencoder", vae, [], settings, budget, ctx.device, train)
        vae.eval().requires_grad_(False)
        return vae

    @torch.no_grad()
    def encode_images(self, images: np.ndarray | torch.Tensor) -> torch.Tensor:
        """(N, H, W, 3) images -> raw latent tokens (N, patches, latent), batch by batch
        (a memory-mapped array is read one batch at a time)."""
        out = []
        for i in range(0, len(images), _ENCODE_BATCH):
            batch = images[i : i + _ENCODE_BATCH]
            if isinstance(batch, np.ndarray):
                batch = torch.from_numpy(np.array(batch))  # a writable copy of the rows
            z = self.vae.encode(_hwc_to_input(batch.to(self.device), self.options.image_size))
            out.append(z.flatten(2).transpose(1, 2))
        return torch.cat(out)

    def _encode(self, view: UnlabeledView) -> Encoded:
        per_camera = [self.encode_images(images) for images in self._streams(view)]
        tokens = torch.cat(per_camera, dim=1)  # (frames, cameras * patches, latent)
        flat = tokens.reshape(-1, tokens.shape[-1])
        mean, std = flat.mean(0), flat.std(0).clamp_min(1e-6)
        tokens = (tokens - mean) / std
        proprio = pmean = pstd = None
        if self.vectors:
            raw = np.concatenate([np.asarray(view.extras[k], dtype=np.float32)
                                  for k in self.vectors], axis=1)  # fmt: skip
            proprio = torch.from_numpy(raw).to(self.device)
            pmean, pstd = proprio.mean(0), proprio.std(0).clamp_min(1e-6)
            proprio = (proprio - pmean) / pstd
        h = hashlib.sha256()
        for t in (tokens, proprio):
            if t is not None:
                h.update(t.detach().cpu().contiguous().numpy().tobytes())
        return Encoded(tokens, proprio, mean, std, pmean, pstd, h.hexdigest())

    # --- conversions between environment units and model units ------------------------------
    def normalise_actions(self, actions: torch.Tensor) -> torch.Tensor:
        """Environment actions -> model units (``actions``: native or rotation_6d)."""
        return self.actions.encode(actions)

    def denormalise_actions(self, actions: torch.Tensor) -> torch.Tensor:
        """Model units -> environment actions within the environment's bounds."""
        return self.actions.decode(actions)

    def new_net(self) -> UVANet:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.options.init_seed)
            net = network(self.layout, self.options)
        return net.to(self.device)


class Batches:
    """Minibatches of windows of one view as model inputs (latent tokens, actions)."""

    def __init__(self, shared: Shared, view: LabeledView | UnlabeledView,
                 labels: np.ndarray | None = None) -> None:  # fmt: skip
        lay = shared.layout
        self.shared = shared
        self.windows: Windows = make_windows(view.index, view.episode_ends, lay.history,
                                             lay.future, lay.chunk,
                                             shared.options.history_stride)  # fmt: skip
        device = shared.device
        self.history = torch.from_numpy(self.windows.history).to(device)
        self.future = torch.from_numpy(self.windows.future).to(device)
        # A multitask task's conditioning vector of each window: its current frame's,
        # read per minibatch (the store keeps one row per task, not one per frame).
        key = shared.condition_key
        self._condition_rows = view.extras[key] if key is not None else None
        self._current = self.windows.history[:, -1]
        self.targets = self.known = None
        if labels is not None:
            self.targets = torch.as_tensor(labels, dtype=torch.float32, device=device)
            self.known = torch.ones(self.targets.shape[:2], device=device)
        elif isinstance(view, LabeledView):
            actions, known = chunk_targets(self.windows, view.index, view.actions)
            self.targets = shared.normalise_actions(torch.from_numpy(actions).to(device))
            self.known = torch.from_numpy(known).float().to(device)

    def __len__(self) -> int:
        return len(self.windows)

    def condition(self, rows) -> torch.Tensor | None:
        """The conditioning vectors (B, C) of the windows ``rows`` (None: unconditioned)."""
        if self._condition_rows is None:
            return None
        if isinstance(rows, torch.Tensor):
            rows = rows.cpu().numpy()
        frames = self._current[rows]
        values = np.asarray(self._condition_rows[frames], dtype=np.float32)
        return torch.from_numpy(values).to(self.shared.device)

    def inputs(self, rows) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """History tokens (B, Th, C), future tokens (B, Tf, C), proprio (B, H, D)."""
        enc = self.shared.encoded
        hist, fut = self.history[rows], self.future[rows]
        b = hist.shape[0]
        latent = enc.tokens.shape[-1]
        h_tok = enc.tokens[hist].reshape(b, -1, latent)
        f_tok = enc.tokens[fut].reshape(b, -1, latent)
        proprio = enc.proprio[hist] if enc.proprio is not None else None
        return h_tok, f_tok, proprio


def mode_loss(net: UVANet, batches: Batches, rows, mode: str, generator: torch.Generator,
              min_mask_ratio: float) -> torch.Tensor:  # fmt: skip
    """The loss of one mode on one minibatch of windows."""
    hist, fut, proprio = batches.inputs(rows)
    masks = mode_masks(mode, hist.shape[0], fut.shape[1], generator, min_mask_ratio,
                       device=hist.device, masking=batches.shared.options.masking,
                       frames=batches.shared.layout.future)  # fmt: skip
    actions = batches.targets[rows] if batches.targets is not None else None
    if actions is None and bool(masks.actions_visible.any()):
        raise ValueError(f"UVA mode {mode!r} reads actions: it needs a labeled view or labels")
    known = batches.known[rows] > 0 if actions is not None else None
    out_future, out_actions = net(hist, fut, proprio, actions, masks, known,
                                  condition=batches.condition(rows))  # fmt: skip
    loss = hist.new_zeros(())
    if masks.video_loss:
        sel = masks.video_target
        loss = loss + net.diffloss.loss(fut[sel], out_future[sel], generator=generator)
    if masks.action_loss:
        if actions is None:
            raise ValueError(f"UVA mode {mode!r} needs action targets: a labeled view or labels")
        weight = batches.known[rows].flatten()
        loss = loss + net.action_head.loss(actions.flatten(0, 1), out_actions.flatten(0, 1),
                                           weight=weight, generator=generator)  # fmt: skip
    return loss


@torch.no_grad()
def full_loss(net: UVANet, batches: Batches, modes: tuple[str, ...],
              min_mask_ratio: float, chunk: int = _ENCODE_BATCH) -> torch.Tensor:  # fmt: skip
    """The stopping rule's training loss: every mode on every window, under fixed noise and
    masks, so that two checks measure the same quantity."""
    generator = torch.Generator().manual_seed(0)
    total = 0.0
    for mode in modes:
        for start in range(0, len(batches), chunk):
            rows = slice(start, min(start + chunk, len(batches)))
            size = rows.stop - rows.start
            total += float(mode_loss(net, batches, rows, mode, generator, min_mask_ratio)) * size
    return torch.tensor(total / (len(batches) * len(modes)))


class UVARoleModel(RoleModel):
    def __init__(self, shared: Shared, init_state: dict[str, torch.Tensor] | None,
                 net: UVANet | None = None) -> None:  # fmt: skip
        self.shared = shared
        self.init_state = init_state
        self.net = net if net is not None else shared.new_net()
        if init_state is not None:
            self.net.load_state_dict(init_state)

    def train(self, roles: Sequence[str], view, budget: StageBudget, *, seed: int,
              labels=None, rule: StoppingRule | None = None) -> float:  # fmt: skip
        o = self.shared.options
        modes = modes_of(tuple(roles))
        batches = Batches(self.shared, view, labels)
        generator = torch.Generator().manual_seed(seed)
        net = self.net.train()

        def loss(rows) -> torch.Tensor:
            if isinstance(rows, slice) and not torch.is_grad_enabled():
                return full_loss(net, batches, modes, o.min_mask_ratio)
            mode = modes[int(torch.randint(len(modes), (1,), generator=generator))]
            return mode_loss(net, batches, rows, mode, generator, o.min_mask_ratio)

        last = float("nan")

        def train() -> None:
            nonlocal last
            last = fit(net, loss, len(batches), budget, o, seed=seed,
                       device=self.shared.device, rule=rule,
                       generators=(generator,))  # fmt: skip

        starts = torch.from_numpy(batches.windows.starts)
        tensors = [starts] + ([batches.targets, batches.known] if batches.targets is not None
                              else [])  # fmt: skip
        # Every option (noise levels, mask ratio, ...) keys the stage, not only the weights.
        settings = {"modes": modes, "seed": seed, "rule": repr(rule),
                    "options": o.model_dump(mode="json"),
                    "data": self.shared.encoded.digest}  # fmt: skip
        reuse_or_train("uva_" + "+".join(modes), net, tensors, settings, budget,
                       self.shared.device, train)  # fmt: skip
        net.eval()
        return last

    @torch.no_grad()
    def label(self, view: UnlabeledView, seed: int = 0) -> np.ndarray:
        """Action chunks (N, K, A) in model units for every window of the view."""
        batches = Batches(self.shared, view)
        generator = torch.Generator().manual_seed(seed)
        net = self.net.eval()
        out = []
        for start in range(0, len(batches), _ENCODE_BATCH):
            rows = slice(start, start + _ENCODE_BATCH)
            hist, fut, proprio = batches.inputs(rows)
            masks = mode_masks("inverse", hist.shape[0], fut.shape[1], device=hist.device)
            _, out_actions = net(hist, fut, proprio, None, masks,
                                 condition=batches.condition(rows))  # fmt: skip
            sampled = net.action_head.sample(out_actions.flatten(0, 1), generator)
            out.append(sampled.view(hist.shape[0], -1, sampled.shape[-1]).cpu())
        return torch.cat(out).numpy()

    def policy(self, path: SamplingPath, video: UVARoleModel | None = None) -> UVAPolicy:
        if video is not None and path != "vm_idm":
            raise ValueError("a video model is paired with an IDM on the vm_idm path only")
        return UVAPolicy(self, path, video)

    def fresh(self) -> UVARoleModel:
        return UVARoleModel(self.shared, self.init_state)


class UVAPolicy(Policy):
    """Samples an action chunk per call: in policy mode, or as a video model then an IDM."""

    def __init__(self, model: UVARoleModel, path: SamplingPath,
                 video: UVARoleModel | None = None) -> None:  # fmt: skip
        self.model = model
        self.path = path
        self.video = video
        """The model that predicts the future on the vm_idm path (None: ``model`` itself)."""

    def probs(self, obs: torch.Tensor) -> torch.Tensor:
        raise TypeError("UVA predicts continuous actions: it has no action probabilities")

    def snapshot(self) -> UVAPolicy:
        # The network only: the encoded frames and the autoencoder are read-only and shared.
        net = copy.deepcopy(self.model.net)
        # A paired video model is never trained: it is shared, not copied.
        return UVAPolicy(UVARoleModel(self.model.shared, None, net=net), self.path, self.video)

    def _tokens(self, obs) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Environment observations (frame-stacked) -> history tokens and proprio."""
        shared = self.model.shared
        enc = shared.encoded
        streams = obs if isinstance(obs, dict) else {"obs": obs}
        history = shared.layout.history
        stride = shared.options.history_stride

        def last_frames(x: torch.Tensor, frame_dims: int) -> torch.Tensor:
            if x.dim() == frame_dims + 1:  # no frame-stack axis
                x = x[:, None]
            if stride > 1:  # every stride-th frame, the newest last (the check sized the stack)
                return x[:, x.shape[1] - 1 - (history - 1) * stride :: stride]
            if x.shape[1] < history:
                x = torch.cat([x[:, :1].expand(-1, history - x.shape[1], *x.shape[2:]), x], 1)
            return x[:, -history:]

        per_camera = []
        for name in shared.cameras:
            frames = last_frames(streams[name], 3)
            b = frames.shape[0]
            z = shared.encode_images(frames.reshape(-1, *frames.shape[2:]))
            per_camera.append(z.view(b, history, -1, z.shape[-1]))
        tokens = torch.cat(per_camera, dim=2)  # (B, H, cameras * patches, latent)
        tokens = ((tokens - enc.latent_mean) / enc.latent_std).flatten(1, 2)
        proprio = None
        if shared.vectors:
            raw = torch.cat([last_frames(streams[k].float(), 1) for k in shared.vectors], -1)
            proprio = (raw - enc.proprio_mean) / enc.proprio_std
        return tokens, proprio

    def _condition(self, obs) -> torch.Tensor | None:
        """The conditioning vector (B, C) of each observation: its newest frame's."""
        key = self.model.shared.condition_key
        if key is None:
            return None
        if not isinstance(obs, dict) or key not in obs:
            raise ValueError(f"this UVA model is conditioned on '{key}': observe it")
        value = obs[key].float()
        return value[:, -1] if value.dim() == 3 else value

    @torch.no_grad()
    def act(self, obs, greedy: bool = False, generator: torch.Generator | None = None):
        net = self.model.net.eval()
        lay = self.model.shared.layout
        hist, proprio = self._tokens(obs)
        condition = self._condition(obs)
        b = hist.shape[0]
        hidden = mode_masks("policy", b, lay.future_tokens, device=hist.device)
        future = None
        if self.path == "vm_idm":
            vm = self.video.net.eval() if self.video is not None else net
            out_future, _ = vm(hist, None, proprio, None, hidden, condition=condition)
            future = vm.diffloss.sample(out_future.flatten(0, 1), generator)
            future = future.view(b, lay.future_tokens, -1)
            masks: Masks = mode_masks("inverse", b, lay.future_tokens, device=hist.device)
        else:
            masks = hidden
        _, out_actions = net(hist, future, proprio, None, masks, condition=condition)
        actions = net.action_head.sample(out_actions.flatten(0, 1), generator)
        return self.model.shared.denormalise_actions(actions.view(b, lay.chunk, -1))


class UVA(UnifiedArchitecture):
    description = "Unified video-action transformer (small, CPU-sized)."
    input_kinds = ("image",)
    action_kinds = ("continuous",)
    Options: ClassVar[type[UVAOptions]] = UVAOptions

    def check(self, spec: EnvSpec, options: UVAOptions) -> None:
        # Shapes only (the meta device): no memory, no weights, even at the paper's size.
        options = resolve(spec, options)
        layout = layout_for(spec, options)
        with torch.device("meta"):
            vae, net = autoencoder(options), network(layout, options)
        if options.vae_checkpoint:
            load_autoencoder(vae, options.vae_checkpoint, options.checkpoint_layout, apply=False)
        if options.backbone_checkpoint:
            load_backbone(net, options.backbone_checkpoint, options.checkpoint_layout,
                          options.heads, apply=False)  # fmt: skip

    def role_model(self, ctx: RunContext, options: UVAOptions) -> UVARoleModel:
        shared = Shared(ctx, options)
        net = shared.new_net()
        if options.backbone_checkpoint:
            load_backbone(net, options.backbone_checkpoint, options.checkpoint_layout,
                          options.heads, log=ctx.log)  # fmt: skip
        if options.pretrain_steps:
            pretrain(ctx, shared, net)
        init = {k: v.detach().clone() for k, v in net.state_dict().items()}
        return UVARoleModel(shared, init)


class UVABase(UVA):
    description = "Unified video-action transformer at the paper's size (MAR-B, KL-16)."
    Options = UVABaseOptions


def pretrain(ctx: RunContext, shared: Shared, net: UVANet) -> None:
    """Video-model mode on every D_U window, under the shared seed (cached)."""
    o = shared.options
    model = UVARoleModel(shared, init_state=None, net=net)
    budget = _side_budget(ctx, "uva_pretrain", o.pretrain_steps)
    model.train(["video"], ctx.unlabeled, budget, seed=o.init_seed)
    ctx.log(f"uva: pretrained in video mode on D_U for {budget.used} steps"
            + (" (reused)" if budget.reused else ""))  # fmt: skip
