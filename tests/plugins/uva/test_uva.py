"""UVA: the task-mode masks, windows, autoencoder loading, diffusion heads, and the role
model that bc / idm_labeling / vm_idm / uva train (on a small synthetic image task)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ssilbench.api import ConfigError
from ssilbench_uva.autoencoder import KLAutoencoder, load_matching
from ssilbench_uva.diffusion import DiffusionHead, LinearActionHead
from ssilbench_uva.model import Layout, UVANet
from ssilbench_uva.modes import MODES, mode_masks, modes_of
from ssilbench_uva.options import UVABaseOptions, UVAOptions
from ssilbench_uva.windows import chunk_targets, make_windows

# --- modes: each masks exactly what the table says ------------------------------------------

TABLE = {
    # mode: (future visible, actions visible, video loss on masked future, action loss)
    "policy": ("none", False, False, True),
    "video": ("some", False, True, False),
    "forward": ("none", True, True, False),
    "inverse": ("all", False, False, True),
    "full": ("none", False, True, True),
}


@pytest.mark.parametrize("mode", MODES)
def test_mode_masks_follow_the_table(mode):
    future, actions, video_loss, action_loss = TABLE[mode]
    g = torch.Generator().manual_seed(0)
    m = mode_masks(mode, batch=64, future_tokens=40, generator=g)
    visible = m.future_visible
    if future == "none":
        assert not visible.any()
    elif future == "all":
        assert visible.all()
    else:  # video mode: each sample hides at least 70% of its future tokens, not always all
        hidden_share = (~visible).float().mean(dim=1)
        assert (hidden_share >= 0.7).all()
        assert (hidden_share < 1).any()
        assert visible.any(dim=1).float().mean() > 0.5
    assert bool(m.actions_visible.all()) is actions and bool(m.actions_visible.any()) is actions
    assert m.video_loss is video_loss
    if video_loss:
        assert torch.equal(m.video_target, ~visible)  # exactly the masked future tokens
    else:
        assert not m.video_target.any()
    assert m.action_loss is action_loss


def test_video_mode_draws_a_different_mask_per_sample():
    m = mode_masks("video", batch=8, future_tokens=100, generator=torch.Generator().manual_seed(1))
    assert len({tuple(row.tolist()) for row in m.future_visible}) == 8


def test_roles_map_to_modes_and_unknown_ones_are_refused():
    assert modes_of(["policy"]) == ("policy",)
    assert modes_of(["idm"]) == ("inverse",)
    assert modes_of(["video", "forward"]) == ("video", "forward")
    with pytest.raises(ValueError, match="unknown UVA role"):
        modes_of(["teleport"])


LAYOUT = Layout(history=2, future=2, cameras=1, patches=4, latent=3, chunk=4, action_dim=2,
                proprio_dim=2)  # fmt: skip


def _net(action_head: str = "diffusion") -> UVANet:
    torch.manual_seed(0)
    return UVANet(LAYOUT, width=16, depth=2, heads=2, head_width=16, head_depth=1,
                  action_head=action_head, train_steps=10, sample_steps=3).eval()  # fmt: skip


def _inputs(seed: int):
    g = torch.Generator().manual_seed(seed)
    hist = torch.randn(3, LAYOUT.history_tokens, LAYOUT.latent, generator=g)
    fut = torch.randn(3, LAYOUT.future_tokens, LAYOUT.latent, generator=g)
    proprio = torch.randn(3, LAYOUT.history, LAYOUT.proprio_dim, generator=g)
    actions = torch.randn(3, LAYOUT.chunk, LAYOUT.action_dim, generator=g)
    return hist, fut, proprio, actions


@pytest.mark.parametrize("mode", MODES)
def test_the_network_sees_only_what_a_mode_leaves_visible(mode):
    """Changing a hidden input changes no output; changing a visible one does."""
    net = _net()
    hist, fut, proprio, actions = _inputs(0)
    _, fut2, _, actions2 = _inputs(1)
    masks = mode_masks(mode, 3, LAYOUT.future_tokens, torch.Generator().manual_seed(2))
    with torch.no_grad():
        base = net(hist, fut, proprio, actions, masks)
        other_future = net(hist, fut2, proprio, actions, masks)
        other_actions = net(hist, fut, proprio, actions2, masks)
    future_seen = bool(masks.future_visible.any())
    actions_seen = bool(masks.actions_visible.any())
    for a, b in zip(base, other_future, strict=True):
        assert torch.allclose(a, b) is not future_seen
    for a, b in zip(base, other_actions, strict=True):
        assert torch.allclose(a, b) is not actions_seen


def test_unknown_actions_stay_hidden_in_forward_mode():
    """Under a transition budget a chunk may hold unlabeled actions: never shown as inputs."""
    net = _net()
    hist, fut, proprio, actions = _inputs(0)
    masks = mode_masks("forward", 3, LAYOUT.future_tokens)
    known = torch.ones(3, LAYOUT.chunk, dtype=torch.bool)
    known[:, 2:] = False
    changed = actions.clone()
    changed[:, 2:] += 5.0  # only the unknown ones
    with torch.no_grad():
        a = net(hist, fut, proprio, actions, masks, known)
        b = net(hist, fut, proprio, changed, masks, known)
        c = net(hist, fut, proprio, changed, masks)  # without the mask they are seen
    assert all(torch.allclose(x, y) for x, y in zip(a, b, strict=True))
    assert not torch.allclose(a[0], c[0])


def test_history_is_visible_in_every_mode():
    net = _net()
    hist, fut, proprio, actions = _inputs(0)
    hist2 = _inputs(1)[0]
    for mode in MODES:
        masks = mode_masks(mode, 3, LAYOUT.future_tokens, torch.Generator().manual_seed(0))
        with torch.no_grad():
            a = net(hist, fut, proprio, actions, masks)[1]
            b = net(hist2, fut, proprio, actions, masks)[1]
        assert not torch.allclose(a, b), mode


# --- windows -----------------------------------------------------------------------------


def test_windows_stay_inside_their_episode():
    ends = np.array([10, 30])
    starts = np.array([0, 3, 8, 10, 12, 28])
    w = make_windows(starts, ends, history=4, future=2, chunk=6)
    assert w.history[0].tolist() == [0, 0, 0, 0]  # first frame repeated before the start
    assert w.history[1].tolist() == [0, 1, 2, 3]
    assert w.history[3].tolist() == [10, 10, 10, 10]  # episode 2 never reads episode 1
    assert w.future[1].tolist() == [6, 9]  # stride chunk / future = 3
    assert w.future[2].tolist() == [9, 9]  # clamped to the episode's last frame
    assert w.action_frames[2].tolist() == [8, 8, 8, 8, 8, 8]  # last action repeated
    assert w.action_frames[5].tolist() == [28] * 6
    assert w.future[5].tolist() == [29, 29]


def test_chunk_targets_mark_unlabeled_frames_unknown():
    ends = np.array([20])
    w = make_windows(np.array([0, 5]), ends, history=1, future=1, chunk=4)
    labeled = np.array([0, 1, 2, 3, 6])
    actions = np.arange(10, dtype=np.float32).reshape(5, 2)
    targets, known = chunk_targets(w, labeled, actions)
    assert known[0].tolist() == [True, True, True, True]
    assert targets[0].tolist() == actions[:4].tolist()
    assert known[1].tolist() == [False, True, False, False]  # frames 5..8: only 6 labeled
    assert targets[1][1].tolist() == actions[4].tolist()


# --- autoencoder -------------------------------------------------------------------------


def test_autoencoder_shapes_and_kl16_downsampling():
    vae = KLAutoencoder(ch=8, ch_mult=(1, 1, 2, 2, 4), blocks=1, z=16)
    assert vae.downsample == 16
    x = torch.rand(2, 3, 96, 96)
    z = vae.encode(x)
    assert z.shape == (2, 16, 6, 6)
    assert vae.decode(z).shape == x.shape
    assert torch.isfinite(vae.loss(x, torch.Generator().manual_seed(0)))


def test_kl16_layout_has_attention_at_the_lowest_level():
    vae = KLAutoencoder(ch=8, ch_mult=(1, 2, 2), blocks=2, z=4, attention=True)
    names = set(vae.state_dict())
    assert {"encoder.down.2.attn.0.q.weight", "encoder.down.2.attn.1.proj_out.bias",
            "decoder.up.2.attn.2.k.weight"} <= names  # fmt: skip
    assert not any(n.startswith(("encoder.down.0.attn", "decoder.up.0.attn")) for n in names)
    plain = KLAutoencoder(ch=8, ch_mult=(1, 2, 2), blocks=2, z=4)
    assert not any(".attn." in n for n in plain.state_dict())
    assert vae.encode(torch.rand(1, 3, 16, 16)).shape == (1, 4, 4, 4)


def test_checkpoint_loads_by_name_and_shape(tmp_path):
    source = KLAutoencoder(ch=8, ch_mult=(1, 2), blocks=1, z=4)
    path = tmp_path / "vae.ckpt"
    torch.save({"state_dict": source.state_dict()}, path)
    target = KLAutoencoder(ch=8, ch_mult=(1, 2), blocks=1, z=4)
    logged = []
    n = load_matching(target, path, "autoencoder", log=logged.append)
    assert n == len(source.state_dict())
    pairs = zip(source.state_dict().values(), target.state_dict().values(), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)
    assert "loaded" in logged[0]
    # A different size: only the tensors whose shapes agree are taken.
    bigger = KLAutoencoder(ch=16, ch_mult=(1, 2), blocks=1, z=4)
    partial = load_matching(bigger, path, "autoencoder", log=logged.append)
    assert 0 < partial < len(bigger.state_dict())


def test_checkpoint_with_no_matching_keys_is_refused(tmp_path):
    path = tmp_path / "other.pt"
    torch.save({"model": {"something.else": torch.zeros(3)}}, path)
    with pytest.raises(ConfigError, match=r"none of its 1 tensors matches .*0 of"):
        load_matching(KLAutoencoder(ch=8, ch_mult=(1, 2)), path, "autoencoder")


def test_checkpoint_that_is_not_tensors_is_refused_without_running_it(tmp_path):
    import pickle

    path = tmp_path / "evil.pt"
    path.write_bytes(pickle.dumps(object()))
    with pytest.raises(ConfigError, match="cannot be read as torch tensors"):
        load_matching(KLAutoencoder(ch=8, ch_mult=(1, 2)), path, "autoencoder")
    with pytest.raises(ConfigError, match="does not exist"):
        load_matching(KLAutoencoder(ch=8, ch_mult=(1, 2)), tmp_path / "none.pt", "autoencoder")


# --- heads ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["diffusion", "linear"])
def test_action_heads_learn_a_conditional_target(kind):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    if kind == "diffusion":
        head = DiffusionHead(2, 4, width=32, depth=2, train_steps=50, sample_steps=10, clip=1.0)
    else:
        head = LinearActionHead(2, 4)
    cond = torch.eye(4)[torch.arange(256) % 4]
    points = (torch.eye(4)[:, :2] - torch.eye(4)[:, 2:]) * 0.8  # one point per condition
    target = points[torch.arange(256) % 4]
    opt = torch.optim.Adam(head.parameters(), lr=3e-3 if kind == "diffusion" else 3e-2)
    for _ in range(1000 if kind == "diffusion" else 300):
        opt.zero_grad()
        head.loss(target, cond, generator=g).backward()
        opt.step()
    # Samples for each condition gather at its point (the mean of 64 draws is close to it).
    sample = head.sample(cond, generator=g).view(64, 4, 2)
    assert (sample.mean(0) - points).abs().max() < 0.15
    assert (sample.median(0).values - points).abs().max() < 0.1


def test_paper_size_options():
    base = UVABaseOptions()
    assert (base.width, base.depth, base.heads) == (768, 24, 12)
    assert (base.lr, base.batch_size, base.pretrain_steps) == (2e-5, 128, 50_000)
    small = UVAOptions()
    assert small.width < base.width and small.vae_ch < base.vae_ch
    with pytest.raises(ValueError):
        UVAOptions(colour="red")
