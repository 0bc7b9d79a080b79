"""Parity of UVA's inverse mode (the paper's one change to UVA), its noise schedules, and its
diffusion heads' losses and samplers (DDIM, and DDPM with a learned variance) with the UVA
reference code.

Runs only when ``SSILBENCH_UVA_REFERENCE`` names an extracted checkout of
``ShuangLI59/unified_video_action``, loaded as ``test_reference_parity.py`` says (the same
small models, the reference's weights copied into ssilbench's by the card's mapping):

- **Inverse mode.** The reference's ``inverse_model`` hides the history frames behind
  ``fake_latent_x``; the paper changed it to show them (appendix: "all current frames in the
  IDM"). The reference's encoder with that change is, token by token, its ``video_model``
  branch with nothing masked (history through ``z_proj_cond``, future through ``z_proj``,
  the placeholder actions), and ssilbench's ``inverse`` mode gives its outputs; the
  reference's own inverse mode gives others (the change is not vacuous).
- **Noise schedules.** ssilbench's cosine chains are the reference's ``create_diffusion``
  ones, bit for bit at every timestep: the training chain (1,000 levels) and the sampling
  chain (100 respaced), every table (betas, cumulative alphas and their roots, posterior
  variances and mean coefficients); the DDIM head's cumulative alphas are their float32.
- **Diffusion loss (DDIM head).** With the same timesteps and noise, ssilbench's action loss
  is the reference's ``training_losses`` noise term (``mse``).
- **DDIM sampler.** From the same noise, ssilbench's DDIM is the reference's ``ddim_sample``
  steps (eta 0, ``clip_denoised``) over the reference's 100 of 1,000 timesteps (its
  ``ddim_sample_loop`` itself moves the timesteps to CUDA: its three-line loop is run here on
  the CPU); the earlier schedule (``noise_schedule=clamped``) is shown to move the samples.
- **DDPM with a learned variance** (``diffusion=ddpm``, temperature 0.95: the paper profile's
  heads, actions with x0 clipped to [-1, 1] and latents unclipped, as the reference's
  ``DiffActLoss`` and ``DiffLoss``). At each of the 100 respaced steps the mean and the
  log-variance interpolated between the posterior's and beta's are the reference's
  ``p_mean_variance`` (what ``p_sample`` draws from); from the same noise, ssilbench's sampler
  is its ``p_sample_loop`` (its timesteps kept on the CPU; each step's noise from a generator
  seeded alike), and temperature 1 is shown to differ. With the same timesteps (t = 0, the
  decoder's likelihood, and t = 999 among them) and noise, the noise term, the variational
  bound, the total and the gradients of its mean are the reference's ``training_losses``
  ``mse``, ``vb`` and ``loss``; the head's own loss is the mean of the reference's.
"""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
import torch

from ssilbench_uva import ddpm
from ssilbench_uva.modes import mode_masks
from tests.plugins.uva import test_reference_parity as P
from tests.plugins.uva.test_reference_parity import mar  # noqa: F401 (the fixture)

TRAIN_STEPS, SAMPLE_STEPS = 1000, "100"  # the reference's act_diff_*_steps
TEMPERATURE = 0.95  # the reference's sampling temperature (config/model/uva.yaml)
ROWS = 64  # latent tokens the video head's comparisons denoise


@pytest.fixture(scope="module")
def diffusion(mar) -> types.ModuleType:  # noqa: F811
    """The reference's ``create_diffusion``, imported from the module ``mar`` came from."""
    name = mar.__name__.rsplit(".", 1)[0] + ".diffusion"
    return sys.modules.get(name) or __import__(name, fromlist=["create_diffusion"])


def _inverse_outputs(mar, **heads):  # noqa: F811
    """(reference, ssilbench's net, inputs, the reference's transformer outputs with the
    paper's inverse mode, with its own inverse mode, ssilbench's outputs and features);
    ``heads``: the diffusion heads' options."""
    ref, ours = P._pair(mar, language=False, **heads)
    future, history, actions, _ = P._inputs()
    nothing = torch.zeros(P.BATCH, P.FRAMES, P.PATCHES)

    def reference(mode: str) -> torch.Tensor:
        encoded = ref.forward_mae_encoder(future, nothing, history, None, nactions=actions,
                                          task_mode=mode)  # fmt: skip
        return ref.forward_mae_decoder(encoded, nothing)

    masks = mode_masks("inverse", P.BATCH, P.FRAMES * P.PATCHES, masking="reference",
                       frames=P.FRAMES)  # fmt: skip
    with torch.no_grad():
        paper, own = reference("video_model"), reference("inverse_model")
        z, features = ours(history.flatten(1, 2), future.flatten(1, 2), None, actions, masks)
    return ref, ours, actions, paper, own, z, features


