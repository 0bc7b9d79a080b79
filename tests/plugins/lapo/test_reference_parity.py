"""Numerical parity of LAPO's stage 1 with the paper's reference code.

Runs only when ``SSILBENCH_LAPO_REFERENCE`` names a local, extracted checkout of the reference
(``schmidtdominik/LAPO`` or the paper's fork ``sachaMorin/lapo-plus``; the folder holding
``lapo/models.py``, or ``lapo/`` itself). Nothing is downloaded. The reference's
``models.py`` is imported on its own; the modules it imports only for other purposes
(``config``, ``data_loader``) and two small helpers (``funcy.partition``,
``tensordict.TensorDict``, real ones where installed) are stood in for while it loads.

Both sides are built at the paper's size with ssilbench's defaults, the reference's weights
are copied into ssilbench's modules by the key mapping of docs/methods/lapo.md, and then:

- the same batch gives the same latents, codes, quantised latents, forward-model outputs and
  losses (float tolerance);
- after ``STEPS`` optimiser steps of ssilbench's own stage-1 loop (``optimise``: Adam,
  gradient clip 2, the warm-up schedule) and of the reference's (Adam, clip 2, its piecewise
  linear schedule) on the same rows, every parameter, BatchNorm statistic and codebook is
  the same;
- the latent policy and the decoding head give the same outputs;
- ``LONG`` steps of both loops on a small moving-square set give the same loss curve and
  codebook usage (as training runs agree: Adam amplifies rounding, see the Adam test).

``python -m pytest -s tests/plugins/lapo/test_reference_parity.py`` prints the largest
differences.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from ssilbench.api import Stage, StagePlan
from ssilbench.kit import set_lr
from ssilbench_lapo.world_model import (
    WorldModel,
    WorldModelConfig,
    decoder_net,
    impala_net,
    optimise,
    schedules,
    speed_for,
)

ENV = "SSILBENCH_LAPO_REFERENCE"
OBS = (3, 64, 64)
BATCH = 32
STEPS = 5
SGD_LR = 0.1
# the short training run: steps, batch and transitions
LONG, SHORT_BATCH, TRANSITIONS = 100, 16, 512
ACTIONS = 15
# float32 with the same kernels on both sides; the latent layout's permutation reorders sums
# in the forward model's first convolutions, and fused and plain Adam round differently.
OUTPUT_TOL = {"rtol": 1e-5, "atol": 1e-5}
PARAM_TOL = {"rtol": 1e-4, "atol": 1e-6}
# ssilbench's side trains as its stages do on the CPU: in the default config's memory
# layout (channels-last), its modules and batches converted as ``speed_for`` does.
LAYOUT = speed_for(WorldModelConfig(), torch.device("cpu"))


# ---------------------------------------------------------------------------- the reference


def _partition(n: int, step: int, seq) -> list:
    """``funcy.partition``: the windows of ``n`` items every ``step`` items, whole ones only."""
    seq = list(seq)
    return [seq[i : i + n] for i in range(0, len(seq) - n + 1, step)]


class _TensorDict(dict):
    """What the reference's IDM needs of ``tensordict.TensorDict``: a dict of tensors."""

    def __init__(self, source: dict, batch_size=None) -> None:
        super().__init__(source)


def _stand_ins(vq_config: type) -> dict[str, types.ModuleType]:
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
class _VQConfig:
    enabled: bool
    num_codebooks: int
    num_discrete_latents: int
    emb_dim: int
    num_embs: int
    commitment_cost: float
    decay: float


@pytest.fixture(scope="module")
def ref() -> types.SimpleNamespace:
    root = os.environ.get(ENV)
    if not root:
        pytest.skip(f"set {ENV} to an extracted checkout of the LAPO reference code "
                    "(schmidtdominik/LAPO or sachaMorin/lapo-plus) to compare with it")  # fmt: skip
    path = Path(root).expanduser().resolve()
    lapo = path / "lapo" if (path / "lapo" / "models.py").exists() else path
    if not (lapo / "models.py").exists():
        pytest.skip(f"{ENV}={root}: no LAPO checkout there (expected lapo/models.py)")
    yaml = pytest.importorskip("yaml", reason="reading the reference's config.yaml needs pyyaml")
    model_cfg = yaml.safe_load((lapo / "config.yaml").read_text())["model"]
    vq = _VQConfig(**model_cfg["vq"])
    stand_ins = _stand_ins(_VQConfig)
    saved = {name: sys.modules.get(name) for name in stand_ins}
    sys.modules.update(stand_ins)
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


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ---------------------------------------------------------------------------- key mapping


