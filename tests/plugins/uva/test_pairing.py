"""The paper's pairing on UVA: VM-IDM samples the future from the initial video model (the
shared pretraining on D_U, bit for bit) and reads it with an IDM trained on D_L from that
initialisation; IDM labeling trains the very same IDM (one stage-cache entry serves both).
``pairing=finetuned`` keeps the earlier single fine-tuned network."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ssilbench.api import ConfigError, RunContext, Stage, StagePlan
from ssilbench.testing import StageCache, load_plugins, random_store, split

TINY = {
    "profile": "small",
    "width": 32, "depth": 2, "heads": 2, "head_width": 32, "head_depth": 1, "sample_steps": 2,
    "diffusion_steps": 10, "vae_steps": 3, "pretrain_steps": 3, "batch_size": 4, "vae_batch": 4,
}  # fmt: skip
STEPS = 4


def _run(plugins, task, labeled, unlabeled, cache, method: str, steps: int, **config):
    cls = plugins.methods.load(method)
    cfg = cls.Config.model_validate({"arch": "uva", "arch_options": TINY, **config})
    stages = cls().stages(cfg, steps, task.spec, False)
    plan = StagePlan(stages, eval_every=10**9, evaluate=lambda p: None, cache=cache)
    ctx = RunContext(config=cfg, spec=task.spec, labeled=labeled, unlabeled=unlabeled,
                     video_model=None, device=torch.device("cpu"), seed=0, plan=plan,
                     architectures=plugins.architectures.create, evaluate=lambda p: 0.0,
                     log=lambda _: None)  # fmt: skip
    return cls().fit(ctx), plan, stages


def _equal(a: torch.nn.Module, b: dict[str, torch.Tensor] | torch.nn.Module) -> bool:
    other = b.state_dict() if isinstance(b, torch.nn.Module) else b
    return all(torch.equal(x, other[k]) for k, x in a.state_dict().items())


def test_vm_idm_pairs_the_idm_with_the_initial_video_model_and_shares_it(tmp_path):
    plugins = load_plugins()
    env = plugins.environments.create("pusht")
    task = env.load("pusht", env.Options())
    store = random_store(task.spec, tmp_path / "data", episodes=3, length=20, seed=1)
    labeled, unlabeled = split(store, "1", 0, "demonstrations")
    cache = StageCache(tmp_path / "cache")

    policy, plan, stages = _run(plugins, task, labeled, unlabeled, cache, "vm_idm", STEPS)
    assert stages == [Stage("idm", STEPS, policy=True, data="labeled")]  # no VM stage
    init = policy.model.init_state
    assert _equal(policy.video.net, init)  # the initial VM, bit for bit
    assert not _equal(policy.model.net, init)  # the IDM was trained
    assert policy.snapshot().video is policy.video  # shared, never copied or trained
    frames = torch.from_numpy(np.array(store.obs[:4])).float().div(255)[None]
    agent = torch.from_numpy(np.array(store.extras["agent_pos"][:4]))[None]
    actions = policy.act({"obs": frames, "agent_pos": agent},
                         generator=torch.Generator().manual_seed(3))  # fmt: skip
    assert actions.shape == (1, task.spec.action_chunk, 2)

    # IDM labeling's IDM stage of the same length is the same stage: reused, same weights.
    labeling, plan2, _ = _run(plugins, task, labeled, unlabeled, cache, "idm_labeling",
                              2 * STEPS)  # fmt: skip
    assert plan2.budgets["idm"].reused
    assert not plan.budgets["idm"].reused

    # The earlier pairing: a video stage fine-tunes the network that is also the IDM.
    finetuned, _, stages = _run(plugins, task, labeled, unlabeled, cache, "vm_idm", STEPS,
                                pairing="finetuned")  # fmt: skip
    assert [s.name for s in stages] == ["video_model", "idm"]
    assert finetuned.video is None


def test_vm_idm_refuses_a_unified_model_with_a_ground_truth_video_model_when_planned():
    # A unified model is its own video model: refused by the stage plan, before any run
    # builds (and pretrains) it. The environment's v* is what video_model=auto would take.
    plugins = load_plugins()
    env = plugins.environments.create("pusht")
    spec = env.load("pusht", env.Options()).spec
    cls = plugins.methods.load("vm_idm")
    for video_model in ("auto", "ground_truth"):
        cfg = cls.Config.model_validate({"arch": "uva", "video_model": video_model})
        with pytest.raises(ConfigError, match="a unified architecture predicts its own future "
                           "frames; use video_model=learned"):  # fmt: skip
            cls().stages(cfg, STEPS, spec, True)
    learned = cls.Config.model_validate({"arch": "uva", "video_model": "learned"})
    assert [s.name for s in cls().stages(learned, STEPS, spec, True)] == ["idm"]
