"""The LAPO reference code, loaded for the parity tests, and what both sides need to be compared:
the key mapping of docs/methods/lapo.md, batches, the reference's loops and the measures of how
far two trained sets of weights are apart.

``SSILBENCH_LAPO_REFERENCE`` names a local, extracted checkout of ``schmidtdominik/LAPO`` or
the paper's fork ``sachaMorin/lapo-plus`` (the folder holding ``lapo/models.py``, or ``lapo/``
itself); nothing is downloaded. The reference's ``models.py`` is imported on its own: the
modules it imports only for other purposes (``config``, ``data_loader``) and two small helpers
(``funcy.partition``, ``tensordict.TensorDict``, real ones where installed) are stood in for
while it loads. Its loops (learning rates, optimiser, clip, losses) are written here from its
stage scripts; its networks are its own.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
import types
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from ssilbench_lapo.world_model import WorldModel, WorldModelConfig, speed_for

ENV = "SSILBENCH_LAPO_REFERENCE"
OBS = (3, 64, 64)
ACTIONS = 15
# float32 with the same kernels on both sides; the latent layout's permutation reorders sums
# in the forward model's first convolutions, and fused and plain Adam round differently.
OUTPUT_TOL = {"rtol": 1e-5, "atol": 1e-5}
PARAM_TOL = {"rtol": 1e-4, "atol": 1e-6}
# ssilbench's side trains as its stages do on the CPU: in the default config's memory
# layout (channels-last), its modules and batches converted as ``speed_for`` does.
LAYOUT = speed_for(WorldModelConfig(), torch.device("cpu"))


# ---------------------------------------------------------------------------- loading


def _partition(n: int, step: int, seq) -> list:
    """``funcy.partition``: the windows of ``n`` items every ``step`` items, whole ones only."""
    seq = list(seq)
    return [seq[i : i + n] for i in range(0, len(seq) - n + 1, step)]


class _TensorDict(dict):
    """What the reference's IDM needs of ``tensordict.TensorDict``: a dict of tensors."""

    def __init__(self, source: dict, batch_size=None) -> None:
        super().__init__(source)


def stand_ins(vq_config: type) -> dict[str, types.ModuleType]:
    config = types.ModuleType("config")
    config.VQConfig, config.DEVICE, config.ADD_TIME_HORIZON = vq_config, "cpu", 0
    modules = {"config": config, "data_loader": types.ModuleType("data_loader")}
    if importlib.util.find_spec("funcy") is None:
        modules["funcy"] = types.ModuleType("funcy")
        modules["funcy"].partition = _partition
    if importlib.util.find_spec("tensordict") is None:
        modules["tensordict"] = types.ModuleType("tensordict")
        modules["tensordict"].TensorDict = _TensorDict
    return modules


@dataclasses.dataclass
class VQConfig:
    enabled: bool
    num_codebooks: int
    num_discrete_latents: int
    emb_dim: int
    num_embs: int
    commitment_cost: float
    decay: float


def load(lapo: Path) -> types.SimpleNamespace:
    """The reference's ``models`` module and model settings from its ``lapo/`` folder."""
    yaml = pytest.importorskip("yaml", reason="reading the reference's config.yaml needs pyyaml")
    model_cfg = yaml.safe_load((lapo / "config.yaml").read_text())["model"]
    vq = VQConfig(**model_cfg["vq"])
    replaced = stand_ins(VQConfig)
    saved = {name: sys.modules.get(name) for name in replaced}
    sys.modules.update(replaced)
    try:
        spec = importlib.util.spec_from_file_location("lapo_reference_models", lapo / "models.py")
        models = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(models)
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    la_dim = vq.num_codebooks * vq.emb_dim * vq.num_discrete_latents
    # schmidtdominik/LAPO gives the decoder's widths in its stage3_decoding.py, the fork in
    # its config.yaml: the same (192, 128, 64)
    model_cfg.setdefault("decoder_hidden_sizes", [192, 128, 64])
    return types.SimpleNamespace(models=models, vq=vq, la_dim=la_dim, model=model_cfg)