def latent_permutation(cfg: WorldModelConfig) -> torch.Tensor:
    """``perm[j]``: the reference's index of ssilbench's latent number ``j``.

    ssilbench reads the latent as (codebook g, latent l, dim d): j = (g * L + l) * D + d; the
    reference as (codebook, dim, latent): (g * D + d) * L + l."""
    g, ll, d = cfg.codebooks, cfg.latents_per_codebook, cfg.code_dim
    grid = torch.arange(g * d * ll).view(g, d, ll)  # reference index at [g, d, l]
    return grid.transpose(1, 2).reshape(-1)


def _impala_keys(src: str, dst: str) -> list[tuple[str, str]]:
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
    pairs = _impala_keys("idm.", "idm.trunk.")
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


# ---------------------------------------------------------------------------- the checks


def _batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    frames = torch.randint(0, 256, (BATCH + 1, *OBS), generator=g, dtype=torch.uint8)
    return frames[:-1], frames[1:]


def _reference_models(ref, cfg: WorldModelConfig):
    torch.manual_seed(0)
    idm = ref.models.IDM(ref.vq, (2 * OBS[0], *OBS[1:]), ref.la_dim, cfg.scale)
    wm = ref.models.WorldModel(ref.la_dim, in_depth=OBS[0], out_depth=OBS[0],
                               base_size=ref.model["wm_scale"])  # fmt: skip
    return idm, wm


def _both(ref) -> tuple[WorldModelConfig, torch.nn.Module, torch.nn.Module, WorldModel]:
    cfg = WorldModelConfig()
    idm, wm = _reference_models(ref, cfg)
    ours = WorldModel(cfg, OBS)
    state = {f"idm.{k}": v for k, v in idm.state_dict().items()}
    state |= {f"wm.{k}": v for k, v in wm.state_dict().items()}
    mapped = to_ssilbench(state, cfg, OBS[0], world_model_mapping(cfg))
    missing, unexpected = ours.load_state_dict(mapped, strict=False)
    assert not unexpected and missing == ["quantiser.ema_steps"], (missing, unexpected)
    return cfg, idm, wm, LAYOUT.module(ours)


def _reference_step(idm, wm, obs: torch.Tensor, next_obs: torch.Tensor):
    """The reference's stage-1 loss on a batch: its ``IDM.label`` and ``WorldModel.label``
    on pixels scaled as its ``normalize_obs`` does."""
    seq = torch.stack([obs, next_obs], dim=1).float() / 255 - 0.5
    batch = {"obs": seq}
    vq_loss, _ = idm.label(batch)
    wm_loss = wm.label(batch)
    return batch, wm_loss, vq_loss


def _largest(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.detach().double() - b.detach().double()).abs().max())


def test_the_defaults_are_the_reference_configuration(ref):
    cfg, vq = WorldModelConfig(), ref.vq
    assert (cfg.codebooks, cfg.latents_per_codebook, cfg.code_dim, cfg.codebook_size) == (
        vq.num_codebooks, vq.num_discrete_latents, vq.emb_dim, vq.num_embs)  # fmt: skip
    assert (cfg.commitment, cfg.ema_decay) == (vq.commitment_cost, vq.decay)
    assert cfg.base == ref.model["wm_scale"] and cfg.scale == ref.model["idm_impala_scale"]
    assert cfg.decoder_hidden == tuple(ref.model["decoder_hidden_sizes"])
    idm, wm = _reference_models(ref, cfg)
    ours = WorldModel(cfg, OBS)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(ours.forward_model) == count(wm) and count(ours.idm) == count(idm)
    # the reference's codebook start: uniform in +-5/M, its EMA sums started from it
    assert float(idm.vq.embedding.abs().max()) <= 5 / vq.num_embs
    assert float(ours.quantiser.codebook.detach().abs().max()) <= 5 / cfg.codebook_size


