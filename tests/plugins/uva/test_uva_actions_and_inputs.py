"""UVA's LIBERO-10 setup of the reference: the agent-view camera (and the language) only, and
actions with their axis-angle as the 6-D rotation, scaled by the reference's normaliser;
today's inputs and actions one option away (``inputs=all``, ``actions=native``)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from ssilbench.api import ConfigError, EnvSpec, Stage
from ssilbench.kit import unified
from ssilbench.testing import load_plugins, offline_context
from ssilbench_uva.actions import (
    ActionCodec,
    axis_angle_to_matrix,
    axis_angle_to_rotation_6d,
    matrix_to_axis_angle,
    rotation_6d_to_axis_angle,
    rotation_6d_to_matrix,
)
from ssilbench_uva.architecture import layout_for, resolve
from ssilbench_uva.options import LEGACY, UVAOptions
from ssilbench_uva.windows import make_windows

TINY = {
    "profile": "small",
    "width": 32, "depth": 2, "heads": 2, "head_width": 32, "head_depth": 1, "sample_steps": 2,
    "diffusion_steps": 10, "vae_steps": 3, "pretrain_steps": 3, "batch_size": 4, "vae_batch": 4,
    "future": 2,
}  # fmt: skip


def rodrigues(r: np.ndarray) -> np.ndarray:
    """R = I + sin(t) K + (1 - cos(t)) K^2 for one axis-angle r (t = |r| > 0)."""
    t = np.linalg.norm(r)
    k = r / t
    kx = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    return np.eye(3) + math.sin(t) * kx + (1 - math.cos(t)) * kx @ kx


def directions(n: int, seed: int) -> torch.Tensor:
    v = torch.randn(n, 3, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return v / v.norm(dim=-1, keepdim=True)


# --- rotations ---------------------------------------------------------------------------------
def test_the_matrix_is_rodrigues_and_the_6d_its_first_two_rows():
    r = directions(50, 0) * torch.linspace(0.01, math.pi, 50, dtype=torch.float64)[:, None]
    m = axis_angle_to_matrix(r)
    expected = np.stack([rodrigues(v) for v in r.numpy()])
    assert np.abs(m.numpy() - expected).max() < 1e-12
    six = axis_angle_to_rotation_6d(r)
    assert six.shape == (50, 6)
    assert torch.equal(six, m[:, :2, :].reshape(50, 6))


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 2e-6)])
def test_axis_angle_round_trip_through_6d(dtype, tol):
    angles = torch.cat([
        torch.rand(400, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
        * (math.pi - 1e-3),
        torch.tensor([0.0, 1e-12, 1e-9, 1e-7, 1e-5, 1e-3]),  # near zero
        torch.tensor([math.pi - 1e-2, math.pi - 1e-3, math.pi - 1e-4]),  # near pi
    ]).to(torch.float64)  # fmt: skip
    r = (directions(len(angles), 2) * angles[:, None]).to(dtype)
    six = axis_angle_to_rotation_6d(r)
    assert six.dtype == dtype
    back = rotation_6d_to_axis_angle(six)
    assert back.dtype == dtype
    assert (back - r).abs().max().item() < tol
    assert torch.equal(rotation_6d_to_axis_angle(axis_angle_to_rotation_6d(r[:1] * 0)), r[:1] * 0)


def test_rotations_at_and_beyond_pi_come_back_as_the_same_rotation():
    d = directions(20, 3)
    # Exactly pi: r and -r are one rotation; either may come back.
    r = d * math.pi
    back = rotation_6d_to_axis_angle(axis_angle_to_rotation_6d(r))
    closest = torch.minimum((back - r).abs().amax(-1), (back + r).abs().amax(-1))
    assert closest.max().item() < 1e-7
    assert np.allclose(back.norm(dim=-1).numpy(), math.pi, atol=1e-12)
    # Beyond pi: the equivalent angle in [0, pi] about the opposite axis.
    r = d * 4.0
    back = rotation_6d_to_axis_angle(axis_angle_to_rotation_6d(r))
    assert np.allclose(back.numpy(), (-d * (2 * math.pi - 4.0)).numpy(), atol=1e-12)
    assert torch.allclose(axis_angle_to_matrix(back), axis_angle_to_matrix(r), atol=1e-12)


def test_any_two_rows_become_a_rotation_by_gram_schmidt():
    six = axis_angle_to_rotation_6d(directions(30, 4))
    noisy = six + 0.1 * torch.randn(six.shape, generator=torch.Generator().manual_seed(5),
                                    dtype=torch.float64)  # fmt: skip
    m = rotation_6d_to_matrix(noisy)
    eye = torch.eye(3, dtype=torch.float64).expand(30, 3, 3)
    assert torch.allclose(m @ m.transpose(-1, -2), eye, atol=1e-12)
    assert torch.allclose(torch.linalg.det(m), torch.ones(30, dtype=torch.float64), atol=1e-12)
    # The first row keeps the first given row's direction.
    first = noisy[:, :3] / noisy[:, :3].norm(dim=-1, keepdim=True)
    assert torch.allclose(m[:, 0], first, atol=1e-12)
    # Scaling a row changes nothing.
    assert torch.allclose(rotation_6d_to_matrix(noisy * 3), m, atol=1e-12)
    assert torch.allclose(matrix_to_axis_angle(m), rotation_6d_to_axis_angle(noisy), atol=1e-12)


# --- the codec ---------------------------------------------------------------------------------
def libero_like(env_id: str = "libero10:bowl-drawer") -> EnvSpec:
    """LIBERO-10's spec (frame stack 2, chunks of 4), under another id where asked."""
    env = load_plugins().environments.create("libero10")
    options = env.Options(frame_stack=2, action_chunk=4, action_execute=2)
    spec = env.load("bowl-drawer", options).spec
    return spec if env_id == spec.env_id else spec.model_copy(update={"env_id": env_id})


