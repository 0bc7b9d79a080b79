"""Pretrained checkpoints with their real key layout: the MAR-B and KL-16 tables (written
from the public code) against ssilbench's modules, loading synthetic state dicts of exactly
that layout, and the errors for checkpoints that are not of it.

Real-size state dicts are built from one-element tensors expanded to each shape (stride 0):
a file of the whole MAR-B layout is a few kilobytes, and the networks they load into are
built on the meta device (shapes only). Values are checked where tensors actually load:
each key's tensor holds its own number, so a tensor under the wrong name shows."""

from __future__ import annotations

import argparse

import pytest
import torch

from ssilbench.api import ConfigError, SsilbenchError
from ssilbench.testing import load_plugins
from ssilbench_uva import checkpoints as ck
from ssilbench_uva.architecture import UVA, UVABase, autoencoder, layout_for, network
from ssilbench_uva.autoencoder import KLAutoencoder
from ssilbench_uva.model import FusedUVANet, Layout
from ssilbench_uva.options import UVABaseOptions, UVAOptions


def _synthetic(table: dict[str, tuple[int, ...]]) -> dict[str, torch.Tensor]:
    """One tensor per key of exactly the table's shape; key i holds the value i + 1."""
    return {
        k: torch.tensor(float(i + 1)).expand(shape) for i, (k, shape) in enumerate(table.items())
    }


def _ids(table) -> dict[str, float]:
    return {k: float(i + 1) for i, k in enumerate(table)}


@pytest.fixture(scope="module")
def pusht_spec():
    env = load_plugins().environments.create("pusht")
    return env.load("pusht", env.Options()).spec


def _meta_shapes(module_fn) -> dict[str, torch.Size]:
    with torch.device("meta"):
        module = module_fn()
    return {k: v.shape for k, v in module.state_dict().items()}


# --- the tables -----------------------------------------------------------------------------


def test_mar_b_table_is_mar_b():
    assert len(ck.MAR_B) == 364
    params = sum(torch.Size(s).numel() for s in ck.MAR_B.values())
    assert round(params / 1e6) == 208  # MAR-B: 208M parameters (the MAR paper's table)
    assert ck.MAR_B["encoder_blocks.11.attn.qkv.weight"] == (2304, 768)
    assert ck.MAR_B["diffloss.net.res_blocks.5.adaLN_modulation.1.weight"] == (3072, 1024)
    assert ck.MAR_B["diffloss.net.final_layer.linear.weight"] == (32, 1024)  # noise + variance
    assert "encoder_blocks.12.norm1.weight" not in ck.MAR_B


def test_kl16_table_is_ssilbench_autoencoder_at_kl16_sizes():
    """The autoencoder of uva_base has exactly KL-16's names and shapes: it loads 1:1."""
    o = UVABaseOptions()
    own = _meta_shapes(lambda: autoencoder(o))
    assert {k: tuple(v) for k, v in own.items()} == ck.KL16
    assert round(sum(torch.Size(s).numel() for s in ck.KL16.values()) / 1e6, 1) == 69.6


# --- MAR-B into the network -------------------------------------------------------------------


def _base_net(spec, **changes):
    o = UVABaseOptions(**changes)
    layout = layout_for(spec, o)
    return _meta_shapes(lambda: network(layout, o))


def test_mar_b_maps_onto_the_fused_network(pusht_spec):
    own = _base_net(pusht_spec, condition_dim=512)
    state = _synthetic(ck.MAR_B)
    mapped, left = ck.map_mar(state, own, "backbone", "mar_b.pth")
    ids = _ids(ck.MAR_B)
    # every MAR-B key is either loaded or left out for a stated reason
    assert set(mapped) | set(left) >= set(own) & set(mapped)
    assert len(mapped) + len(left) == len(ck.MAR_B)
    assert set(left) == set(ck.MAR_UNUSED)  # nothing else is left at uva_base's sizes
    # the transformer, both norms, decoder_embed, the video head and the null condition load
    for key in ("z_proj.weight", "z_proj_ln.bias", "encoder_blocks.0.attn.qkv.weight",
                "encoder_blocks.11.mlp.fc2.bias", "encoder_norm.weight", "decoder_embed.weight",
                "decoder_blocks.11.norm2.weight", "decoder_norm.bias",
                "diffloss.net.res_blocks.5.mlp.2.weight",
                "diffloss.net.time_embed.mlp.0.weight"):  # fmt: skip
        assert float(mapped[key].flatten()[0]) == ids[key], key
        assert mapped[key].shape == own[key]
    assert float(mapped["condition.fake_latent"][0, 0]) == ids["fake_latent"]
    # MAR's noise-and-variance output layer, whole: the default diffusion (ddpm) predicts both
    final = "diffloss.net.final_layer.linear.weight"
    assert mapped[final].shape == own[final] == (32, 1024)
    loaded = sum(own[k].numel() for k in mapped)
    # of 207.9M: all but the class embedding, the mask token and MAR's three position
    # embeddings
    assert loaded == 206_467_872
    # diffusion=ddim predicts the noise only: the noise half of the output layer loads
    ddim = _base_net(pusht_spec, condition_dim=512, diffusion="ddim")
    assert ck.map_mar(state, ddim, "backbone", "mar_b.pth")[0][final].shape == (16, 1024)


