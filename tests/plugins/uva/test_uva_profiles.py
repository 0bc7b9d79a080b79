"""UVA's profiles: ``paper`` (the default: the reference code's 256-pixel frames, history
stride 4, DDPM with a learned variance at temperature 0.95, its augmentation and inputs) and
``small`` (the CPU-fast settings the tests and the quick start use); the reference's diffusion
(``ssilbench_uva.ddpm``) and augmentation (``ssilbench_uva.augment``) on their own."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ssilbench.api import Stage
from ssilbench.kit import unified
from ssilbench.testing import load_plugins, offline_context
from ssilbench_uva import augment, ddpm
from ssilbench_uva.architecture import layout_for
from ssilbench_uva.batches import Batches
from ssilbench_uva.diffusion import DiffusionHead
from ssilbench_uva.options import LEGACY, UVABaseOptions, UVAOptions

SMALL = {"image_size": None, "history_stride": 1, "diffusion": "ddim", "diffusion_steps": 100,
         "sample_steps": 10}  # fmt: skip
PAPER = {"image_size": 256, "history_stride": 4, "diffusion": "ddpm", "diffusion_steps": 1000,
         "sample_steps": 100, "temperature": 0.95}  # fmt: skip


def _fields(o: UVAOptions, names) -> dict[str, object]:
    return {k: getattr(o, k) for k in names}


# --- the profiles ----------------------------------------------------------------------------
def test_paper_is_the_default_profile_and_small_the_cpu_fast_one():
    assert UVAOptions().profile == "paper"
    assert _fields(UVAOptions(), PAPER) == PAPER
    assert _fields(UVABaseOptions(), PAPER) == PAPER
    assert _fields(UVAOptions(profile="small"), SMALL) == SMALL
    assert _fields(UVAOptions(**LEGACY), SMALL) == SMALL  # ssilbench's UVA before
    # A field given explicitly wins over the profile's, an explicit null included.
    mixed = UVAOptions(profile="small", history_stride=4, diffusion="ddpm", temperature=1.0)
    assert (mixed.history_stride, mixed.diffusion, mixed.image_size) == (4, "ddpm", None)
    assert UVAOptions(image_size=None).image_size is None
    with pytest.raises(ValueError, match="profile"):
        UVAOptions(profile="large")
    with pytest.raises(ValueError, match="diffusion"):
        UVAOptions(diffusion="ddim2")


def _spec(env: str, task: str):
    environment = load_plugins().environments.create(env)
    return environment.load(task, environment.Options()).spec


def test_the_profiles_window_on_push_t_and_libero10():
    pusht, libero = _spec("pusht", "pusht"), _spec("libero10", "bowl-drawer")
    assert pusht.frame_stack == libero.frame_stack == 13  # t-12 .. t
    paper = layout_for(pusht, UVAOptions())
    # 256 x 256 frames: MAR-B's 16 x 16 grid; the image only, as the reference feeds Push-T
    assert (paper.patches, paper.history, paper.proprio_dim, paper.cameras) == (256, 4, 0, 1)
    small = layout_for(pusht, UVAOptions(profile="small"))
    assert (small.patches, small.history, small.proprio_dim) == (36, 4, 2)  # + agent_pos
    on_libero = layout_for(libero, UVAOptions())
    assert (on_libero.patches, on_libero.cameras, on_libero.action_dim) == (256, 1, 10)
    assert layout_for(libero, UVAOptions(profile="small")).patches == 64


# --- the reference's diffusion ---------------------------------------------------------------
def test_sampling_visits_the_references_respaced_steps():
    steps = ddpm.respaced(1000, 100)
    assert len(steps) == 100 and steps[:6] == [0, 10, 20, 30, 40, 50] and steps[-1] == 999
    assert ddpm.respaced(100, 10) == [0, 11, 22, 33, 44, 55, 66, 77, 88, 99]
    schedule = ddpm.Schedule.cosine(1000)
    respaced = schedule.respace(100)
    # The respaced chain reaches the same noise levels at the steps it keeps.
    bars = np.cumprod(1 - schedule.betas)
    assert np.allclose(np.cumprod(1 - respaced.betas), bars[steps])
    assert respaced.timesteps.tolist() == steps


def test_the_learned_variance_spans_the_posterior_and_beta():
    schedule = ddpm.Schedule.cosine(100)
    t = torch.tensor([3, 50, 99])
    x = torch.randn(3, 4)
    for v, table in ((-1.0, "log_variance"), (1.0, "log_beta")):
        out = torch.cat([torch.zeros(3, 4), torch.full((3, 4), v)], dim=-1)
        _, log_variance = schedule.step(out, x, t)
        assert torch.allclose(log_variance, schedule.at(table, t).expand(3, 4))


def test_the_bound_trains_the_variance_and_the_mse_the_noise():
    """The loss is noise MSE + the variational bound, the bound seeing the noise frozen: the
    gradient on the predicted noise is the MSE's alone."""
    schedule = ddpm.Schedule.cosine(100)
    g = torch.Generator().manual_seed(0)
    x0, noise = torch.rand(8, 4, generator=g) * 2 - 1, torch.randn(8, 4, generator=g)
    t = torch.tensor([0, 1, 5, 20, 40, 60, 80, 99])
    eps = torch.randn(8, 4, generator=g).requires_grad_()
    v = torch.zeros(8, 4, requires_grad=True)
    loss = ddpm.training_loss(lambda x, s, c: torch.cat([eps, v], -1), schedule, x0, None, t,
                              noise).sum()  # fmt: skip
    loss.backward()
    assert torch.allclose(eps.grad, 2 * (eps - noise).detach() / 4)
    assert v.grad.abs().sum() > 0  # the bound reaches the variance
    mse = (noise - eps.detach()).pow(2).mean(-1)
    assert bool((loss.detach() > mse.sum()).item())


