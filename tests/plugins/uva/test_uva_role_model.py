"""UVA's role model on a Push-T-shaped task: IDM labels for D_U in model units, a policy
trained on them, the stopping rule, and both sampling paths. The task's spec comes from the
registry and its data are random frames of that shape (``ssilbench.testing.random_store``),
so neither the simulator nor the environment's own data are needed."""

from __future__ import annotations

import numpy as np
import torch

from ssilbench.api import Stage, StoppingRule
from ssilbench.kit import unified
from ssilbench.testing import load_plugins, offline_context

# A tiny model: seconds per run on a CPU (the point is the pipeline, not the score).
TINY = {
    "profile": "small",
    "width": 32, "depth": 2, "heads": 2, "head_width": 32, "head_depth": 1, "sample_steps": 2,
    "diffusion_steps": 10, "vae_steps": 3, "pretrain_steps": 3, "batch_size": 4, "vae_batch": 4,
}  # fmt: skip


def test_label_then_train_on_labels_and_both_sampling_paths(tmp_path):
    """The role model directly: IDM labels for D_U in model units, a policy trained on them,
    deterministic sampling under a seeded generator, actions within the bounds."""
    plugins = load_plugins()
    env = plugins.environments.create("pusht")
    task = env.load("pusht", env.Options())
    stages = [Stage("idm", 3), Stage("policy", 3, policy=True)]
    ctx, store = offline_context(task.spec, tmp_path, seed=1, stages=stages)
    labeled, unlabeled, plan = ctx.labeled, ctx.unlabeled, ctx.plan
    model = unified(ctx, "uva", TINY)
    model.train(["idm"], labeled, plan.stage("idm"), seed=0)
    labels = model.label(unlabeled)
    chunk = task.spec.action_chunk
    assert labels.shape == (len(unlabeled), chunk, 2)
    assert np.all(np.abs(labels) <= 1.0)  # model units: actions scaled to [-1, 1]
    student = model.fresh()
    fresh = zip(student.net.state_dict().values(), model.init_state.values(), strict=True)
    assert all(torch.equal(a, b) for a, b in fresh)
    student.train(["policy"], unlabeled, plan.stage("policy"), seed=1, labels=labels)
    # --stop-early reaches a unified model too: a rule that is met at once stops the stage.
    plan.stages.append(Stage("stopped", 10))
    stopped = plan.stage("stopped")
    rule = StoppingRule(check_every=2, abs_tol=1e9)
    model.fresh().train(["idm"], labeled, stopped, seed=0, rule=rule)
    assert stopped.used == 2 and stopped.stopped_early

    frames = torch.from_numpy(np.array(store.obs[:4])).float().div(255)[None]
    agent = torch.from_numpy(np.array(store.extras["agent_pos"][:4]))[None]
    obs = {"obs": frames.repeat(2, 1, 1, 1, 1), "agent_pos": agent.repeat(2, 1, 1)}
    for path in ("policy", "vm_idm"):
        policy = student.policy(path)
        a = policy.act(obs, generator=torch.Generator().manual_seed(5))
        b = policy.act(obs, generator=torch.Generator().manual_seed(5))
        assert a.shape == (2, chunk, 2)
        assert torch.equal(a, b)
        assert bool((a >= 0).all() and (a <= 512).all())