def demo_actions(n: int, seed: int) -> np.ndarray:
    """Actions like LIBERO's: positions in part of [-1, 1], small rotations, gripper +-1."""
    rng = np.random.default_rng(seed)
    pos = rng.uniform(-0.6, 0.9, size=(n, 3))
    rot = rng.uniform(-0.3, 0.3, size=(n, 3))
    grip = rng.choice([-1.0, 1.0], size=(n, 1))
    return np.concatenate([pos, rot, grip], 1).astype(np.float32)


def test_rotation_6d_is_the_references_ten_numbers_and_normaliser():
    spec = libero_like()
    labeled = demo_actions(200, 0)
    codec = ActionCodec(spec, "rotation_6d", labeled, "cpu")
    assert codec.dim == 10
    model = codec.encode(torch.from_numpy(labeled))
    assert model.shape == (200, 10) and model.dtype == torch.float32
    # Positions: D_L's range maps onto [-1, 1] exactly.
    assert np.allclose(model[:, :3].min(0).values.numpy(), -1, atol=1e-6)
    assert np.allclose(model[:, :3].max(0).values.numpy(), 1, atol=1e-6)
    # The rotation's 6 numbers and the gripper are left as they are (identity scaling).
    six = axis_angle_to_rotation_6d(torch.from_numpy(labeled[:, 3:6]).double()).float()
    assert torch.allclose(model[:, 3:9], six, atol=1e-6)
    assert torch.equal(model[:, 9], torch.from_numpy(labeled[:, 6]))
    # And back: the environment's 7 numbers.
    back = codec.decode(model)
    assert back.shape == (200, 7)
    assert np.abs(back.numpy() - labeled).max() < 1e-5


def test_a_constant_position_is_left_unscaled_as_the_reference_does():
    labeled = demo_actions(20, 1)
    labeled[:, 1] = 0.25
    codec = ActionCodec(libero_like(), "rotation_6d", labeled, "cpu")
    model = codec.encode(torch.from_numpy(labeled))
    assert torch.allclose(model[:, 1], torch.zeros(20))  # range < 1e-7: shifted to 0
    assert np.allclose(codec.decode(model)[:, 1].numpy(), 0.25)


def test_without_labeled_actions_positions_keep_the_bounds_scaling():
    codec = ActionCodec(libero_like(), "rotation_6d", None, "cpu")
    a = torch.from_numpy(demo_actions(10, 4))
    model = codec.encode(a)
    assert torch.allclose(model[:, :3], a[:, :3])  # bounds [-1, 1]: the identity
    assert torch.allclose(codec.decode(model), a, atol=1e-6)


def test_decoded_actions_stay_within_the_bounds():
    codec = ActionCodec(libero_like(), "rotation_6d", demo_actions(50, 2), "cpu")
    wild = 3 * torch.randn(64, 4, 10, generator=torch.Generator().manual_seed(0))
    out = codec.decode(wild)
    assert out.shape == (64, 4, 7)
    assert out.min() >= -1 and out.max() <= 1 and torch.isfinite(out).all()


def test_native_actions_are_the_bounds_scaling_as_before():
    spec = libero_like()
    codec = ActionCodec(spec, "native", None, "cpu")
    a = torch.from_numpy(demo_actions(10, 3))
    assert codec.dim == 7
    assert torch.equal(codec.encode(a), 2 * (a + 1) / 2 - 1)
    assert torch.allclose(codec.decode(codec.encode(a)), a)