def test_one_batch_gives_the_same_outputs_and_losses(ref):
    cfg, idm, wm, ours = _both(ref)
    obs, next_obs = _batch()
    batch, wm_loss, vq_loss = _reference_step(idm, wm, obs, next_obs)
    s, s_next = LAYOUT.images(obs.float() / 255), LAYOUT.images(next_obs.float() / 255)
    perm = latent_permutation(cfg)
    latent = ours.idm(s, s_next)
    quantised = ours.quantiser(latent)
    predicted = ours.forward_model(s, quantised.latent)
    codes = batch["la_qinds"][..., 0]  # (B, codebooks, latents)
    diffs = {
        "latent": _largest(latent, batch["la"][:, perm]),
        "quantised": _largest(quantised.latent, batch["la_q"][:, perm]),
        "prediction": _largest(predicted, batch["wm_pred"] + 0.5),
        "commitment": _largest(quantised.commitment, vq_loss),
        "codebook": _largest(ours.quantiser.codebook, idm.vq.embedding),
        "ema_count": _largest(ours.quantiser.ema_count, idm.vq.ema_count),
        "ema_sum": _largest(ours.quantiser.ema_sum, idm.vq.ema_weight),
    }
    print("\nparity, one batch (largest absolute difference):", diffs)
    assert torch.equal(quantised.codes, codes)
    torch.testing.assert_close(latent, batch["la"][:, perm], **OUTPUT_TOL)
    torch.testing.assert_close(quantised.latent, batch["la_q"][:, perm], **OUTPUT_TOL)
    torch.testing.assert_close(predicted, batch["wm_pred"] + 0.5, **OUTPUT_TOL)
    torch.testing.assert_close(quantised.commitment, vq_loss, **OUTPUT_TOL)
    torch.testing.assert_close(ours.quantiser.codebook.detach(), idm.vq.embedding, **PARAM_TOL)
    torch.testing.assert_close(ours.quantiser.ema_count.detach(), idm.vq.ema_count, **PARAM_TOL)
    # the whole stage-1 loss, as ssilbench's loop takes it (the EMA moves once more: fresh
    # models on both sides)
    cfg, idm, wm, ours = _both(ref)
    _, wm_loss, vq_loss = _reference_step(idm, wm, obs, next_obs)
    loss = ours.loss(s, s_next)
    print(
        "parity, stage-1 loss:",
        float(loss.detach()),
        "reference:",
        float((wm_loss + vq_loss).detach()),
    )
    torch.testing.assert_close(loss, wm_loss + vq_loss, **OUTPUT_TOL)


def _reference_lr(step: int, lr: float, steps: int = 50_000) -> float:
    # the reference's stage-1 schedule: piecewise linear through (0, 10%), (50, 100%) and
    # (steps + 1, 1%) of a stage of ``steps`` (its config: 50,000)
    return float(np.interp(step, [0, 50, steps + 1], [0.1 * lr, lr, 0.01 * lr]))


def _state(idm, wm, cfg: WorldModelConfig) -> dict[str, torch.Tensor]:
    state = {f"idm.{k}": v for k, v in idm.state_dict().items()}
    state |= {f"wm.{k}": v for k, v in wm.state_dict().items()}
    return to_ssilbench(state, cfg, OBS[0], world_model_mapping(cfg))


def _update_gaps(ours: WorldModel, expected: dict, initial: dict) -> dict[str, float]:
    """Per trained tensor, ||ours - reference|| / ||reference - initial||: how far apart the
    two are after training, against how far training moved the reference."""
    trained = {k for k, p in ours.named_parameters() if p.grad is not None}
    actual = ours.state_dict()
    return {k: float((actual[k] - expected[k]).double().norm()
                     / (expected[k] - initial[k]).double().norm().clamp_min(1e-30))
            for k in sorted(trained)}  # fmt: skip


