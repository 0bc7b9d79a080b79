"""The key layouts of the public MAR-B and KL-16 checkpoints, and how they load into UVA.

The tables below are written from the public model code (``LTH14/mar``: ``models/mar.py``
with ``mar_base`` and the diffusion MLP of ``models/diffloss.py`` at the released MAR-B's
``--diffloss_d 6 --diffloss_w 1024``; ``models/vae.py``, the KL-16 autoencoder: 128 base
channels, multipliers (1, 1, 2, 2, 4), 2 residual blocks per level, attention at the 16x16
level, 16 latent channels). They are generated from those few sizes; nothing is read from a
network.

Loading with ``checkpoint_layout="reference"`` is strict about the *checkpoint*: every key
of the table must be there with its shape, and a key outside it is refused, both with an
error that names them. Each key then either loads (``MAR_TARGETS``: the same name, or a
renamed or sliced one) or is left out for a reason given in ``MAR_UNUSED`` or because the
model's layout has no such part (the ``sequence`` layout has no ``decoder_embed``, ...),
which the log says. A target whose shape differs from this model's is an error: the model's
sizes are not MAR-B's.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from ssilbench.api import ConfigError

Shapes = dict[str, tuple[int, ...]]


def _block(prefix: str, width: int) -> Shapes:
    """One timm ViT block (qkv with bias, MLP ratio 4)."""
    return {
        f"{prefix}.norm1.weight": (width,), f"{prefix}.norm1.bias": (width,),
        f"{prefix}.attn.qkv.weight": (3 * width, width), f"{prefix}.attn.qkv.bias": (3 * width,),
        f"{prefix}.attn.proj.weight": (width, width), f"{prefix}.attn.proj.bias": (width,),
        f"{prefix}.norm2.weight": (width,), f"{prefix}.norm2.bias": (width,),
        f"{prefix}.mlp.fc1.weight": (4 * width, width), f"{prefix}.mlp.fc1.bias": (4 * width,),
        f"{prefix}.mlp.fc2.weight": (width, 4 * width), f"{prefix}.mlp.fc2.bias": (width,),
    }  # fmt: skip


def _linear(name: str, cin: int, cout: int) -> Shapes:
    return {f"{name}.weight": (cout, cin), f"{name}.bias": (cout,)}


def diffusion_mlp_keys(prefix: str, target: int, cond: int, width: int, depth: int,
                       out: int) -> Shapes:  # fmt: skip
    """MAR's ``SimpleMLPAdaLN`` (its output is noise and variance: ``out`` = 2 x target)."""
    keys = {**_linear(f"{prefix}.time_embed.mlp.0", 256, width),
            **_linear(f"{prefix}.time_embed.mlp.2", width, width),
            **_linear(f"{prefix}.cond_embed", cond, width),
            **_linear(f"{prefix}.input_proj", target, width)}  # fmt: skip
    for i in range(depth):
        b = f"{prefix}.res_blocks.{i}"
        keys.update({f"{b}.in_ln.weight": (width,), f"{b}.in_ln.bias": (width,),
                     **_linear(f"{b}.mlp.0", width, width), **_linear(f"{b}.mlp.2", width, width),
                     **_linear(f"{b}.adaLN_modulation.1", width, 3 * width)})  # fmt: skip
    final = f"{prefix}.final_layer"
    keys.update({**_linear(f"{final}.linear", width, out),
                 **_linear(f"{final}.adaLN_modulation.1", width, 2 * width)})  # fmt: skip
    return keys


def mar_keys(width: int = 768, depth: int = 12, tokens: int = 16, seq: int = 256,
             buffer: int = 64, classes: int = 1000, diff_width: int = 1024,
             diff_depth: int = 6) -> Shapes:  # fmt: skip
    """A MAR model's state dict, name -> shape (defaults: MAR-B on 256-pixel images)."""
    keys: Shapes = {"class_emb.weight": (classes, width), "fake_latent": (1, width),
                    **_linear("z_proj", tokens, width),
                    "z_proj_ln.weight": (width,), "z_proj_ln.bias": (width,),
                    "encoder_pos_embed_learned": (1, seq + buffer, width)}  # fmt: skip
    for i in range(depth):
        keys.update(_block(f"encoder_blocks.{i}", width))
    keys.update({"encoder_norm.weight": (width,), "encoder_norm.bias": (width,),
                 **_linear("decoder_embed", width, width), "mask_token": (1, 1, width),
                 "decoder_pos_embed_learned": (1, seq + buffer, width)})  # fmt: skip
    for i in range(depth):
        keys.update(_block(f"decoder_blocks.{i}", width))
    keys.update({"decoder_norm.weight": (width,), "decoder_norm.bias": (width,),
                 "diffusion_pos_embed_learned": (1, seq, width)})  # fmt: skip
    keys.update(diffusion_mlp_keys("diffloss.net", tokens, width, diff_width, diff_depth,
                                   2 * tokens))  # fmt: skip
    return keys