# --- which options a task gets -----------------------------------------------------------------
def test_auto_is_the_references_setup_by_profile():
    lib = resolve(libero_like(), UVAOptions())
    assert (lib.inputs, lib.actions, lib.augment) == ("main", "rotation_6d", "colour_jitter")
    # Push-T as the reference feeds it: the image only (no agent_pos), cropped and blurred.
    pusht = resolve(libero_like("pusht:x"), UVAOptions())
    assert (pusht.inputs, pusht.actions, pusht.augment) == ("main", "native", "crop_blur")
    small = resolve(libero_like("pusht:x"), UVAOptions(profile="small"))
    assert (small.inputs, small.actions, small.augment) == ("all", "native", "none")
    small_libero = resolve(libero_like(), UVAOptions(profile="small"))
    assert (small_libero.inputs, small_libero.augment) == ("main", "none")
    elsewhere = resolve(libero_like("other:x"), UVAOptions())
    assert (elsewhere.inputs, elsewhere.actions, elsewhere.augment) == ("all", "native", "none")
    chosen = resolve(libero_like(), UVAOptions(inputs="all", actions="native", augment="none"))
    assert (chosen.inputs, chosen.actions, chosen.augment) == ("all", "native", "none")
    legacy = resolve(libero_like(), UVAOptions(**LEGACY))
    assert (legacy.inputs, legacy.actions, legacy.augment) == ("all", "native", "none")


def test_main_inputs_drop_the_wrist_camera_and_proprioception():
    spec = libero_like()
    main = layout_for(spec, UVAOptions(**TINY))
    assert (main.cameras, main.proprio_dim, main.action_dim) == (1, 0, 10)
    every = layout_for(spec, UVAOptions(**TINY, inputs="all", actions="native"))
    assert (every.cameras, every.proprio_dim, every.action_dim) == (2, 9, 7)
    assert main.patches == every.patches == 64  # 128 x 128 frames, 16x downsampling


def test_rotation_6d_needs_a_declared_axis_angle():
    spec = libero_like()
    bare = spec.model_copy(update={"metadata": {}})
    with pytest.raises(ConfigError, match=r"declares no axis-angle.*actions=native"):
        resolve(bare, UVAOptions())
    assert resolve(bare, UVAOptions(actions="native")).actions == "native"
    for layout, message in [
        ({"axis_angle": [3, 5, 6]}, "three consecutive"),
        ({"axis_angle": [5, 6, 7]}, r"names dimensions \[7\]"),
        ({"axis_angle": "3:6"}, "must list action dimensions"),
    ]:
        odd = spec.model_copy(update={"metadata": {"action_layout": layout}})
        with pytest.raises(ConfigError, match=message):
            resolve(odd, UVAOptions())


# --- end to end on LIBERO-10's spec ------------------------------------------------------------
def context(tmp_path, spec):
    stages = [Stage("policy", 2, policy=True)]
    return offline_context(spec, tmp_path, length=10, seed=1, budget="2", stages=stages)


@pytest.mark.parametrize("setup", ["reference", "today"])
def test_libero10_policy_reads_what_its_inputs_say_and_steps_7d_actions(tmp_path, setup):
    spec = libero_like()
    assert spec.metadata["action_layout"]["axis_angle"] == [3, 4, 5]
    ctx, store = context(tmp_path, spec)
    arch = dict(TINY) if setup == "reference" else {**TINY, "inputs": "all", "actions": "native"}
    model = unified(ctx, "uva", arch)
    assert model.shared.layout.action_dim == (10 if setup == "reference" else 7)
    model.train(["policy"], ctx.labeled, ctx.plan.stage("policy"), seed=0)
    labels = model.label(ctx.unlabeled)
    assert labels.shape[-1] == model.shared.layout.action_dim  # model units

    frames = torch.from_numpy(np.array(store.obs[:2]))[None]
    wrist = torch.from_numpy(np.array(store.extras["wrist"][:2]))[None]
    proprio = torch.from_numpy(np.array(store.extras["proprio"][:2]))[None]
    policy = model.policy("policy")

    features: list[torch.Tensor] = []  # the network's action features (before sampling)
    model.net.register_forward_hook(lambda module, args, out: features.append(out[1]))

    def act(w, p):
        actions = policy.act({"obs": frames, "wrist": w, "proprio": p},
                             generator=torch.Generator().manual_seed(0))  # fmt: skip
        assert actions.shape == (1, 4, 7) and actions.abs().max() <= 1  # the env's actions
        return actions, features[-1]

    actions, seen = act(wrist, proprio)
    other_actions, other = act(255 - wrist, proprio + 1)
    if setup == "reference":
        # Neither the wrist camera nor proprioception reaches the network.
        assert torch.equal(seen, other) and torch.equal(actions, other_actions)
    else:
        assert not torch.equal(seen, other)