def test_the_inverse_mode_is_the_references_with_the_history_shown(mar):  # noqa: F811
    ref, ours, _, paper, own, z, features = _inverse_outputs(mar)
    gap = float((z - paper).abs().max())
    print(f"\ninverse mode: largest difference from the reference with the paper's change "
          f"{gap:.2e}; from the reference's own inverse mode "
          f"{float((z - own).abs().max()):.2e}")  # fmt: skip
    torch.testing.assert_close(z, paper, **P.TOL)
    assert not torch.allclose(z, own, **P.TOL)  # hiding the history changes the outputs
    with torch.no_grad():  # the action readout of the inverse mode: the reference's pooling
        calls = P._recorded(ref.diffactloss.net)
        ref.diffactloss(target=torch.zeros(P.BATCH, P.CHUNK, P.ACTIONS), z=paper,
                        task_mode="inverse_model")  # fmt: skip
    torch.testing.assert_close(features.flatten(0, 1), calls[0][2], **P.TOL)


def _reference_chain(diffusion, respacing: str):
    """The reference's ``create_diffusion`` as its heads build it: cosine, 1,000 levels,
    ``respacing`` "" (training) or "100" (sampling)."""
    return diffusion.create_diffusion(timestep_respacing=respacing, noise_schedule="cosine",
                                      diffusion_steps=TRAIN_STEPS)  # fmt: skip


TABLES = {
    "betas": "betas",
    "bars": "alphas_cumprod",
    "posterior_variance": "posterior_variance",
    "sqrt_bar": "sqrt_alphas_cumprod",
    "sqrt_one_minus_bar": "sqrt_one_minus_alphas_cumprod",
    "sqrt_recip_bar": "sqrt_recip_alphas_cumprod",
    "sqrt_recipm1_bar": "sqrt_recipm1_alphas_cumprod",
    "log_variance": "posterior_log_variance_clipped",
    "coef_x0": "posterior_mean_coef1",
    "coef_xt": "posterior_mean_coef2",
}
"""ssilbench's ``ddpm.Schedule`` tables -> the reference's ``GaussianDiffusion`` arrays."""


def test_the_noise_schedules_are_the_references(mar, diffusion):  # noqa: F811
    """Every table of both chains (training, 1,000 levels; sampling, 100 respaced), at every
    timestep, in float64, bit for bit; and the DDIM head's cumulative alphas as float32."""
    train, gen = _reference_chain(diffusion, ""), _reference_chain(diffusion, SAMPLE_STEPS)
    _, ddim = P._pair(mar, language=False)
    bars = ddim.action_head.alpha_bars
    assert torch.equal(bars, torch.from_numpy(train.alphas_cumprod).float())
    _, ours = P._pair(mar, language=False, diffusion="ddpm", temperature=TEMPERATURE)
    head = ours.action_head
    for schedule, theirs in ((head.train_schedule, train), (head.sample_schedule, gen)):
        assert schedule.timesteps.tolist() == theirs.timestep_map
        for name, their_name in TABLES.items():
            np.testing.assert_array_equal(getattr(schedule, name), getattr(theirs, their_name))
    ends = {t: f"{float(bars[t]):.6g}" for t in (0, 997, 998, 999)}
    print(f"\nnoise schedules: {TRAIN_STEPS} + {len(gen.betas)} steps equal to the reference's "
          f"at every step; cumulative alphas at their ends {ends}")  # fmt: skip


def test_the_action_loss_is_the_references_noise_term(mar, diffusion):  # noqa: F811
    ref, ours, actions, _, _, _, features = _inverse_outputs(mar)
    head, target, cond = ours.action_head, actions.flatten(0, 1), features.flatten(0, 1)
    with torch.no_grad():
        loss = head.loss(target, cond, generator=torch.Generator().manual_seed(5))
    g = torch.Generator().manual_seed(5)  # the timesteps and noise that loss drew
    t = torch.randint(0, TRAIN_STEPS, (len(target),), generator=g)
    noise = torch.randn(target.shape, generator=g)
    with torch.no_grad():
        terms = _reference_chain(diffusion, "").training_losses(ref.diffactloss.net, target, t,
                                                                {"c": cond}, noise)  # fmt: skip
    print(f"\naction loss (ddim head): ssilbench {float(loss):.7f}, the reference's noise term "
          f"{float(terms['mse'].mean()):.7f}")  # fmt: skip
    assert float(loss) == pytest.approx(float(terms["mse"].mean()), rel=1e-5)