def _overall_gap(ours: WorldModel, expected: dict, initial: dict, trained) -> float:
    """||ours - reference|| / ||reference - initial|| over all trained weights together."""
    actual = ours.state_dict()
    num = sum(float((actual[k] - expected[k]).double().norm() ** 2) for k in trained)
    den = sum(float((expected[k] - initial[k]).double().norm() ** 2) for k in trained)
    return (num / den) ** 0.5


def _reference_training(
    ref_models, obs, next_obs, rows_seen, lr, make_optimiser, steps: int = 50_000
) -> list:
    """The reference's stage-1 loop on ``rows_seen``, as a stage of ``steps`` steps would
    schedule its learning rate (the first few steps of its 50,000 by default)."""
    idm, wm = ref_models
    params = [*idm.parameters(), *wm.parameters()]
    opt = make_optimiser(params)
    losses = []
    for step, rows in enumerate(rows_seen):
        for group in opt.param_groups:
            group["lr"] = _reference_lr(step, lr, steps)
        _, wm_loss, vq_loss = _reference_step(idm, wm, obs[rows], next_obs[rows])
        opt.zero_grad()
        (wm_loss + vq_loss).backward()
        torch.nn.utils.clip_grad_norm_(params, 2)
        opt.step()
        losses.append(float(wm_loss + vq_loss))
    return losses


def test_the_same_parameters_after_sgd_steps(ref):
    # Plain SGD moves each weight by lr x its gradient, so equal parameters after N steps
    # mean equal gradients at every step (Adam, below, rescales rounding noise to full steps).
    # A rate far above Adam's makes the steps large enough to tell apart.
    cfg, idm, wm, ours = _both(ref)
    initial = {k: v.detach().clone() for k, v in ours.state_dict().items()}
    obs, next_obs = _batch(1)
    s, s_next = LAYOUT.images(obs.float() / 255), LAYOUT.images(next_obs.float() / 255)
    rows_seen = [torch.randperm(BATCH, generator=torch.Generator().manual_seed(i))
                 for i in range(STEPS)]  # fmt: skip
    params = [p for p in ours.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=SGD_LR)
    losses = []
    for step, rows in enumerate(rows_seen):
        set_lr(opt, SGD_LR, schedules(cfg)[0], step, STEPS)
        loss = ours.loss(s[rows], s_next[rows])
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        opt.step()
        losses.append(float(loss))
    theirs = _reference_training((idm, wm), obs, next_obs, rows_seen, SGD_LR,
                                 lambda p: torch.optim.SGD(p, lr=SGD_LR))  # fmt: skip
    expected = _state(idm, wm, cfg)
    gaps = _update_gaps(ours, expected, initial)
    overall = _overall_gap(ours, expected, initial, gaps)
    actual = ours.state_dict()
    everything = max(_largest(actual[k], v) for k, v in expected.items())
    print(f"\nparity, {STEPS} SGD steps: losses {losses} / reference {theirs}; largest "
          f"difference of any tensor {everything:.3g}; update gap over all weights "
          f"{overall:.3g}")  # fmt: skip
    assert losses == pytest.approx(theirs, rel=1e-5)
    assert overall < 1e-3, overall
    # Every tensor to float32 rounding: ssilbench's channels-last kernels (its CPU layout) sum
    # in another order than the reference's contiguous ones, so the weights agree to a few
    # 1e-5 (measured: 1.35e-05 at most; identical kernels gave 1.8e-07), not bit for bit.
    for key, value in expected.items():
        torch.testing.assert_close(actual[key].float(), value.float(), rtol=1e-4, atol=5e-5,
                                   msg=key)  # fmt: skip


