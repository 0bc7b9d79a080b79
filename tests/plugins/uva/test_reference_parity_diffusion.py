"""Parity of UVA's inverse mode (the paper's one change to UVA), its action head's diffusion
loss and its sampler with the UVA reference code.

Runs only when ``SSILBENCH_UVA_REFERENCE`` names an extracted checkout of
``ShuangLI59/unified_video_action``, loaded as ``test_reference_parity.py`` says (the same
small models, the reference's weights copied into ssilbench's by the card's mapping):

- **Inverse mode.** The reference's ``inverse_model`` hides the history frames behind
  ``fake_latent_x``; the paper changed it to show them (appendix: "all current frames in the
  IDM"). The reference's encoder with that change is, token by token, its ``video_model``
  branch with nothing masked (history through ``z_proj_cond``, future through ``z_proj``,
  the placeholder actions), and ssilbench's ``inverse`` mode gives its outputs; the
  reference's own inverse mode gives others (the change is not vacuous).
- **Diffusion loss.** With the same timesteps and noise, ssilbench's action loss is the
  reference's ``training_losses`` noise term (``mse``). The reference also learns the
  variance (its ``vb`` term, printed); ssilbench's head here predicts the noise only.
- **Sampler.** From the same noise, ssilbench's DDIM is the reference's ``ddim_sample`` steps
  (eta 0, ``clip_denoised``) over the reference's 100 of 1,000 timesteps, on the reference's
  noise schedule (its ``ddim_sample_loop`` itself moves the timesteps to CUDA: its three-line
  loop is run here on the CPU). ssilbench's own cosine schedule clamps the cumulative alphas to
  [1e-5, 0.9999], where the reference clips betas at 0.999: the same to 6e-5 from t = 1 to
  996, apart at t = 0 and t >= 997 (measured and printed, and docs/methods/uva.md).

The reference's DDPM sampler with learned variance and temperature is not compared here.
"""

from __future__ import annotations

import sys
import types

import pytest
import torch

from ssilbench_uva.modes import mode_masks
from tests.plugins.uva import test_reference_parity as P
from tests.plugins.uva.test_reference_parity import mar  # noqa: F401 (the fixture)

TRAIN_STEPS, SAMPLE_STEPS = 1000, "100"  # the reference's act_diff_*_steps


@pytest.fixture(scope="module")
def diffusion(mar) -> types.ModuleType:  # noqa: F811
    """The reference's ``create_diffusion``, imported from the module ``mar`` came from."""
    name = mar.__name__.rsplit(".", 1)[0] + ".diffusion"
    return sys.modules.get(name) or __import__(name, fromlist=["create_diffusion"])


def _inverse_outputs(mar):  # noqa: F811
    """(reference, ssilbench's net, inputs, the reference's transformer outputs with the
    paper's inverse mode, with its own inverse mode, ssilbench's outputs and features)."""
    ref, ours = P._pair(mar, language=False)
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


def _reference_schedule(head: torch.nn.Module, diffusion) -> torch.Tensor:
    """ssilbench's head put on the reference's cumulative alphas (its own returned)."""
    own = head.alpha_bars.clone()
    train = diffusion.create_diffusion(timestep_respacing="", noise_schedule="cosine",
                                       diffusion_steps=TRAIN_STEPS)  # fmt: skip
    head.alpha_bars = torch.as_tensor(train.alphas_cumprod).float()
    return own


def test_the_noise_schedule_is_the_references_between_its_ends(mar, diffusion):  # noqa: F811
    _, ours = P._pair(mar, language=False)
    head = ours.action_head
    own = _reference_schedule(head, diffusion).double()
    theirs = head.alpha_bars.double()
    gap = (own - theirs).abs() / theirs
    ends = {t: (f"{float(own[t]):.6g}", f"{float(theirs[t]):.6g}") for t in (0, 997, 998, 999)}
    # ssilbench clamps the cumulative alphas to [1e-5, 0.9999]; the reference clips its betas
    # at 0.999: printed, and measured in the sampler's test
    print(f"\ncumulative alphas: largest relative difference for t in 1..996 "
          f"{float(gap[1:997].max()):.2e}; (ssilbench, reference) at {ends}")  # fmt: skip
    assert float(gap[1:997].max()) < 1e-4


def test_the_action_loss_is_the_references_noise_term(mar, diffusion):  # noqa: F811
    ref, ours, actions, _, _, _, features = _inverse_outputs(mar)
    head, target, cond = ours.action_head, actions.flatten(0, 1), features.flatten(0, 1)
    losses = {}
    for schedule in ("ssilbench's", "the reference's"):
        if schedule == "the reference's":
            _reference_schedule(head, diffusion)
        with torch.no_grad():
            loss = head.loss(target, cond, generator=torch.Generator().manual_seed(5))
        g = torch.Generator().manual_seed(5)  # the timesteps and noise that loss drew
        t = torch.randint(0, TRAIN_STEPS, (len(target),), generator=g)
        noise = torch.randn(target.shape, generator=g)
        train = diffusion.create_diffusion(timestep_respacing="", noise_schedule="cosine",
                                           diffusion_steps=TRAIN_STEPS)  # fmt: skip
        with torch.no_grad():
            terms = train.training_losses(ref.diffactloss.net, target, t, {"c": cond}, noise)
        losses[schedule] = (float(loss), float(terms["mse"].mean()), float(terms["vb"].mean()))
    print(f"\naction loss (ssilbench, reference noise term, reference variance term) with "
          f"{losses}")  # fmt: skip
    ours_loss, mse, _ = losses["the reference's"]
    assert ours_loss == pytest.approx(mse, rel=1e-5)
    assert losses["ssilbench's"][0] == pytest.approx(losses["ssilbench's"][1], rel=1e-2)


def test_the_ddim_sampler_is_the_references(mar, diffusion):  # noqa: F811
    ref, ours, _, _, _, _, features = _inverse_outputs(mar)
    head, cond = ours.action_head, features.flatten(0, 1)
    assert head.sample_steps == int(SAMPLE_STEPS)
    with torch.no_grad():
        own_schedule = head.sample(cond, generator=torch.Generator().manual_seed(9))
        _reference_schedule(head, diffusion)
        sampled = head.sample(cond, generator=torch.Generator().manual_seed(9))
    noise = torch.randn((len(cond), P.ACTIONS), generator=torch.Generator().manual_seed(9))
    gen = diffusion.create_diffusion(timestep_respacing=SAMPLE_STEPS, noise_schedule="cosine",
                                     diffusion_steps=TRAIN_STEPS)  # fmt: skip
    theirs = noise
    with torch.no_grad():  # ddim_sample_loop, whose loop moves t to CUDA, on the CPU
        for i in reversed(range(gen.num_timesteps)):
            t = torch.full((len(cond),), i)
            theirs = gen.ddim_sample(ref.diffactloss.net, theirs, t, clip_denoised=True,
                                     model_kwargs={"c": cond}, eta=0.0)["sample"]  # fmt: skip
    gap = float((sampled - theirs).abs().max())
    own_gap = float((own_schedule - theirs).abs().max())
    print(f"\nDDIM, {SAMPLE_STEPS} steps: largest difference {gap:.2e} on the reference's "
          f"schedule, {own_gap:.2e} on ssilbench's; spread of the samples "
          f"{float(theirs.std()):.3f}")  # fmt: skip
    assert float(theirs.std()) > 0.05  # the samples vary: the comparison is not of constants
    torch.testing.assert_close(sampled, theirs, **P.TOL)
