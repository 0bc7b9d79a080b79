"""Parity of UVA's fused layout, masking and heads with the UVA reference code.

Runs only when ``SSILBENCH_UVA_REFERENCE`` names a local, extracted checkout of
``ShuangLI59/unified_video_action`` (the folder holding ``unified_video_action/``); nothing
is downloaded. The reference's model file (``model/autoregressive/mar_con_unified.py``) is
imported with its own dependencies, ``timm``, ``einops`` and ``scipy``, which ssilbench does
not need: install them apart (for example ``pip install --target DIR timm einops scipy`` and
``PYTHONPATH=DIR``); without them the tests skip with that reason. ``timm`` imports
``torchvision`` for parts the reference does not use; where torchvision is not installed a
stand-in module answers those imports while the reference loads. With
``SSILBENCH_MAR_REFERENCE`` naming a checkout of ``LTH14/mar`` the MAR-B key table is also
compared with MAR's own ``mar_base``.

Both models are built small on CPU (width 64, 2 + 2 blocks, diffusion MLPs of 2 x 32) but
with the reference's fixed geometry (4 frames of 16 x 16 latent tokens, 16 actions, the
64-token text buffer); the reference's weights are perturbed (its zero initialisations
would make the heads' comparison empty) and copied into ssilbench's modules by the mapping
of ``docs/methods/uva.md``. Then, in evaluation mode:

- the same ratio and orders give the same mask (one ratio per batch, the same patches in
  every frame), and ssilbench's ratio draw is scipy's truncated normal, quantile by quantile;
- the same inputs give the same transformer outputs in the video, forward ("dynamic"),
  full and policy modes, with and without the language condition;
- the action head's pooled features and both diffusion MLPs' noise predictions agree;
- the MAR-B tensors the reference loads into its ``mar_base`` by name and shape are
  exactly those ssilbench's mapping loads.

The inverse mode (the paper's change), the action head's diffusion loss and its DDIM sampler
are compared in ``test_reference_parity_diffusion.py``. ``python -m pytest -s`` prints the
largest differences.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from ssilbench_uva import checkpoints as ck
from ssilbench_uva.model import FusedUVANet, Layout
from ssilbench_uva.modes import Masks, reference_mask, truncated_ratio

ENV = "SSILBENCH_UVA_REFERENCE"
MAR_ENV = "SSILBENCH_MAR_REFERENCE"
WIDTH, DEPTH, HEADS, DIFF_W, DIFF_D = 64, 2, 4, 32, 2
ACTIONS, BATCH, FRAMES, PATCHES, LATENT, CHUNK = 7, 2, 4, 256, 16, 16
TOL = {"rtol": 1e-4, "atol": 1e-5}


class _Meta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()


class _Anything(metaclass=_Meta):
    """Whatever timm's unused torchvision imports ask for at import time."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()

    def __call__(self, *args, **kwargs):
        return _Anything()

    def __hash__(self) -> int:
        return id(self)