def test_the_same_parameters_after_adam_steps_of_the_stage_one_loop(ref):
    cfg, idm, wm, ours = _both(ref)
    initial = {k: v.detach().clone() for k, v in ours.state_dict().items()}
    obs, next_obs = _batch(1)
    s, s_next = LAYOUT.images(obs.float() / 255), LAYOUT.images(next_obs.float() / 255)
    rows_seen: list[torch.Tensor] = []
    losses: list[float] = []

    def loss(rows) -> torch.Tensor:
        rows = torch.as_tensor(np.arange(BATCH)[rows])
        rows_seen.append(rows)
        value = ours.loss(s[rows], s_next[rows])
        losses.append(float(value))
        return value

    # ssilbench's stage-1 loop as train_world_model runs it (Adam, clip, warm-up schedule)
    plan = StagePlan([Stage("world_model", STEPS)], eval_every=10**9, evaluate=lambda p: 0.0)
    optimise(ours.parameters(), loss, BATCH, plan.stage("world_model"), lr=cfg.world_model_lr,
             batch_size=BATCH, seed=cfg.world_model_seed, clip_grad_norm=cfg.grad_clip,
             schedule=schedules(cfg)[0])  # fmt: skip
    for step in range(STEPS):  # the same learning rate at every step
        ssil_lr = cfg.world_model_lr * schedules(cfg)[0].factor(step, STEPS)
        assert ssil_lr == pytest.approx(_reference_lr(step, cfg.world_model_lr), rel=1e-12)
    theirs = _reference_training((idm, wm), obs, next_obs, rows_seen, cfg.world_model_lr,
                                 lambda p: torch.optim.Adam(p, lr=cfg.world_model_lr))  # fmt: skip
    expected = _state(idm, wm, cfg)
    gaps = _update_gaps(ours, expected, initial)
    overall = _overall_gap(ours, expected, initial, gaps)
    print(f"\nparity, {STEPS} Adam steps of optimise(): losses {losses} / reference {theirs}; "
          f"update gap over all weights {overall:.3g}, largest per tensor "
          f"{max(gaps.values()):.3g}")  # fmt: skip
    assert len(rows_seen) == STEPS
    assert losses == pytest.approx(theirs, rel=1e-5)
    # Adam divides each gradient by its own magnitude, so the float32 rounding noise of
    # weights whose gradients cancel (the convolutions before BatchNorm) becomes a step of
    # +-lr in either implementation: the weights agree to a few percent of what training
    # moved them, where a different rate, clip, schedule or loss would differ by all of it.
    assert overall < 0.1, overall


def test_the_latent_policy_and_the_decoding_head_match(ref):
    cfg = WorldModelConfig()
    torch.manual_seed(0)
    policy = ref.models.Policy(OBS, ref.la_dim, cfg.scale)
    hidden, width = [], ref.la_dim
    for h in ref.model["decoder_hidden_sizes"]:
        hidden += [torch.nn.Linear(width, h), torch.nn.ReLU()]
        width = h
    decoder = torch.nn.Sequential(*hidden, torch.nn.Linear(width, ACTIONS))
    ours = impala_net(cfg, OBS, cfg.latent_dim)
    ours_decoder = decoder_net(cfg, ACTIONS)
    # Sequential(Centre, ImpalaTrunk, head): the trunk is item 1, the head's Linear item 2.0
    pairs = _impala_keys("", "1.") + [("fc", "1.fc"), ("policy_head", "2.0")]
    state = {}
    for key, value in policy.state_dict().items():
        if key.startswith("value_head"):
            continue  # the reference policy's PPO value head, unused offline
        src, dst = next(p for p in pairs if key.startswith(p[0] + "."))
        state[dst + key[len(src) :]] = value
    ours.load_state_dict(state)
    ours_decoder.load_state_dict(decoder.state_dict())
    ours = LAYOUT.module(ours)
    obs = _batch(2)[0]
    theirs = decoder(policy(obs.float() / 255 - 0.5))
    mine = ours_decoder(LAYOUT.forward(ours, obs.float() / 255))
    print("\nparity, latent policy and decoder:", _largest(mine, theirs))
    torch.testing.assert_close(mine, theirs, **OUTPUT_TOL)


def _moving_square(n: int, seed: int) -> torch.Tensor:
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