# --- the history stride (the reference's select_frames: t-12, t-8, t-4, t) ----------------------
def test_strided_history_windows_take_every_fourth_frame_inside_the_episode():
    w = make_windows(np.array([20, 5, 39]), np.array([10, 40]), history=4, future=4, chunk=16,
                     history_stride=4)  # fmt: skip
    assert w.history[0].tolist() == [10, 12, 16, 20]  # t-12 clamped to the episode's first
    assert w.history[1].tolist() == [0, 0, 1, 5]
    assert w.history[2].tolist() == [27, 31, 35, 39]
    assert w.future[0].tolist() == [24, 28, 32, 36]  # the future as without a stride
    plain = make_windows(np.array([20]), np.array([10, 40]), history=4, future=4, chunk=16)
    assert plain.history[0].tolist() == [17, 18, 19, 20]


def test_a_strided_history_needs_a_frame_stack_that_covers_it():
    spec = libero_like()  # frame stack 2
    with pytest.raises(ConfigError, match=r"t-12 .. t, 13 frames.*-o frame_stack=13"):
        layout_for(spec, UVAOptions(**{**TINY, "history": 4, "future": 4}, history_stride=4))
    deep = spec.model_copy(update={"frame_stack": 13})
    lay = layout_for(deep, UVAOptions(**{**TINY, "future": 4}, history_stride=4))
    assert lay.history == 4  # unset: as many as future frames (t-12, t-8, t-4, t)
    sequence = {**TINY, "future": 4, "token_layout": "sequence"}
    assert layout_for(deep, UVAOptions(**sequence, action_head="linear")).history == 4
    # The sequence layout takes fewer where the stack holds fewer at the stride.
    short = spec.model_copy(update={"frame_stack": 5})
    assert layout_for(short, UVAOptions(**sequence, action_head="linear",
                                        history_stride=4)).history == 2  # fmt: skip


def test_the_policy_reads_every_fourth_stacked_frame(tmp_path):
    spec = libero_like().model_copy(update={"frame_stack": 5})
    ctx, store = context(tmp_path, spec)
    model = unified(ctx, "uva", {**TINY, "history_stride": 4})
    assert model.shared.layout.history == 2  # frames t-4 and t of a stack of 5
    policy = model.policy("policy")
    images = np.array(store.obs[:5])
    frames = torch.from_numpy(images)[None]
    tokens, _ = policy._tokens({"obs": frames})
    expected = model.shared.encode_images(torch.from_numpy(images[[0, 4]]))
    enc = model.shared.encoded
    expected = ((expected - enc.latent_mean) / enc.latent_std).flatten(0, 1)[None]
    assert torch.allclose(tokens, expected)
    # The frames between them are not read.
    changed = frames.clone()
    changed[:, 1:4] = 255 - changed[:, 1:4]
    assert torch.equal(policy._tokens({"obs": changed})[0], tokens)


# --- image size (the reference resizes LIBERO's 128x128 frames to 256x256) ----------------------
def test_image_size_resizes_what_the_autoencoder_sees(tmp_path):
    spec = libero_like()
    assert layout_for(spec, UVAOptions(**TINY)).patches == 64  # 128 / 16 = 8 x 8
    assert layout_for(spec, UVAOptions(**TINY, image_size=256)).patches == 256  # 16 x 16
    with pytest.raises(ConfigError, match="image_size divisible by 16"):
        layout_for(spec, UVAOptions(**TINY, image_size=200))
    ctx, store = context(tmp_path, spec)
    model = unified(ctx, "uva", {**TINY, "image_size": 32})
    assert model.shared.layout.patches == 4
    assert model.shared.encode_images(torch.from_numpy(np.array(store.obs[:3]))).shape == (3, 4, 16)
    frames = torch.from_numpy(np.array(store.obs[:2]))[None]
    actions = model.policy("policy").act({"obs": frames}, generator=torch.Generator())
    assert actions.shape == (1, 4, 7)


@pytest.mark.parametrize(
    ("env", "arch", "message"),
    [
        ("pusht", {"actions": "rotation_6d"}, "pusht:pusht declares no axis-angle"),
        ("pusht", {"profile": "large"}, "'profile': Input should be 'paper' or 'small'"),
        ("pusht", {"noise_schedule": "clamped"},
         "noise_schedule=clamped is ssilbench's earlier DDIM schedule and needs diffusion=ddim"),
        ("libero10:bowl-drawer", {"history_stride": 5},
         "reads frames t-15 .. t, 16 frames, but libero10:bowl-drawer's observations stack 13"),
    ],
)  # fmt: skip
def test_the_cli_refuses_impossible_settings_before_any_data(cli, env, arch, message):
    result = cli.run("--method", "uva", "--env", env, "--budgets", "1", "--steps", "1",
                     "-c", "arch_options=" + json.dumps(arch))  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert not (cli.results / "results.sqlite").exists()
