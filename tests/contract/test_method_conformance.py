"""``ssilbench.testing.check_method``: every built-in method passes it on a tiny run, and it
catches each way a method can break the contract."""

from __future__ import annotations

import pytest
import torch
from pydantic import BaseModel, ConfigDict

from ssilbench.api import Method, Stage
from ssilbench.kit import ClassifierPolicy, build_net, fit_classifier, labeled_tensors
from ssilbench.testing import ConformanceError, check_method, load_plugins, random_store

PLUGINS = load_plugins()
# UVA at its smallest (as its own tests run it), on Push-T frames of random content.
TINY_UVA = {
    "profile": "small",
    "width": 32, "depth": 2, "heads": 2, "head_width": 32, "head_depth": 1, "sample_steps": 2,
    "diffusion_steps": 10, "vae_steps": 3, "pretrain_steps": 3, "batch_size": 4, "vae_batch": 4,
}  # fmt: skip
# method -> (environment, task, options, config)
BUILT_IN = {
    "bc": ("maze", "10x10", {}, {}),
    "idm_labeling": ("maze", "10x10", {}, {}),
    "vm_idm": ("maze", "10x10", {}, {}),
    "lapo": ("maze", "10x10", {"state": "image"}, {"size": "small"}),
    "lapo_plus": ("maze", "10x10", {"state": "image"}, {"size": "small"}),
    "uva": ("pusht", "pusht", {}, {"arch": "uva", "arch_options": TINY_UVA}),
}


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_every_built_in_method_is_checked():
    assert set(BUILT_IN) == set(PLUGINS.methods.names())


@pytest.mark.parametrize("name", sorted(BUILT_IN))
def test_a_built_in_method_passes_check_method(name, tmp_path):
    family, task_name, options, config = BUILT_IN[name]
    environment = PLUGINS.environments.create(family)
    task = environment.load(task_name, environment.Options(**options))
    if family == "pusht":  # no published data here: random frames of Push-T's shape
        data = random_store(task.spec, tmp_path / "data", episodes=3, length=20, seed=1)
        check_method(PLUGINS.methods.create(name), task, tmp_path, config=config, steps=4,
                     budget="1", data=data)  # fmt: skip
    else:
        check_method(PLUGINS.methods.create(name), task, tmp_path, config=config)


# --- methods that break the contract, one way each --------------------------------------


class NoConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CleanBC(Method):
    """Behaviour cloning the way the contract asks: networks built in ctx.seeded(), the
    minibatch order drawn from a named stream."""

    Config = NoConfig

    def stages(self, cfg, total_steps, spec, has_video_model):
        return [Stage("policy", total_steps, policy=True)]

    def network(self, ctx):
        with ctx.seeded():
            return build_net(ctx.architecture(None), ctx.spec, ctx.spec.num_actions)

    def fit(self, ctx):
        net = self.network(ctx)
        policy = ClassifierPolicy(net)
        s, a, _ = labeled_tensors(ctx.labeled, ctx.device)
        fit_classifier(net, s, a, ctx.plan.stage("policy", policy=policy), lr=1e-3,
                       batch_size=4, seed=ctx.stream_seed("policy"))  # fmt: skip
        return policy


class Drifting(CleanBC):
    """Each fit differs from the one before, as with an unseeded initialisation. The drift
    is a large bias on another action at every fit, so that two fits always act apart:
    random noise could leave both acting alike on the check's few observations."""

    fits = 0

    def drift(self, fit: int, actions: int) -> tuple[int, float]:
        """Which action's output bias the fit numbered ``fit`` shifts, and by how much."""
        return fit % actions, 1e3

    def network(self, ctx):
        net = super().network(ctx)
        last = [m for m in net.modules() if isinstance(m, torch.nn.Linear)][-1]
        action, shift = self.drift(type(self).fits, last.out_features)
        with torch.no_grad():
            last.bias[action] += shift
        type(self).fits += 1
        return net


class SlightDrift(Drifting):
    """Each fit's weights differ a little (a small bias on one action, larger at each fit):
    its greedy actions on a few observations agree, its action probabilities do not."""

    fits = 0

    def drift(self, fit: int, actions: int) -> tuple[int, float]:
        return 0, 1e-4 * (fit + 1)


class StackedUnseeded(CleanBC):
    """Stacks its runs but builds their networks outside ctx.seeded(): a run's weights then
    depend on the runs stacked before it."""

    batched = True

    def fit_many(self, ctxs):
        nets = [build_net(ctx.architecture(None), ctx.spec, ctx.spec.num_actions) for ctx in ctxs]
        policies = []
        for ctx, net in zip(ctxs, nets, strict=True):
            policy = ClassifierPolicy(net)
            s, a, _ = labeled_tensors(ctx.labeled, ctx.device)
            fit_classifier(net, s, a, ctx.plan.stage("policy", policy=policy), lr=1e-3,
                           batch_size=4, seed=ctx.stream_seed("policy"))  # fmt: skip
            policies.append(policy)
        return policies

    def fit(self, ctx):
        return self.fit_many([ctx])[0]


class ShortStages(CleanBC):
    def stages(self, cfg, total_steps, spec, has_video_model):
        return [Stage("policy", total_steps - 1, policy=True)]


class Idle(CleanBC):
    def fit(self, ctx):
        ctx.plan.stage("policy", policy=ClassifierPolicy(self.network(ctx)))
        return ClassifierPolicy(self.network(ctx))  # opened, never trained


class OutOfRange(ClassifierPolicy):
    def act(self, obs, greedy, generator=None):
        return super().act(obs, greedy, generator) + 100


class InvalidActions(CleanBC):
    def fit(self, ctx):
        return OutOfRange(super().fit(ctx).net)


@pytest.fixture(scope="module")
def maze(tmp_path_factory):
    return PLUGINS.environments.create("maze").load("10x10"), tmp_path_factory.mktemp("data")


def test_a_method_that_keeps_the_contract_passes(maze):
    check_method(CleanBC, *maze)


@pytest.mark.parametrize(
    ("method", "message"),
    [
        (Drifting, "two fits of the same run .seed 0. act differently"),
        (SlightDrift, "two fits of the same run .seed 0. act differently"),
        (StackedUnseeded, "the run of seed 0 acts differently fitted alone and stacked"),
        (ShortStages, "declares stages summing to 11 steps, but the run's budget is 12"),
        (Idle, "stage 'policy' spent 0 of its 12 steps"),
        (InvalidActions, r"act gave actions outside 0\.\.3"),
    ],
)
def test_check_method_names_what_a_method_breaks(maze, method, message):
    with pytest.raises(ConformanceError, match=message):
        check_method(method, *maze)