def test_the_ddim_sampler_is_the_references(mar, diffusion):  # noqa: F811
    ref, ours, _, _, _, _, features = _inverse_outputs(mar)
    head, cond = ours.action_head, features.flatten(0, 1)
    assert head.sample_steps == int(SAMPLE_STEPS)
    with torch.no_grad():
        sampled = head.sample(cond, generator=torch.Generator().manual_seed(9))
    noise = torch.randn((len(cond), P.ACTIONS), generator=torch.Generator().manual_seed(9))
    gen = _reference_chain(diffusion, SAMPLE_STEPS)
    theirs = noise
    with torch.no_grad():  # ddim_sample_loop, whose loop moves t to CUDA, on the CPU
        for i in reversed(range(gen.num_timesteps)):
            t = torch.full((len(cond),), i)
            theirs = gen.ddim_sample(ref.diffactloss.net, theirs, t, clip_denoised=True,
                                     model_kwargs={"c": cond}, eta=0.0)["sample"]  # fmt: skip
    _, earlier = P._pair(mar, language=False, noise_schedule="clamped")  # the same weights
    with torch.no_grad():  # the earlier schedule, from the same noise
        clamped = earlier.action_head.sample(cond, generator=torch.Generator().manual_seed(9))
    gap = float((sampled - theirs).abs().max())
    clamped_gap = float((clamped - theirs).abs().max())
    print(f"\nDDIM, {SAMPLE_STEPS} steps: largest difference {gap:.2e} "
          f"(noise_schedule=clamped: {clamped_gap:.2e}); spread of the samples "
          f"{float(theirs.std()):.3f}")  # fmt: skip
    assert float(theirs.std()) > 0.05  # the samples vary: the comparison is not of constants
    torch.testing.assert_close(sampled, theirs, **P.TOL)
    assert clamped_gap > 100 * gap  # the schedule's ends matter: the check can fail


# --- DDPM with a learned variance (the paper profile's heads) ---------------------------------
def _ddpm_heads(mar) -> dict[str, tuple]:  # noqa: F811
    """Per head, with ``diffusion=ddpm`` at the reference's temperature: (ssilbench's head,
    the reference's MLP with the same weights, condition rows, targets, clip_denoised). The
    action head clips its x0 estimates, the video head does not, on both sides."""
    ref, ours, actions, _, _, z, features = _inverse_outputs(mar, diffusion="ddpm",
                                                             temperature=TEMPERATURE)  # fmt: skip
    future = P._inputs()[0]
    return {
        "actions": (ours.action_head, ref.diffactloss.net, features.flatten(0, 1),
                    actions.flatten(0, 1), True),
        "latents": (ours.diffloss, ref.diffloss.net, z.flatten(0, 1)[:ROWS],
                    future.flatten(0, 2)[:ROWS], False),
    }  # fmt: skip


@pytest.mark.parametrize("kind", ["actions", "latents"])
def test_each_ddpm_step_is_the_references_p_mean_variance(mar, diffusion, kind):  # noqa: F811
    """Every one of the 100 respaced steps: the mean and learned log-variance that
    ``p_sample`` draws from, from the same x_t (the model called at the original timestep)."""
    head, net, cond, _, clip = _ddpm_heads(mar)[kind]
    gen, steps = _reference_chain(diffusion, SAMPLE_STEPS), head.sample_schedule
    g = torch.Generator().manual_seed(3)
    worst, spread = {"mean": 0.0, "log_variance": 0.0}, 0.0
    with torch.no_grad():
        for i in range(len(steps)):
            x = torch.randn(len(cond), head.target, generator=g) * 2
            t = torch.full((len(cond),), i)
            out = head.net(x, torch.full((len(cond),), int(steps.timesteps[i])), cond)
            ours = dict(zip(worst, steps.step(out, x, t, head.clip), strict=True))
            theirs = gen.p_mean_variance(net, x, t, clip_denoised=clip, model_kwargs={"c": cond})
            for name in worst:
                torch.testing.assert_close(ours[name], theirs[name], **P.TOL)
                worst[name] = max(worst[name], float((ours[name] - theirs[name]).abs().max()))
            spread = max(spread, float(theirs["log_variance"].std()))
    print(f"\nDDPM steps ({kind}): largest differences over {len(steps)} steps {worst}; "
          f"largest spread of a step's learned log-variance {spread:.3f}")  # fmt: skip
    assert spread > 0.01  # the variance numbers vary: the interpolation is exercised