def reference_or_skip() -> types.SimpleNamespace:
    root = os.environ.get(ENV)
    if not root:
        pytest.skip(f"set {ENV} to an extracted checkout of the LAPO reference code "
                    "(schmidtdominik/LAPO or sachaMorin/lapo-plus) to compare with it")  # fmt: skip
    path = Path(root).expanduser().resolve()
    lapo = path / "lapo" if (path / "lapo" / "models.py").exists() else path
    if not (lapo / "models.py").exists():
        pytest.skip(f"{ENV}={root}: no LAPO checkout there (expected lapo/models.py)")
    return load(lapo)


# ---------------------------------------------------------------------------- key mapping


def latent_permutation(cfg: WorldModelConfig) -> torch.Tensor:
    """``perm[j]``: the reference's index of ssilbench's latent number ``j``.

    ssilbench reads the latent as (codebook g, latent l, dim d): j = (g * L + l) * D + d; the
    reference as (codebook, dim, latent): (g * D + d) * L + l."""
    g, ll, d = cfg.codebooks, cfg.latents_per_codebook, cfg.code_dim
    grid = torch.arange(g * d * ll).view(g, d, ll)  # reference index at [g, d, l]
    return grid.transpose(1, 2).reshape(-1)


def impala_keys(src: str, dst: str) -> list[tuple[str, str]]:
    pairs = []
    for i in range(3):
        pairs.append((f"{src}conv_stack.{i}.conv", f"{dst}stages.{i}.conv"))
        for r in range(2):
            for c in range(2):
                pairs.append((f"{src}conv_stack.{i}.res_block{r}.conv{c}",
                              f"{dst}stages.{i}.res{r}.conv{c}"))  # fmt: skip
    return pairs


def _unet_keys(levels: int) -> list[tuple[str, str]]:
    def block(src: str, dst: str) -> list[tuple[str, str]]:
        return [(f"{src}.conv", f"{dst}.conv"), (f"{src}.norm", f"{dst}.norm"),
                (f"{src}.res.res_block.1", f"{dst}.res.conv0"),
                (f"{src}.res.res_block.3", f"{dst}.res.conv1")]  # fmt: skip

    pairs = []
    for i in range(levels):
        pairs += block(f"down.{i}", f"down.{i}")
    pairs.append((f"down.{levels}", "to_one"))
    for i in range(levels + 1):
        pairs += block(f"up.{i}", f"up.{i}")
    pairs += [("final_conv.0", "final_conv"), ("final_conv.1.res_block.1", "final_res.conv0"),
              ("final_conv.1.res_block.3", "final_res.conv1"), ("final_conv.3", "out")]  # fmt: skip
    return pairs


def world_model_mapping(cfg: WorldModelConfig) -> list[tuple[str, str]]:
    """(reference key prefix, ssilbench key prefix) for the reference's ``idm`` and ``wm``
    state dicts (as ``idm.*`` and ``wm.*``) and ssilbench's ``WorldModel``."""
    levels = OBS[1].bit_length() - 2  # 64 x 64: five down blocks
    pairs = impala_keys("idm.", "idm.trunk.")
    pairs += [
        ("idm.fc", "idm.trunk.fc"),
        ("idm.policy_head", "idm.head"),
        ("idm.vq.embedding", "quantiser.codebook"),
        ("idm.vq.ema_count", "quantiser.ema_count"),
        ("idm.vq.ema_weight", "quantiser.ema_sum"),
    ]
    pairs += [(f"wm.{a}", f"forward_model.{b}") for a, b in _unet_keys(levels)]
    return pairs


def to_ssilbench(
    reference: dict[str, torch.Tensor],
    cfg: WorldModelConfig,
    channels: int,
    pairs: list[tuple[str, str]],
) -> dict[str, torch.Tensor]:
    """The reference's tensors under ssilbench's keys, with the latent's layout permuted
    where a tensor is indexed by it: the IDM head's outputs, and the forward model's latent
    input channels (after the frame's at the input; after the features' at the first up
    block)."""
    perm = latent_permutation(cfg)
    out = {}
    for key, value in reference.items():
        prefix = next((p for p in pairs if key == p[0] or key.startswith(p[0] + ".")), None)
        if prefix is None:
            raise KeyError(f"no mapping for the reference's {key}")
        name = prefix[1] + key[len(prefix[0]) :]
        value = value.detach().clone()
        if name.startswith("idm.head."):
            value = value[perm]
        elif name == "forward_model.down.0.conv.weight":
            value[:, channels:] = value[:, channels + perm]
        elif name == "forward_model.up.0.conv.weight":
            first = value.shape[0] - len(perm)
            value[first:] = value[first + perm]
        elif name.endswith("num_batches_tracked"):
            value = value.reshape(1)
        out[name] = value
    return out