class _StandIn(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Meta(name, (_Anything,), {})


_TORCHVISION = ("torchvision", "torchvision.ops", "torchvision.ops.misc",
                "torchvision.transforms", "torchvision.transforms.functional",
                "torchvision.transforms.v2", "torchvision.transforms.v2.functional",
                "torchvision.datasets", "torchvision.io", "torchvision.utils")  # fmt: skip


def _torchvision_stand_in() -> dict[str, types.ModuleType]:
    modules = {}
    for name in _TORCHVISION:
        module = _StandIn(name)
        module.__path__ = []
        modules[name] = module
    for name in _TORCHVISION[1:]:
        parent, child = name.rsplit(".", 1)
        setattr(modules[parent], child, modules[name])
    return modules


def _import_with(root: Path, module: str, stand_ins: dict[str, types.ModuleType]):
    saved = {name: sys.modules.get(name) for name in stand_ins}
    sys.modules.update(stand_ins)
    sys.path.insert(0, str(root))
    try:
        return importlib.import_module(module)
    finally:
        sys.path.remove(str(root))
        for name, old in saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old


def _dependencies() -> dict[str, types.ModuleType]:
    for name in ("timm", "einops", "scipy"):  # found, not imported: timm needs the stand-in
        if importlib.util.find_spec(name) is None:
            pytest.skip(f"the UVA reference code needs {name}; install it apart (see this "
                        "file's docstring)")  # fmt: skip
    if importlib.util.find_spec("torchvision") is None:
        return _torchvision_stand_in()
    return {}


@pytest.fixture(scope="module")
def mar() -> types.ModuleType:
    root = os.environ.get(ENV)
    if not root:
        pytest.skip(f"set {ENV} to an extracted checkout of ShuangLI59/unified_video_action "
                    "to compare with it")  # fmt: skip
    path = Path(root).expanduser().resolve()
    model = path / "unified_video_action/model/autoregressive/mar_con_unified.py"
    if not model.exists():
        pytest.skip(f"{ENV}={root}: no UVA checkout there (expected {model.relative_to(path)})")
    stand_ins = _dependencies()
    return _import_with(path, "unified_video_action.model.autoregressive.mar_con_unified",
                        stand_ins)  # fmt: skip


def _reference(mar, language: bool, **sizes):
    kwargs = {"encoder_embed_dim": WIDTH, "encoder_depth": DEPTH, "encoder_num_heads": HEADS,
              "decoder_embed_dim": WIDTH, "decoder_depth": DEPTH, "decoder_num_heads": HEADS,
              "diffloss_d": DIFF_D, "diffloss_w": DIFF_W, "diffloss_act_d": DIFF_D,
              "diffloss_act_w": DIFF_W, **sizes}  # fmt: skip
    return mar.MAR(
        img_size=256, vae_stride=16, patch_size=1, mlp_ratio=4,
        norm_layer=partial(nn.LayerNorm, eps=1e-6), vae_embed_dim=LATENT, mask_ratio_min=0.7,
        label_drop_prob=0.1, attn_dropout=0.1, proj_dropout=0.1, num_sampling_steps="100",
        predict_video=True, act_diff_training_steps=1000, act_diff_testing_steps="100",
        action_model_params={"predict_action": True, "act_model_type": "conv_fc"},
        task_name="libero_10", different_history_freq=False, use_history_action=False,
        action_mask_ratio=0.5, use_proprioception=False, predict_wrist_img=False,
        predict_proprioception=False, language_emb_model="clip" if language else None,
        shape_meta={"action": {"shape": [ACTIONS]}}, **kwargs,
    )  # fmt: skip


LAYOUT = Layout(history=FRAMES, future=FRAMES, cameras=1, patches=PATCHES, latent=LATENT,
                chunk=CHUNK, action_dim=ACTIONS, proprio_dim=0, grid=(16, 16))  # fmt: skip

RENAMES = {
    "text_proj_cond.": "condition.condition_proj.",
    "fake_latent": "condition.fake_latent",
    "text_pos_embed": "condition.condition_pos_embed",
    "decoder_text_pos_embed": "condition.decoder_condition_pos_embed",
    "diffactloss.net.": "action_head.net.",
    "diffactloss.": "action_pool.",
}
"""Reference name (prefix) -> ssilbench's (docs/methods/uva.md, "Parity"); the rest keep
their names. Diffusion MLPs' output layers: the first (noise) half of the rows."""


def ssilbench_name(name: str) -> str:
    for ref, ours in RENAMES.items():
        if name == ref or (ref.endswith(".") and name.startswith(ref)):
            return ours + name[len(ref) :] if ref.endswith(".") else ours
    return name


def _pair(mar, language: bool, **heads):
    """The reference and ssilbench's network with its weights; ``heads``: the diffusion
    heads' options (``diffusion``, ``temperature``)."""
    torch.manual_seed(0)
    ref = _reference(mar, language).eval()
    with torch.no_grad():  # zero initialisations would make the comparison empty
        for p in ref.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    ours = FusedUVANet(LAYOUT, WIDTH, 2 * DEPTH, HEADS, DIFF_W, DIFF_D, "reference", 1000,
                       100, dropout=0.1, condition_dim=512 if language else None,
                       condition_tokens=64, **heads).eval()  # fmt: skip
    own = ours.state_dict()
    copied = {}
    for name, tensor in ref.state_dict().items():
        target = ssilbench_name(name)
        assert target in own, f"reference {name} -> {target}: no such parameter here"
        if target.endswith(("net.final_layer.linear.weight", "net.final_layer.linear.bias")):
            tensor = tensor[: own[target].shape[0]]
        assert tensor.shape == own[target].shape, name
        copied[target] = tensor
    assert set(copied) == set(own), set(own) ^ set(copied)  # the mapping covers both sides
    ours.load_state_dict(copied)
    ref.device = torch.device("cpu")  # the reference sets it in forward()
    return ref, ours


def _inputs():
    g = torch.Generator().manual_seed(1)
    future = torch.randn(BATCH, FRAMES, PATCHES, LATENT, generator=g)
    history = torch.randn(BATCH, FRAMES, PATCHES, LATENT, generator=g)
    actions = torch.rand(BATCH, CHUNK, ACTIONS, generator=g) * 2 - 1
    text = torch.randn(BATCH, 512, generator=g)
    return future, history, actions, text


def _masks(seed: int) -> tuple[torch.Tensor, torch.Tensor, float]:
    """ssilbench's reference mask (B, frames, patches), and the ratio and orders it drew."""
    g = torch.Generator().manual_seed(seed)
    mask = reference_mask(BATCH, FRAMES * PATCHES, FRAMES, 0.7, g)
    g = torch.Generator().manual_seed(seed)
    ratio = truncated_ratio(0.7, g)
    orders = torch.rand(BATCH, PATCHES, generator=g).argsort(dim=1)
    return mask.view(BATCH, FRAMES, PATCHES), orders, ratio


def test_the_same_ratio_and_orders_give_the_same_mask(mar):
    ref = _reference(mar, language=False)
    x = torch.zeros(BATCH, FRAMES, PATCHES, LATENT)
    for seed in range(5):
        ours, orders, ratio = _masks(seed)
        ref.mask_ratio_generator = types.SimpleNamespace(rvs=lambda n, r=ratio: np.array([r] * n))
        theirs = ref.random_masking(x, orders)
        assert torch.equal(theirs.bool(), ours)
    # the ratio: scipy's truncnorm((0.7 - 1) / 0.25, 0, loc=1, scale=0.25), quantile by quantile
    truncnorm = _reference(mar, language=False).mask_ratio_generator
    g = torch.Generator().manual_seed(7)
    for _ in range(20):
        state = g.get_state()  # the uniform draw truncated_ratio is about to make
        u = float(torch.rand((), generator=g, dtype=torch.float64))
        g.set_state(state)
        assert abs(truncated_ratio(0.7, g) - float(truncnorm.ppf(u))) < 1e-9


@pytest.mark.parametrize("language", [False, True], ids=["unconditioned", "language"])
def test_same_outputs_in_every_mode_with_copied_weights(mar, language):
    ref, ours = _pair(mar, language)
    future, history, actions, text = _inputs()
    mask, _, _ = _masks(3)
    worst, outputs = 0.0, []
    with torch.no_grad():
        text_latents = ref.text_proj_cond(text) if language else None
        for mode in ("video_model", "dynamic_model", "full_dynamic_model", "policy_model"):
            encoded = ref.forward_mae_encoder(future, mask.float(), history, text_latents,
                                              nactions=actions, task_mode=mode)  # fmt: skip
            z_ref = ref.forward_mae_decoder(encoded, mask.float())
            hidden = mask.flatten(1)
            if mode == "policy_model":  # every future token hidden
                hidden = torch.ones_like(hidden)
            shown = torch.full((BATCH,), mode == "dynamic_model")
            masks = Masks(future_visible=~hidden, actions_visible=shown, video_target=hidden,
                          action_loss=True)  # fmt: skip
            z, features = ours(history.flatten(1, 2), future.flatten(1, 2), None, actions, masks,
                               condition=text if language else None)  # fmt: skip
            assert z.shape == z_ref.shape == (BATCH, FRAMES * PATCHES, WIDTH)
            assert features.shape == (BATCH, CHUNK, WIDTH)
            worst = max(worst, float((z - z_ref).abs().max()))
            torch.testing.assert_close(z, z_ref, **TOL)
            outputs.append(z)
    # the modes do differ (what each hides matters), so the agreement is not vacuous
    assert not torch.allclose(outputs[0], outputs[1]) and not torch.allclose(outputs[0], outputs[3])
    print(f"\nlargest transformer-output difference ({'with' if language else 'no'} text): "
          f"{worst:.2e}")  # fmt: skip


def _recorded(net: nn.Module) -> list:
    calls = []
    forward = net.forward

    def record(x, t, c):
        out = forward(x, t, c)
        calls.append((x, t, c, out))
        return out

    net.forward = record
    return calls


def test_same_action_features_and_noise_predictions(mar):
    ref, ours = _pair(mar, language=False)
    future, history, actions, _ = _inputs()
    mask, _, _ = _masks(4)
    with torch.no_grad():
        z_ref = ref.forward_mae_decoder(
            ref.forward_mae_encoder(future, mask.float(), history, None, nactions=actions,
                                    task_mode="full_dynamic_model"), mask.float())  # fmt: skip
        act_calls, video_calls = _recorded(ref.diffactloss.net), _recorded(ref.diffloss.net)
        ref.diffactloss(target=actions, z=z_ref, task_mode="full_dynamic_model")
        ref.diffloss(target=future.flatten(1, 2), z=z_ref, mask=mask.flatten(1).float())
        x, t, c, out = act_calls[0]
        features = ours.action_pool(z_ref)  # the pooled conv + FC readout
        torch.testing.assert_close(features.flatten(0, 1), c, **TOL)
        torch.testing.assert_close(ours.action_head.net(x, t, c), out[:, :ACTIONS], **TOL)
        x, t, c, out = video_calls[0]
        torch.testing.assert_close(ours.diffloss.net(x, t, c), out[:, :LATENT], **TOL)
    gap = float((features.flatten(0, 1) - act_calls[0][2]).abs().max())
    print(f"\naction features: largest difference {gap:.2e}")


def test_mar_b_tensors_load_where_the_reference_loads_them(mar):
    """The reference loads a MAR checkpoint by name and shape into its mar_base; ssilbench's
    mapping loads the same MAR-B tensors (one of them, the diffusion MLP's output layer, as
    its noise half)."""
    with torch.device("meta"):
        ref = _reference(mar, language=True, encoder_embed_dim=768, encoder_depth=12,
                         encoder_num_heads=12, decoder_embed_dim=768, decoder_depth=12,
                         decoder_num_heads=12, diffloss_d=6, diffloss_w=1024,
                         diffloss_act_d=6, diffloss_act_w=1024)  # fmt: skip
        base = Layout(FRAMES, FRAMES, 1, PATCHES, LATENT, CHUNK, ACTIONS, 0, grid=(16, 16))
        ours = FusedUVANet(base, 768, 24, 12, 1024, 6, "reference", 1000, 100,
                           condition_dim=512)  # fmt: skip
    theirs = {k: tuple(v.shape) for k, v in ref.state_dict().items()}
    by_reference = {k for k, s in ck.MAR_B.items() if theirs.get(k) == s}
    state = {k: torch.zeros(()).expand(s) for k, s in ck.MAR_B.items()}
    own = {k: v.shape for k, v in ours.state_dict().items()}
    mapped, left = ck.map_mar(state, own, "backbone", "mar_b")
    by_ssilbench = {k for k in ck.MAR_B if k not in left}
    assert by_ssilbench == by_reference
    print(f"\nMAR-B tensors loaded by both: {len(by_reference)} of {len(ck.MAR_B)}")


def test_mar_b_table_is_mars_own_mar_base():
    root = os.environ.get(MAR_ENV)
    if not root:
        pytest.skip(f"set {MAR_ENV} to an extracted checkout of LTH14/mar to compare with it")
    path = Path(root).expanduser().resolve()
    if not (path / "models" / "mar.py").exists():
        pytest.skip(f"{MAR_ENV}={root}: no MAR checkout there (expected models/mar.py)")
    stand_ins = _dependencies()
    module = _import_with(path, "models.mar", stand_ins)
    try:
        with torch.device("meta"):
            model = module.mar_base(img_size=256, vae_stride=16, patch_size=1, vae_embed_dim=16,
                                    diffloss_d=6, diffloss_w=1024)  # fmt: skip
    finally:
        for name in [n for n in sys.modules if n.split(".")[0] in ("models", "diffusion")]:
            sys.modules.pop(name)
    assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == ck.MAR_B


# --- LIBERO-10's actions: the reference's normaliser ------------------------------------------
@pytest.fixture(scope="module")
def normalize_util() -> types.ModuleType:
    root = os.environ.get(ENV)
    if not root:
        pytest.skip(f"set {ENV} to an extracted checkout of ShuangLI59/unified_video_action "
                    "to compare with it")  # fmt: skip
    path = Path(root).expanduser().resolve()
    if not (path / "unified_video_action/common/normalize_util.py").exists():
        pytest.skip(f"{ENV}={root}: no UVA checkout there")
    if importlib.util.find_spec("zarr") is None:
        pytest.skip("the UVA reference's normaliser module imports zarr; install it apart")
    return _import_with(path, "unified_video_action.common.normalize_util", {})


def test_libero_actions_normalise_as_the_references_normaliser(normalize_util):
    """The 10 numbers of LIBERO-10 actions (position, 6-D rotation, gripper) through the
    reference's robomimic_abs_action_only_normalizer_from_stat, fitted on the same actions,
    against ssilbench's rotation_6d codec fitted on them as D_L."""
    from ssilbench.testing import load_plugins
    from ssilbench_uva.actions import ActionCodec, axis_angle_to_rotation_6d

    env = load_plugins().environments.create("libero10")
    spec = env.load("bowl-drawer", env.Options()).spec
    rng = np.random.default_rng(0)
    actions = np.concatenate([rng.uniform(-0.7, 0.9, (300, 3)), rng.uniform(-0.4, 0.4, (300, 3)),
                              rng.choice([-1.0, 1.0], (300, 1))], 1).astype(np.float32)  # fmt: skip
    a = torch.from_numpy(actions)
    ten = torch.cat([a[:, :3], axis_angle_to_rotation_6d(a[:, 3:6].double()).float(), a[:, 6:]], 1)
    reference = normalize_util.robomimic_abs_action_only_normalizer_from_stat(
        normalize_util.array_to_stats(ten.numpy())
    )
    codec = ActionCodec(spec, "rotation_6d", actions, "cpu")
    expected = reference.normalize(ten).detach()
    ours = codec.encode(a)
    difference = (ours - expected).abs().max().item()
    print(f"\nLIBERO action normalisation: largest difference {difference:.2e}")
    assert difference < 1e-6
    back = reference.unnormalize(expected).detach()
    assert torch.allclose(back, ten, atol=1e-6)
    assert torch.allclose(codec.decode(expected), a, atol=1e-5)