@pytest.mark.parametrize("kind", ["actions", "latents"])
def test_the_ddpm_sampler_is_the_references_p_sample_loop(mar, diffusion, monkeypatch,  # noqa: F811
                                                          kind):  # fmt: skip
    head, net, cond, _, clip = _ddpm_heads(mar)[kind]
    assert (head.kind, head.temperature) == ("ddpm", TEMPERATURE)
    assert len(head.sample_schedule) == int(SAMPLE_STEPS)
    with torch.no_grad():
        ours = head.sample(cond, generator=torch.Generator().manual_seed(9))
    gen = _reference_chain(diffusion, SAMPLE_STEPS)
    # p_sample_loop moves each step's timesteps to CUDA: here they stay on the CPU
    monkeypatch.setattr(torch.Tensor, "cuda", lambda self, *args, **kwargs: self)

    def reference(temperature: float) -> torch.Tensor:
        # ssilbench's head draws the start and then each step's noise from one stream; the
        # reference's p_sample draws each step's from the global generator, seeded alike
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(9)
            noise = torch.randn(len(cond), head.target)
            return gen.p_sample_loop(net.forward, noise.shape, noise, clip_denoised=clip,
                                     model_kwargs={"c": cond}, temperature=temperature)  # fmt: skip

    theirs, hot = reference(TEMPERATURE), reference(1.0)
    gap = float((ours - theirs).abs().max())
    print(f"\nDDPM sampler ({kind}), {SAMPLE_STEPS} steps at temperature {TEMPERATURE}: "
          f"largest difference {gap:.2e}; at temperature 1 {float((ours - hot).abs().max()):.2e};"
          f" spread of the samples {float(theirs.std()):.3f}")  # fmt: skip
    assert float(theirs.std()) > 0.05  # the samples vary: the comparison is not of constants
    torch.testing.assert_close(ours, theirs, **P.TOL)
    assert not torch.allclose(ours, hot, **P.TOL)  # the temperature is what the test sees


@pytest.mark.parametrize("kind", ["actions", "latents"])
def test_the_ddpm_loss_is_the_references_mse_and_vb(mar, diffusion, kind):  # noqa: F811
    """For the same timesteps (both ends among them: t = 0 is the decoder's likelihood) and
    noise: the noise term, the variational bound, their sum and its gradients."""
    head, net, cond, target, _ = _ddpm_heads(mar)[kind]
    n, train = len(target), _reference_chain(diffusion, "")
    g = torch.Generator().manual_seed(5)
    ends = torch.tensor([0, 0, 1, TRAIN_STEPS - 2, TRAIN_STEPS - 1])
    t = torch.cat([ends, torch.randint(0, TRAIN_STEPS, (n - len(ends),), generator=g)])
    noise = torch.randn(target.shape, generator=g)
    mse, vb = ddpm.loss_terms(head.net, head.train_schedule, target, cond, t, noise)
    theirs = train.training_losses(net, target, t, {"c": cond}, noise)
    ours = {"mse": mse, "vb": vb, "loss": mse + vb}
    for name, value in ours.items():
        torch.testing.assert_close(value, theirs[name], **P.TOL)
    gaps = {name: f"{float((value - theirs[name]).detach().abs().max()):.2e}"
            for name, value in ours.items()}  # fmt: skip
    # the same gradients: on both sides the bound reaches the variance numbers only
    ours["loss"].mean().backward()
    theirs["loss"].mean().backward()
    grads = dict(head.net.named_parameters())
    grad_gap = 0.0
    for name, p in net.named_parameters():
        torch.testing.assert_close(grads[name].grad, p.grad, rtol=1e-4, atol=1e-6)
        grad_gap = max(grad_gap, float((grads[name].grad - p.grad).abs().max()))
    # the head's loss, its timesteps and noise drawn from its generator: the reference's mean
    with torch.no_grad():
        loss = head.loss(target, cond, generator=torch.Generator().manual_seed(7))
        g = torch.Generator().manual_seed(7)
        t = torch.randint(0, TRAIN_STEPS, (n,), generator=g)
        drawn = train.training_losses(net, target, t, {"c": cond},
                                      torch.randn(target.shape, generator=g))  # fmt: skip
    print(f"\nDDPM loss ({kind}): largest differences {gaps}, gradients {grad_gap:.2e}; "
          f"means (mse, vb) {float(mse.detach().mean()):.6f}, {float(vb.detach().mean()):.6f}; "
          f"head loss {float(loss):.7f}, the reference's "
          f"{float(drawn['loss'].mean()):.7f}")  # fmt: skip
    assert float(loss) == pytest.approx(float(drawn["loss"].mean()), rel=1e-5)
