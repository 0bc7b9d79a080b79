"""UVA on a multitask task (libero10:all, two tasks): the task's conditioning vector
(``language``) is a condition input of the network, not proprioception; training reads it
per window and the policy from its observation, and it changes what the policy does."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ssilbench.api import Stage
from ssilbench.kit import unified
from ssilbench.testing import load_plugins, offline_context
from ssilbench_uva.architecture import Batches, conditioning, vectors

TINY = {
    "profile": "small",
    "width": 32, "depth": 2, "heads": 2, "head_width": 32, "head_depth": 1, "sample_steps": 2,
    "diffusion_steps": 10, "vae_steps": 3, "pretrain_steps": 3, "batch_size": 4, "vae_batch": 4,
    "future": 2,
}  # fmt: skip


def test_the_conditioning_vector_reaches_the_network(tmp_path):
    plugins = load_plugins()
    env = plugins.environments.create("libero10")
    options = env.Options(tasks="soup-sauce-basket,bowl-drawer", frame_stack=2, action_chunk=4,
                          action_execute=2)  # fmt: skip
    spec = env.load("all", options).spec
    assert conditioning(spec) == ("language", 2) and vectors(spec) == ["proprio"]
    stages = [Stage("policy", 2, policy=True)]
    ctx, store = offline_context(spec, tmp_path, episodes=2, length=8, seed=1, stages=stages)
    labeled, plan = ctx.labeled, ctx.plan
    model = unified(ctx, "uva", TINY)
    assert model.net.condition is not None
    assert model.net.condition.condition_proj.in_features == 2
    batches = Batches(model.shared, labeled)
    rows = np.arange(len(batches))
    expected = np.asarray(store.extras["language"])[batches.windows.history[:, -1]]
    assert np.array_equal(batches.condition(rows).numpy(), expected)
    model.train(["policy"], labeled, plan.stage("policy"), seed=0)

    frames = torch.from_numpy(np.array(store.obs[:2])).float().div(255)[None]
    wrist = torch.from_numpy(np.array(store.extras["wrist"][:2])).float().div(255)[None]
    proprio = torch.from_numpy(np.array(store.extras["proprio"][:2]))[None]
    obs = {"obs": frames, "wrist": wrist, "proprio": proprio}
    policy = model.policy("policy")

    outputs: list[torch.Tensor] = []  # the network's action features (before sampling)
    model.net.register_forward_hook(lambda module, args, out: outputs.append(out[1]))

    def act(language):
        vector = torch.tensor(language, dtype=torch.float32)[None, None].expand(1, 2, 2)
        actions = policy.act({**obs, "language": vector},
                             generator=torch.Generator().manual_seed(0))  # fmt: skip
        assert actions.shape == (1, 4, 7)
        return outputs[-1]

    assert not torch.equal(act([1.0, 0.0]), act([0.0, 1.0]))  # the task changes the features
    assert torch.equal(act([1.0, 0.0]), act([1.0, 0.0]))
    with pytest.raises(ValueError, match="conditioned on 'language'"):
        policy.act(obs)