def kl_keys(ch: int = 128, ch_mult: tuple[int, ...] = (1, 1, 2, 2, 4), blocks: int = 2,
            z: int = 16, attention: bool = True) -> Shapes:  # fmt: skip
    """A KL autoencoder's state dict (the latent-diffusion layout MAR's ``vae.py`` keeps;
    attention at the lowest resolution when ``attention``); defaults: KL-16."""
    keys: Shapes = {}

    def conv(name: str, cin: int, cout: int, k: int) -> None:
        keys.update({f"{name}.weight": (cout, cin, k, k), f"{name}.bias": (cout,)})

    def norm(name: str, c: int) -> None:
        keys.update({f"{name}.weight": (c,), f"{name}.bias": (c,)})

    def resnet(name: str, cin: int, cout: int) -> None:
        norm(f"{name}.norm1", cin)
        conv(f"{name}.conv1", cin, cout, 3)
        norm(f"{name}.norm2", cout)
        conv(f"{name}.conv2", cout, cout, 3)
        if cin != cout:
            conv(f"{name}.nin_shortcut", cin, cout, 1)

    def attn(name: str, c: int) -> None:
        norm(f"{name}.norm", c)
        for part in ("q", "k", "v", "proj_out"):
            conv(f"{name}.{part}", c, c, 1)

    levels = len(ch_mult)
    conv("encoder.conv_in", 3, ch, 3)
    cin = ch
    for i, m in enumerate(ch_mult):
        for j in range(blocks):
            resnet(f"encoder.down.{i}.block.{j}", cin, ch * m)
            cin = ch * m
            if attention and i == levels - 1:
                attn(f"encoder.down.{i}.attn.{j}", cin)
        if i != levels - 1:
            conv(f"encoder.down.{i}.downsample.conv", cin, cin, 3)
    for prefix in ("encoder", "decoder"):
        c = ch * ch_mult[-1]
        if prefix == "decoder":
            conv("decoder.conv_in", z, c, 3)
        resnet(f"{prefix}.mid.block_1", c, c)
        attn(f"{prefix}.mid.attn_1", c)
        resnet(f"{prefix}.mid.block_2", c, c)
        if prefix == "encoder":
            norm("encoder.norm_out", c)
            conv("encoder.conv_out", c, 2 * z, 3)
    cin = ch * ch_mult[-1]
    for i in reversed(range(levels)):
        for j in range(blocks + 1):
            resnet(f"decoder.up.{i}.block.{j}", cin, ch * ch_mult[i])
            cin = ch * ch_mult[i]
            if attention and i == levels - 1:
                attn(f"decoder.up.{i}.attn.{j}", cin)
        if i != 0:
            conv(f"decoder.up.{i}.upsample.conv", cin, cin, 3)
    norm("decoder.norm_out", ch * ch_mult[0])
    conv("decoder.conv_out", ch * ch_mult[0], 3, 3)
    conv("quant_conv", 2 * z, 2 * z, 1)
    conv("post_quant_conv", z, z, 1)
    return keys


MAR_B: Shapes = mar_keys()
"""MAR-B's checkpoint layout (name -> shape)."""
KL16: Shapes = kl_keys()
"""KL-16's checkpoint layout."""

MAR_B_SIZES = {"width": 768, "depth": 24, "heads": 12, "head_width": 1024, "head_depth": 6,
               "latent_channels": 16}  # fmt: skip
"""The UVA option values a MAR-B checkpoint fits (``uva_base``'s)."""

MAR_UNUSED: dict[str, str] = {
    "class_emb.weight": "ImageNet class embedding (UVA conditions on an optional vector instead)",
    "mask_token": "MAR's decoder-side mask token (UVA masks at the encoder's input)",
    "encoder_pos_embed_learned": "one 16x16 grid + 64 class-buffer positions (UVA learns "
    "temporal and spatial embeddings; the reference skips these by shape too)",
    "decoder_pos_embed_learned": "as encoder_pos_embed_learned",
    "diffusion_pos_embed_learned": "as encoder_pos_embed_learned",
}
"""MAR-B tensors that never load, and why."""