def policy_state(policy: nn.Module, perm: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """The reference ``Policy``'s weights under the keys of ssilbench's ``impala_net``
    (``Sequential(Centre, ImpalaTrunk, head)``), its head's rows permuted when its outputs
    are latents (``perm``); its PPO value head, unused offline, left out."""
    pairs = impala_keys("", "1.") + [("fc", "1.fc"), ("policy_head", "2.0")]
    state = {}
    for key, value in policy.state_dict().items():
        if key.startswith("value_head"):
            continue
        src, dst = next(p for p in pairs if key.startswith(p[0] + "."))
        value = value.detach().clone()
        if perm is not None and src == "policy_head":
            value = value[perm]
        state[dst + key[len(src) :]] = value
    return state


def decoder_state(
    decoder: nn.Module, perm: torch.Tensor | None, offset: int = 0
) -> dict[str, torch.Tensor]:
    """A reference decoder's weights (``create_decoder``: the same Linear/ReLU indices as
    ssilbench's ``mlp``) shifted by ``offset`` items, its first layer's input columns
    permuted where it reads a latent in the reference's layout (``perm``)."""
    state = {}
    for key, value in decoder.state_dict().items():
        index, rest = key.split(".", 1)
        value = value.detach().clone()
        if index == "0" and rest == "weight" and perm is not None:
            value = value[:, perm]
        state[f"{int(index) + offset}.{rest}"] = value
    return state


def reference_decoder(ref, out: int) -> nn.Sequential:
    """The reference's ``create_decoder(la_dim, out, hidden_sizes=decoder_hidden_sizes)``."""
    layers, width = [], ref.la_dim
    for h in ref.model["decoder_hidden_sizes"]:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    return nn.Sequential(*layers, nn.Linear(width, out))


# ---------------------------------------------------------------------------- data and models


def varied_frames(n: int, seed: int = 0) -> torch.Tensor:
    """(n, 3, 64, 64) uint8 frames that differ as wholes: each a random colour under noise of
    a random strength (so that even an untrained network's outputs spread across them)."""
    g = torch.Generator().manual_seed(seed)
    colour = torch.rand(n, 3, 1, 1, generator=g) * 255
    strength = torch.rand(n, 1, 1, 1, generator=g)
    noise = torch.rand(n, *OBS, generator=g) * 255
    return (colour + strength * (noise - colour)).round().to(torch.uint8)


def centred(frames: torch.Tensor) -> torch.Tensor:
    """uint8 frames as the reference feeds them (its ``normalize_obs``): x / 255 - 0.5."""
    return frames.float() / 255 - 0.5


def reference_models(ref, cfg: WorldModelConfig):
    torch.manual_seed(0)
    idm = ref.models.IDM(ref.vq, (2 * OBS[0], *OBS[1:]), ref.la_dim, cfg.scale)
    wm = ref.models.WorldModel(ref.la_dim, in_depth=OBS[0], out_depth=OBS[0], base_size=cfg.base)
    return idm, wm


def both(ref, cfg: WorldModelConfig | None = None):
    """(cfg, reference IDM, reference forward model, ssilbench's WorldModel with their
    weights, in ssilbench's CPU layout)."""
    cfg = cfg or WorldModelConfig()
    idm, wm = reference_models(ref, cfg)
    ours = WorldModel(cfg, OBS)
    missing, unexpected = ours.load_state_dict(state(idm, wm, cfg), strict=False)
    assert not unexpected and missing == ["quantiser.ema_steps"], (missing, unexpected)
    return cfg, idm, wm, LAYOUT.module(ours)


def state(idm, wm, cfg: WorldModelConfig) -> dict[str, torch.Tensor]:
    full = {f"idm.{k}": v for k, v in idm.state_dict().items()}
    full |= {f"wm.{k}": v for k, v in wm.state_dict().items()}
    return to_ssilbench(full, cfg, OBS[0], world_model_mapping(cfg))


def reference_step(idm, wm, obs: torch.Tensor, next_obs: torch.Tensor):
    """The reference's stage-1 loss on a batch: its ``IDM.label`` and ``WorldModel.label``
    on pixels scaled as its ``normalize_obs`` does."""
    seq = torch.stack([obs, next_obs], dim=1).float() / 255 - 0.5
    labelled = {"obs": seq}
    vq_loss, _ = idm.label(labelled)
    wm_loss = wm.label(labelled)
    return labelled, wm_loss, vq_loss


def reference_lr(step: int, lr: float, steps: int, warmup: int, start: float, end: float) -> float:
    """The reference's piecewise-linear rate (``doy.PiecewiseLinearSchedule`` through
    (0, start), (warmup, 1), (steps + 1, end), times ``lr``) at ``step``."""
    return float(np.interp(step, [0, warmup, steps + 1], [start * lr, lr, end * lr]))


def stage_one_lr(step: int, lr: float, steps: int = 50_000) -> float:
    """Stage 1's rate in the reference (its config: 50,000 steps, 50 of warm-up from 10%)."""
    return reference_lr(step, lr, steps, 50, 0.1, 0.01)


def largest(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.detach().double() - b.detach().double()).abs().max())