def test_mar_b_without_conditioning_and_in_the_sequence_layout(pusht_spec):
    state = _synthetic(ck.MAR_B)
    plain, left = ck.map_mar(state, _base_net(pusht_spec), "backbone", "x")
    assert "condition.fake_latent" not in plain
    assert left["fake_latent"] == "no such part in this model's layout"
    seq, left = ck.map_mar(state, _base_net(pusht_spec, token_layout="sequence"), "backbone", "x")
    assert {"z_proj.weight", "encoder_blocks.3.attn.proj.weight",
            "diffloss.net.input_proj.weight"} <= set(seq)  # fmt: skip
    for name in ("decoder_embed.weight", "encoder_norm.weight", "z_proj_ln.weight"):
        assert left[name] == "no such part in this model's layout"


def test_a_mar_b_file_loads_through_read_state_and_the_architecture_check(pusht_spec, tmp_path):
    path = tmp_path / "checkpoint-last.pth"
    state = _synthetic(ck.MAR_B)
    # MAR saves its arguments and both weight sets; the reference loads the EMA ones
    raw = {k: torch.zeros(()).expand(v.shape) for k, v in state.items()}
    args = argparse.Namespace(model="mar_base")
    torch.save({"model": raw, "model_ema": state, "args": args}, path)
    assert path.stat().st_size < 1_000_000  # (the real one: 0.8 GB)
    read = ck.read_state(path, "backbone")
    assert float(read["z_proj.weight"][0, 0]) == _ids(ck.MAR_B)["z_proj.weight"]  # EMA
    o = UVABaseOptions(backbone_checkpoint=str(path), pretrain_steps=0)
    UVABase().check(pusht_spec, o)  # shapes only: no error


def test_mar_b_end_to_end_into_a_real_network(monkeypatch, tmp_path):
    """load_backbone on real (small) tensors: the MAR layout generated at a small size stands
    in for MAR-B's table, so that the network can be built for real and its weights read."""
    small = ck.mar_keys(width=24, depth=1, seq=16, buffer=4, classes=5, diff_width=16,
                        diff_depth=1)  # fmt: skip
    monkeypatch.setattr(ck, "MAR_B", small)
    monkeypatch.setitem(ck.MAR_B_SIZES, "heads", 2)
    layout = Layout(4, 4, 1, 16, 16, 16, 2, 0, grid=(4, 4))
    net = FusedUVANet(layout, 24, 2, 2, 16, 1, "reference", 10, 3, condition_dim=7)
    g = torch.Generator().manual_seed(0)
    state = {k: torch.randn(s, generator=g) for k, s in small.items()}
    path = tmp_path / "small.pth"
    torch.save({"model_ema": {"module." + k: v for k, v in state.items()}}, path)
    logged: list[str] = []
    n = ck.load_backbone(net, path, "reference", heads=2, log=logged.append)
    own = net.state_dict()
    assert n == len(small) - len(ck.MAR_UNUSED)
    assert torch.equal(own["encoder_blocks.0.attn.qkv.weight"],
                       state["encoder_blocks.0.attn.qkv.weight"])  # fmt: skip
    assert torch.equal(own["condition.fake_latent"], state["fake_latent"])
    assert torch.equal(own["diffloss.net.final_layer.linear.weight"],
                       state["diffloss.net.final_layer.linear.weight"][:16])  # fmt: skip
    assert f"loaded {n} MAR-B tensors" in logged[0] and "ImageNet class embedding" in logged[0]