MAR_RENAMED = {"fake_latent": "condition.fake_latent"}
"""MAR's null-class latent is UVA's null condition (loaded only with ``condition_dim``)."""

SLICED = ("diffloss.net.final_layer.linear.weight", "diffloss.net.final_layer.linear.bias")
"""MAR's diffusion MLP predicts noise and variance (2 x 16 outputs), as the head does with
``diffusion=ddpm``; with ``ddim`` it predicts the noise only: the first 16 output rows load
(the noise half of the reference's output)."""

KL_IGNORED_PREFIXES = ("loss.",)
"""Parts of an autoencoder checkpoint that are training losses (LPIPS, discriminator), not
the model: skipped, and counted in the log."""


def read_state(path: str | Path, what: str) -> dict[str, torch.Tensor]:
    """The tensors of a local checkpoint file, read with ``weights_only`` (no code runs;
    MAR's saved ``argparse.Namespace`` of arguments is allowed as plain data). Wrappers
    ``model_ema`` (MAR's EMA weights, which the reference loads), ``state_dict``, ``model``
    and a ``module.`` prefix on every key are unwrapped."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ConfigError(f"{what} checkpoint {path} does not exist; give the path of a local "
                          "file (nothing is downloaded).")  # fmt: skip
    try:
        with torch.serialization.safe_globals([argparse.Namespace]):
            blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # pickles with code, truncated files, non-torch files
        raise ConfigError(f"{what} checkpoint {path} cannot be read as torch tensors "
                          f"({type(exc).__name__}: {exc}).") from None  # fmt: skip
    for key in ("model_ema", "state_dict", "model"):
        if isinstance(blob, dict) and isinstance(blob.get(key), dict):
            blob = blob[key]
            break
    if not isinstance(blob, dict):
        raise ConfigError(f"{what} checkpoint {path} holds no state dict.")
    tensors = {k: t for k, t in blob.items() if isinstance(t, torch.Tensor)}
    if tensors and all(k.startswith("module.") for k in tensors):
        tensors = {k.removeprefix("module."): t for k, t in tensors.items()}
    return tensors


def _names(keys, limit: int = 8) -> str:
    keys = sorted(keys)
    more = f" and {len(keys) - limit} more" if len(keys) > limit else ""
    return ", ".join(keys[:limit]) + more


def check_layout(state: dict[str, torch.Tensor], table: Shapes, what: str, path: str | Path,
                 ignored: tuple[str, ...] = ()) -> int:  # fmt: skip
    """Refuse a checkpoint that is not of the table's layout; returns how many ignored-prefix
    tensors it has."""
    skipped = [k for k in state if k.startswith(ignored)] if ignored else []
    keys = {k for k in state if k not in skipped}
    missing = set(table) - keys
    unexpected = keys - set(table)
    wrong = sorted(k for k in keys & set(table) if tuple(state[k].shape) != table[k])
    if missing or unexpected or wrong:
        parts = []
        if missing:
            parts.append(f"{len(missing)} missing ({_names(missing)})")
        if unexpected:
            parts.append(f"{len(unexpected)} unexpected ({_names(unexpected)})")
        if wrong:
            shapes = [f"{k} {tuple(state[k].shape)} instead of {table[k]}" for k in wrong[:4]]
            parts.append(f"{len(wrong)} of another shape ({'; '.join(shapes)})")
        raise ConfigError(
            f"{what} checkpoint {path} does not have the reference layout: "
            + ", ".join(parts) + ". Give the released checkpoint, or load whatever matches "
            "by name and shape with arch_options checkpoint_layout=by_name."
        )  # fmt: skip
    return len(skipped)


def map_mar(state: dict[str, torch.Tensor], own: dict[str, torch.Size], what: str,
            path: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:  # fmt: skip
    """MAR-B tensors under this model's names (``own``: name -> shape), and the MAR-B keys
    left out with the reason. The checkpoint must have MAR-B's layout (``check_layout``)."""
    check_layout(state, MAR_B, what, path)
    mapped: dict[str, torch.Tensor] = {}
    left: dict[str, str] = {}
    misfit = []
    for key, tensor in state.items():
        if key in MAR_UNUSED:
            left[key] = MAR_UNUSED[key]
            continue
        target = MAR_RENAMED.get(key, key)
        if target not in own:
            left[key] = "no such part in this model's layout"
            continue
        if key in SLICED:
            tensor = tensor[: own[target][0]]
        if tuple(tensor.shape) != tuple(own[target]):
            misfit.append(f"{key} {tuple(tensor.shape)} -> {target} {tuple(own[target])}")
            continue
        mapped[target] = tensor
    if misfit:
        sizes = ", ".join(f"{k} {v}" for k, v in MAR_B_SIZES.items())
        raise ConfigError(
            f"{what} checkpoint {path} is MAR-B, but {len(misfit)} of its tensors do not fit "
            f"this model ({'; '.join(misfit[:3])}). MAR-B needs {sizes} (arch uva_base)."
        )
    return mapped, left


