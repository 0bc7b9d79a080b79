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
from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from ssilbench.api import EnvSpec, Policy, RunContext
from ssilbench.kit import (
    RoleModel,
    SamplingPath,
    StageBudget,
    StoppingRule,
    UnifiedArchitecture,
    UnlabeledView,
    optimise,
    reuse_or_train,
)
from ssilbench_uva import augment
from ssilbench_uva.actions import ActionCodec
from ssilbench_uva.autoencoder import KLAutoencoder
from ssilbench_uva.batches import ENCODE_BATCH as _ENCODE_BATCH
from ssilbench_uva.batches import Batches, full_loss, mode_loss
from ssilbench_uva.checkpoints import load_autoencoder, load_backbone
from ssilbench_uva.model import FusedUVANet, Layout, UVANet
from ssilbench_uva.modes import Masks, mode_masks, modes_of
from ssilbench_uva.options import UVABaseOptions, UVAOptions
from ssilbench_uva.task_setup import (  # noqa: F401 (REFERENCE_SETUP: here as before)
    REFERENCE_SETUP,
    cameras,
    conditioning,
    layout_for,
    resolve,
    vectors,
)
from ssilbench_uva.training import fit


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
                condition_drop=o.condition_drop, diffusion=o.diffusion,
                temperature=o.temperature, noise_schedule=o.noise_schedule)  # fmt: skip


def _no_rows(rows: torch.Tensor | None) -> torch.Tensor | None:
    """An empty tensor of the rows' shape (a slice would pickle its whole storage)."""
    return None if rows is None else rows.new_empty((0, *rows.shape[1:]))


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
        # The stored images (memory maps), read again where training augments them.
        self.images = self._streams(ctx.unlabeled)
        self.encoded = self._encode(ctx.unlabeled)

    def __getstate__(self) -> dict:
        """What pickling keeps (``run --keep-policy``): what acting reads (the autoencoder,
        the action codec, the normalising statistics), not the dataset's images (memory
        maps, which would pickle whole) nor its encoded tokens."""
        state = dict(self.__dict__)
        enc = self.encoded
        state["images"] = []
        state["encoded"] = replace(enc, tokens=_no_rows(enc.tokens), proprio=_no_rows(enc.proprio))
        return state

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

            budget = ctx.plan.side_stage("uva_autoencoder", o.vae_steps)
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
            out.append(self._encode_chw(_hwc_to_input(batch.to(self.device))))
        return torch.cat(out)

    def _encode_chw(self, images: torch.Tensor) -> torch.Tensor:
        """(N, 3, H, W) floats in [0, 1] -> raw latent tokens, resized to image_size first."""
        size = self.options.image_size
        if size is not None and tuple(images.shape[-2:]) != (size, size):
            images = F.interpolate(images, size=(size, size), mode="bilinear",
                                   align_corners=False)  # fmt: skip
        return self.vae.encode(images).flatten(2).transpose(1, 2)

    @torch.no_grad()
    def augmented_tokens(self, frames: np.ndarray, generator: torch.Generator) -> torch.Tensor:
        """Normalised tokens (N, F, cameras * patches, latent) of the stored frames
        ``frames`` (N, F) after the ``augment`` transform, one draw per row of ``frames``
        (a window), the same for every frame and camera of it."""
        n, count = frames.shape
        kind = self.options.augment
        params = augment.draw(kind, n, generator)
        rows, where = np.unique(frames.reshape(-1), return_inverse=True)
        per_camera = []
        for stream in self.images:
            stored = torch.from_numpy(np.asarray(stream[rows]))[torch.from_numpy(where)]
            images = _hwc_to_input(stored.to(self.device))  # (N * F, 3, H, W)
            images = images.view(n, count, *images.shape[1:])
            images = augment.apply(kind, images, params).flatten(0, 1)
            z = torch.cat([self._encode_chw(images[i : i + _ENCODE_BATCH])
                           for i in range(0, len(images), _ENCODE_BATCH)])  # fmt: skip
            per_camera.append(z.view(n, count, *z.shape[1:]))
        enc = self.encoded
        return (torch.cat(per_camera, dim=2) - enc.latent_mean) / enc.latent_std

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
            return mode_loss(net, batches, rows, mode, generator, o.min_mask_ratio,
                             augmented=True)  # fmt: skip

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
    budget = ctx.plan.side_stage("uva_pretrain", o.pretrain_steps)
    model.train(["video"], ctx.unlabeled, budget, seed=o.init_seed)
    ctx.log(f"uva: pretrained in video mode on D_U for {budget.used} steps"
            + (" (reused)" if budget.reused else ""))  # fmt: skip