# --- errors -----------------------------------------------------------------------------------


def test_missing_unexpected_and_misshapen_keys_are_named(pusht_spec):
    own = _base_net(pusht_spec)
    state = _synthetic(ck.MAR_B)
    del state["encoder_blocks.3.mlp.fc1.bias"]
    state["head.weight"] = torch.zeros(3)
    state["decoder_norm.weight"] = torch.zeros(1024)
    with pytest.raises(ConfigError) as err:
        ck.map_mar(state, own, "backbone", "ckpt.pth")
    message = str(err.value)
    assert "1 missing (encoder_blocks.3.mlp.fc1.bias)" in message
    assert "1 unexpected (head.weight)" in message
    assert "decoder_norm.weight (1024,) instead of (768,)" in message
    assert "checkpoint_layout=by_name" in message
    assert isinstance(err.value, SsilbenchError) and err.value.exit_code == 2


def test_mar_b_into_a_model_of_other_sizes_is_refused(pusht_spec, tmp_path):
    state = _synthetic(ck.MAR_B)
    small = UVAOptions()
    own = _meta_shapes(lambda: network(layout_for(pusht_spec, small), small))
    with pytest.raises(ConfigError, match=r"do not fit this model .*MAR-B needs width 768"):
        ck.map_mar(state, own, "backbone", "ckpt.pth")
    path = tmp_path / "mar_b.pth"
    torch.save({"model_ema": state}, path)
    with pytest.raises(ConfigError, match="12 heads; this model has 4"):
        UVA().check(pusht_spec, UVAOptions(backbone_checkpoint=str(path)))
    # by_name keeps the earlier behaviour: whatever matches by name and shape (here nothing
    # with the noise-only head of ddim; ddpm's output bias has MAR-B's 32 numbers)
    with pytest.raises(ConfigError, match="none of its 364 tensors matches"):
        UVA().check(pusht_spec, UVAOptions(backbone_checkpoint=str(path), diffusion="ddim",
                                           checkpoint_layout="by_name"))  # fmt: skip


# --- KL-16 into the autoencoder ----------------------------------------------------------------


def test_kl16_maps_one_to_one_and_skips_training_losses(pusht_spec, tmp_path):
    own = _meta_shapes(lambda: autoencoder(UVABaseOptions()))
    state = _synthetic(ck.KL16)
    state["loss.discriminator.main.0.weight"] = torch.zeros(()).expand(64, 3, 4, 4)
    state["loss.logvar"] = torch.zeros(())
    mapped, skipped = ck.map_kl16(state, own, "autoencoder", "kl16.ckpt")
    assert skipped == 2 and set(mapped) == set(ck.KL16) == set(own)
    path = tmp_path / "kl16.ckpt"
    torch.save({"model": state}, path)
    UVABase().check(pusht_spec, UVABaseOptions(vae_checkpoint=str(path)))
    with pytest.raises(ConfigError, match="is KL-16, but this autoencoder's layout differs"):
        UVA().check(pusht_spec, UVAOptions(vae_checkpoint=str(path)))
    del state["decoder.up.4.attn.2.q.weight"]
    with pytest.raises(ConfigError, match=r"1 missing \(decoder.up.4.attn.2.q.weight\)"):
        ck.map_kl16(state, own, "autoencoder", "kl16.ckpt")


def test_kl16_end_to_end_into_a_real_autoencoder(monkeypatch, tmp_path):
    small = ck.kl_keys(ch=8, ch_mult=(1, 2), blocks=1, z=4, attention=True)
    monkeypatch.setattr(ck, "KL16", small)
    vae = KLAutoencoder(8, (1, 2), 1, 4, attention=True)
    g = torch.Generator().manual_seed(0)
    state = {k: torch.randn(s, generator=g) for k, s in small.items()}
    path = tmp_path / "kl.ckpt"
    torch.save({"model": state}, path)
    logged: list[str] = []
    assert ck.load_autoencoder(vae, path, "reference", log=logged.append) == len(small)
    assert all(torch.equal(vae.state_dict()[k], v) for k, v in state.items())
    assert logged == [f"autoencoder: loaded all {len(small)} KL-16 tensors from {path}"]