def test_the_temperature_scales_each_steps_noise_only():
    schedule = ddpm.Schedule.cosine(100).respace(10)
    # x_t itself as the noise: the x0 estimates stay small, so float32 keeps the comparison
    net = lambda x, s, c: torch.cat([x, torch.zeros_like(x)], -1)  # noqa: E731
    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(0))

    def run(temperature: float, zero: bool = False) -> torch.Tensor:
        g = torch.Generator().manual_seed(1)
        noise = (lambda: torch.zeros(5, 3)) if zero else (lambda: torch.randn(5, 3, generator=g))
        return ddpm.sample(net, schedule, None, x.clone(), noise, temperature)

    assert torch.equal(run(0.0), run(1.0, zero=True))
    warm, cold = run(1.0), run(0.95)
    assert not torch.allclose(warm, cold)
    # The chain is linear in each step's noise: the temperature scales its whole share.
    assert torch.allclose(cold - run(0.0), 0.95 * (warm - run(0.0)), atol=1e-5)


def test_a_ddpm_head_predicts_noise_and_variance_and_samples():
    head = DiffusionHead(3, 8, 16, 1, train_steps=50, sample_steps=5, kind="ddpm",
                         temperature=0.95)  # fmt: skip
    assert head.net.final_layer.linear.out_features == 6
    g = torch.Generator().manual_seed(0)
    loss = head.loss(torch.rand(4, 3, generator=g), torch.randn(4, 8, generator=g), generator=g)
    assert loss.ndim == 0 and bool(torch.isfinite(loss))
    assert head.sample(torch.randn(4, 8), generator=g).shape == (4, 3)
    assert DiffusionHead(3, 8, 16, 1).net.final_layer.linear.out_features == 3  # ddim


def test_both_heads_use_the_references_cosine_schedule_and_clamped_is_the_earlier_one():
    """The reference builds betas from the cosine alpha-bar and clips them at 0.999; the
    earlier schedule (``noise_schedule=clamped``, DDIM only) clamped the cumulative alphas."""
    betas = ddpm.cosine_betas(1000)
    assert betas[-1] == 0.999 and (betas[:-1] < 0.999).all()  # only the last step is clipped
    bars = np.cumprod(1 - betas)
    ddim = DiffusionHead(3, 8, 16, 1, train_steps=1000).alpha_bars
    # the DDIM head's cumulative alphas are the DDPM chain's, at every step
    assert torch.equal(ddim, torch.from_numpy(ddpm.Schedule.cosine(1000).bars).float())
    assert float(ddim[0]) == pytest.approx(1 - betas[0], rel=1e-7) and ddim[0] > 0.9999
    assert float(ddim[-1]) == pytest.approx(bars[-2] * 0.001, rel=1e-6) and ddim[-1] < 3e-9
    clamped = DiffusionHead(3, 8, 16, 1, train_steps=1000, noise_schedule="clamped").alpha_bars
    assert float(clamped[0]) == pytest.approx(0.9999, rel=1e-7)
    assert float(clamped[-1]) == pytest.approx(1e-5, rel=1e-6)
    assert torch.allclose(clamped[1:997], ddim[1:997], rtol=2e-5, atol=0)  # apart at the ends
    with pytest.raises(ValueError, match="reference, or clamped with ddim"):
        DiffusionHead(3, 8, 16, 1, kind="ddpm", noise_schedule="clamped")