def moving_square(n: int, seed: int) -> torch.Tensor:
    """(n + 1, 3, 64, 64) uint8 frames: a 6 x 6 square stepping 4 pixels in one of four
    directions at random on a torus, over a fixed colour gradient."""
    g = torch.Generator().manual_seed(seed)
    moves = torch.tensor([[0, 4], [0, -4], [4, 0], [-4, 0]])
    actions = torch.randint(0, 4, (n,), generator=g)
    pos = torch.cat([torch.zeros(1, 2, dtype=torch.long), moves[actions].cumsum(0)]) % 64
    ramp = torch.linspace(40, 160, 64)
    frames = torch.stack([ramp[None, :].expand(64, 64), ramp[:, None].expand(64, 64),
                          torch.full((64, 64), 90.0)]).repeat(n + 1, 1, 1, 1)  # fmt: skip
    for i, (y, x) in enumerate(pos.tolist()):
        rows, cols = torch.arange(y, y + 6) % 64, torch.arange(x, x + 6) % 64
        frames[i, :, rows[:, None], cols[None, :]] = 255.0
    return frames.to(torch.uint8)


# ---------------------------------------------------------------------------- measures


def overall_gap(actual: dict, expected: dict, initial: dict, keys) -> float:
    """||actual - expected|| / ||expected - initial|| over the tensors ``keys`` together."""
    num = sum(float((actual[k] - expected[k]).double().norm() ** 2) for k in keys)
    den = sum(float((expected[k] - initial[k]).double().norm() ** 2) for k in keys)
    return (num / den) ** 0.5


def snapshot(net: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in net.state_dict().items()}


class RecordedRows:
    """A tensor as a row source that records the rows each training step reads, and calls
    ``on_read(step)`` before handing them out (so a test sees the weights between steps)."""

    def __init__(self, data: torch.Tensor, on_read: Callable[[int], None] | None = None) -> None:
        self.data = data
        self.on_read = on_read
        self.seen: list[np.ndarray] = []

    def __len__(self) -> int:
        return len(self.data)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    def is_floating_point(self) -> bool:
        return self.data.is_floating_point()

    def __getitem__(self, rows) -> torch.Tensor:
        rows = np.arange(len(self.data))[rows]
        if self.on_read is not None:
            self.on_read(len(self.seen))
        self.seen.append(rows)
        return self.data[torch.as_tensor(rows)]


def adam_loop(
    params: Sequence[torch.nn.Parameter],
    step_loss: Callable[[torch.Tensor], torch.Tensor],
    rows_seen: Sequence[np.ndarray],
    rates: Sequence[float],
    clip: float | None = None,
    after_first: Callable[[], None] | None = None,
) -> list[float]:
    """A reference stage's loop (plain ``torch.optim.Adam``, the rate set before each step,
    ``clip`` as its stage 1 clips) over the rows ssilbench's loop read; the losses."""
    params = [p for p in params if p.requires_grad]
    opt = torch.optim.Adam(params, lr=rates[0])
    losses = []
    for step, rows in enumerate(rows_seen):
        for group in opt.param_groups:
            group["lr"] = rates[step]
        loss = step_loss(torch.as_tensor(rows))
        opt.zero_grad()
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(params, clip)
        opt.step()
        losses.append(float(loss.detach()))
        if step == 0 and after_first is not None:
            after_first()
    return losses