@pytest.mark.parametrize("optimiser", ["adam", "sgd"])
def test_a_short_stage_one_run_follows_the_same_curve(ref, optimiser):
    # Both trained from the same weights on the same rows of a small moving-square set:
    # with Adam by their own loops (ssilbench's ``optimise``), with SGD by the same loop as
    # the SGD test above. Printed for the method card.
    cfg, idm, wm, ours = _both(ref)
    frames = _moving_square(TRANSITIONS, seed=0)
    obs, next_obs = frames[:-1], frames[1:]
    s, s_next = LAYOUT.images(obs.float() / 255), LAYOUT.images(next_obs.float() / 255)
    rows_seen: list[torch.Tensor] = []
    losses: list[float] = []

    def loss(rows) -> torch.Tensor:
        rows = torch.as_tensor(np.arange(TRANSITIONS)[rows])
        rows_seen.append(rows)
        value = ours.loss(s[rows], s_next[rows])
        losses.append(float(value.detach()))
        return value

    if optimiser == "adam":
        lr, make = cfg.world_model_lr, lambda p: torch.optim.Adam(p, lr=cfg.world_model_lr)
        plan = StagePlan([Stage("world_model", LONG)], eval_every=10**9, evaluate=lambda p: 0.0)
        optimise(ours.parameters(), loss, TRANSITIONS, plan.stage("world_model"), lr=lr,
                 batch_size=SHORT_BATCH, seed=cfg.world_model_seed,
                 clip_grad_norm=cfg.grad_clip, schedule=schedules(cfg)[0])  # fmt: skip
    else:
        lr, make = SGD_LR, lambda p: torch.optim.SGD(p, lr=SGD_LR)
        params = [p for p in ours.parameters() if p.requires_grad]
        opt, g = make(params), torch.Generator().manual_seed(0)
        for step in range(LONG):
            set_lr(opt, lr, schedules(cfg)[0], step, LONG)
            value = loss(torch.randperm(TRANSITIONS, generator=g)[:SHORT_BATCH].numpy())
            opt.zero_grad()
            value.backward()
            torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
            opt.step()
    # the reference run as long as ssilbench's: its schedule decays over the same 100 steps
    theirs = _reference_training((idm, wm), obs, next_obs, rows_seen, lr, make, steps=LONG)
    with torch.no_grad():
        codes = ours.eval().quantiser(ours.idm(s, s_next)).codes
        their_codes = idm.eval()(torch.stack([obs, next_obs], 1).float() / 255 - 0.5)[0]
    their_codes = their_codes["la_qinds"][..., 0]
    used = [len(codes[:, g].unique()) for g in range(cfg.codebooks)]
    their_used = [len(their_codes[:, g].unique()) for g in range(cfg.codebooks)]
    window = LONG // 5
    curve = [round(float(np.mean(losses[i : i + window])), 5) for i in range(0, LONG, window)]
    their_curve = [round(float(np.mean(theirs[i : i + window])), 5) for i in range(0, LONG, window)]
    print(f"\nparity, {optimiser}, {LONG} steps of batch {SHORT_BATCH} on moving squares, mean "
          f"loss per {window} steps: {curve} / reference {their_curve}; codes in use per "
          f"codebook (of {cfg.codebook_size}): {used} / reference {their_used}")  # fmt: skip
    assert curve[-1] < curve[0] / 3 and their_curve[-1] < their_curve[0] / 3
    # The first 40 steps agree to a few digits (SGD: equal gradients at every step; Adam:
    # its amplified rounding, see above). Under SGD the whole curve follows, up to the
    # schedules' documented end points (the reference decays to step 101, ssilbench to 100;
    # measured: 0.7% apart over the last 20 steps). Adam is held only to the same scale
    # (not measured again since both sides got one schedule).
    close = 1e-3 if optimiser == "sgd" else 1e-2
    assert curve[:2] == pytest.approx(their_curve[:2], rel=close)
    if optimiser == "sgd":
        assert curve == pytest.approx(their_curve, rel=0.03)
    assert 2 / 3 < curve[-1] / their_curve[-1] < 3 / 2
    assert used == their_used