def map_kl16(state: dict[str, torch.Tensor], own: dict[str, torch.Size], what: str,
             path: str | Path) -> tuple[dict[str, torch.Tensor], int]:  # fmt: skip
    """KL-16 tensors (the names are the same here); the count of skipped loss tensors."""
    skipped = check_layout(state, KL16, what, path, KL_IGNORED_PREFIXES)
    mapped = {k: t for k, t in state.items() if k in KL16}
    misfit = [k for k, t in mapped.items() if k not in own or tuple(own[k]) != tuple(t.shape)]
    if misfit or set(own) - set(mapped):
        raise ConfigError(
            f"{what} checkpoint {path} is KL-16, but this autoencoder's layout differs "
            f"({_names(misfit or set(own) - set(mapped), 4)}); KL-16 needs vae_ch 128, "
            "vae_ch_mult (1, 1, 2, 2, 4), vae_blocks 2, latent_channels 16, vae_attention "
            "true (arch uva_base)."
        )
    return mapped, skipped


def load_backbone(net: torch.nn.Module, path: str | Path, layout: str, heads: int,
                  log=print, apply: bool = True) -> int:  # fmt: skip
    """Load a MAR-B checkpoint into the UVA network (``layout="reference"``), or every
    tensor whose name and shape match (``"by_name"``); returns how many loaded. With
    ``apply=False`` only checks (``net`` may be on the meta device)."""
    from ssilbench_uva.autoencoder import load_matching, matching_tensors

    if layout == "by_name":
        if apply:
            return load_matching(net, path, "backbone", log=log)
        return len(matching_tensors(net, path, "backbone")[0])
    state = read_state(path, "backbone")
    check_layout(state, MAR_B, "backbone", path)  # first: is it MAR-B at all
    if heads != MAR_B_SIZES["heads"]:
        raise ConfigError(
            f"backbone checkpoint {path} is MAR-B, whose attention has 12 heads; this model "
            f"has {heads} (set heads 12, as arch uva_base does)."
        )
    own = {k: v.shape for k, v in net.state_dict().items()}
    mapped, left = map_mar(state, own, "backbone", path)
    if apply:
        net.load_state_dict(mapped, strict=False)
        reasons: dict[str, int] = {}
        for reason in left.values():
            reasons[reason] = reasons.get(reason, 0) + 1
        why = "; ".join(f"{n} x {r}" for r, n in reasons.items())
        log(f"backbone: loaded {len(mapped)} MAR-B tensors into {len(own)} of this model's "
            f"from {Path(path).expanduser()}; not loaded: {why}")  # fmt: skip
    return len(mapped)


def load_autoencoder(vae: torch.nn.Module, path: str | Path, layout: str, log=print,
                     apply: bool = True) -> int:  # fmt: skip
    """Load a KL-16 checkpoint (``layout="reference"``: every tensor of the layout, which
    is this autoencoder's own at KL-16's sizes) or by name and shape (``"by_name"``)."""
    from ssilbench_uva.autoencoder import load_matching, matching_tensors

    if layout == "by_name":
        if apply:
            return load_matching(vae, path, "autoencoder", log=log)
        return len(matching_tensors(vae, path, "autoencoder")[0])
    own = {k: v.shape for k, v in vae.state_dict().items()}
    mapped, skipped = map_kl16(read_state(path, "autoencoder"), own, "autoencoder", path)
    if apply:
        vae.load_state_dict(mapped, strict=True)
        note = f"; skipped {skipped} training-loss tensors (loss.*)" if skipped else ""
        log(f"autoencoder: loaded all {len(mapped)} KL-16 tensors from "
            f"{Path(path).expanduser()}{note}")  # fmt: skip
    return len(mapped)