# --- the reference's augmentation ------------------------------------------------------------
def _windows(n: int = 3, frames: int = 2, size: int = 8) -> torch.Tensor:
    one = torch.rand(n, 1, 3, size, size, generator=torch.Generator().manual_seed(0))
    return one.expand(n, frames, 3, size, size).contiguous()  # every frame of a window alike


@pytest.mark.parametrize("kind", augment.KINDS)
def test_one_draw_per_window_alike_for_its_frames_and_seeded(kind):
    images = _windows()
    params = augment.draw(kind, 3, torch.Generator().manual_seed(5))
    if kind == "crop_blur":
        params["crop"][:] = params["blur"][:] = True
    out = augment.apply(kind, images, params)
    assert out.shape == images.shape and out.min() >= 0 and out.max() <= 1
    assert torch.equal(out[:, 0], out[:, 1])  # the same transform for each frame
    assert not torch.allclose(out, images)
    again = augment.apply(kind, images, augment.draw(kind, 3, torch.Generator().manual_seed(5)))
    assert torch.equal(out, again) or kind == "crop_blur"  # (flags forced above)
    with pytest.raises(ValueError, match="unknown augmentation"):
        augment.draw("flip", 3, torch.Generator())


def test_colour_jitter_adjusts_as_torchvision_does_at_known_factors():
    images = _windows(n=4)
    assert torch.allclose(augment.hsv_to_rgb(augment.rgb_to_hsv(images)), images, atol=1e-5)
    ones = torch.ones(4)
    identity = {"order": torch.stack([torch.arange(4)] * 4), "brightness": ones,
                "contrast": ones, "saturation": ones, "hue": torch.zeros(4)}  # fmt: skip
    assert torch.allclose(augment.apply("colour_jitter", images, identity), images, atol=1e-5)
    # brightness 0.5 halves the pixels; saturation 0 leaves the grey image; contrast 0 the
    # frame's mean grey level
    for name, expected in (("brightness", 0.5 * images),
                           ("saturation", augment.grey(images).expand_as(images)),
                           ("contrast", augment.grey(images).mean(dim=(-3, -2, -1), keepdim=True)
                            .expand_as(images))):  # fmt: skip
        params = {**identity, name: torch.full((4,), 0.5 if name == "brightness" else 0.0)}
        assert torch.allclose(augment.apply("colour_jitter", images, params), expected,
                              atol=1e-5), name  # fmt: skip


def test_training_reads_augmented_frames_and_evaluation_the_stored_ones(tmp_path):
    # Push-T's task at 32 x 32 pixels: the augmentation's path at a small cost.
    spec = _spec("pusht", "pusht").model_copy(update={"obs_shape": (32, 32, 3),
                                                      "frame_stack": 2})  # fmt: skip
    stages = [Stage("policy", 2, policy=True)]
    ctx, _ = offline_context(spec, tmp_path, episodes=2, length=8, budget="1", stages=stages)
    tiny = {"profile": "small", "width": 16, "depth": 2, "heads": 2, "head_width": 16,
            "head_depth": 1, "vae_steps": 0, "pretrain_steps": 0, "future": 2, "history": 2,
            "augment": "crop_blur"}  # fmt: skip
    model = unified(ctx, "uva", tiny)
    batches = Batches(model.shared, ctx.labeled)
    rows = torch.arange(min(3, len(batches)))
    stored = batches.inputs(rows)
    # a crop and a blur for every window: what the draw gives with this seed
    seeded = [batches.inputs(rows, torch.Generator().manual_seed(s))[0] for s in (3, 3, 4)]
    assert torch.equal(seeded[0], seeded[1]) and not torch.allclose(seeded[0], seeded[2])
    assert not torch.allclose(seeded[0], stored[0])
    # augment=none: training reads the stored tokens (the same model, its option changed)
    model.shared.options = model.shared.options.model_copy(update={"augment": "none"})
    augmented = batches.inputs(rows, torch.Generator().manual_seed(0))[0]
    assert torch.equal(augmented, stored[0])
