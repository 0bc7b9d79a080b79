"""The ``impala`` architectures (paper appendix "ProcGen Experiments"), built on the core's
IMPALA encoder (``ssilbench.kit.ImpalaTrunk``, tested in tests/kit/test_nets.py)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ssilbench.kit import ImpalaTrunk
from ssilbench.testing import Sweep, build_plan, execute, load_plugins
from ssilbench_baselines import common
from ssilbench_baselines.bc import BCConfig
from ssilbench_baselines.config import warmed_up
from ssilbench_baselines.idm_labeling import IDMLabelingConfig
from ssilbench_baselines.impala import Impala, ImpalaMLP, ImpalaSmall
from ssilbench_baselines.vm_idm import VMIDMConfig

PLUGINS = load_plugins()


def test_no_normalisation_layers():
    norms = (nn.BatchNorm2d, nn.GroupNorm, nn.LayerNorm, nn.InstanceNorm2d)
    net = Impala().build((3, 64, 64), 15)
    assert not any(isinstance(m, norms) for m in net.modules())


def test_the_default_head_is_the_paper_codes_and_the_texts_an_option():
    """``impala``: as the reference's networks, a linear layer to 128 (no activation after
    it) and its decoder MLP (192, 128, 64); ``impala_mlp``: the MLP (128, 128) of the
    paper's appendix."""
    net = Impala().build((6, 64, 64), 15)  # an IDM: (s, s') stacked as 6 channels
    assert net(torch.rand(3, 6, 64, 64)).shape == (3, 15)
    head = list(net)[1:]
    assert [type(m) for m in head[:2]] == [nn.Linear, nn.Linear]  # 256 -> 128 -> 192
    widths = [(m.in_features, m.out_features) for m in head if isinstance(m, nn.Linear)]
    assert widths == [(256, 128), (128, 192), (192, 128), (128, 64), (64, 15)]
    trunk = ImpalaTrunk(6, scale=4)  # the core's encoder at the paper's scale
    assert sum(p.numel() for p in net[0].parameters()) == sum(p.numel() for p in trunk.parameters())
    text = ImpalaMLP().build((3, 64, 64), 15)
    decoder = [m for m in text[1] if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in decoder] == [(256, 128), (128, 128), (128, 15)]
    assert ImpalaMLP().scale == 4 and "impala_mlp" in PLUGINS.architectures.names()


def test_the_papers_procgen_schedule():
    # 1% of the rate rising to all of it over the first 1k steps, then linear to zero: the
    # methods' default warm-up (warmup_steps=1000), whatever the stage's length.
    schedule = warmed_up(Impala.lr_schedule, BCConfig().warmup_steps)
    for stage in (60_000, 120_000):  # IDM labeling's stages; BC's single stage
        assert schedule.factor(0, stage) == pytest.approx(0.01)
        assert schedule.factor(1000, stage) == pytest.approx(1.0)
        assert schedule.factor(stage - 1, stage) == pytest.approx(0.0, abs=1e-12)
    assert schedule.factor(500, 120_000) == pytest.approx(0.505)
    # warmup_steps=None: the architecture's share, 1/60 of each stage (2,000 of BC's 120k),
    # whose shape --steps-scale keeps (the same shares of a 600-step stage).
    shares = warmed_up(Impala.lr_schedule, None)
    assert shares.factor(1000, 120_000) == pytest.approx(0.505)
    assert shares.factor(2000, 120_000) == pytest.approx(1.0)
    assert shares.factor(10, 600) == pytest.approx(1.0)
    assert warmed_up(None, 1000) is None  # architectures without a schedule keep none


def test_warmup_steps_is_stored_only_away_from_its_default():
    for config in (BCConfig, IDMLabelingConfig, VMIDMConfig):
        assert "warmup_steps" not in config().model_dump()  # runs recorded before keep ids
        assert config(warmup_steps=None).model_dump()["warmup_steps"] is None


def test_architecture_optimiser_defaults_and_scale_knob():
    assert Impala.lr == 2e-4
    assert Impala().batch_size(50) == 50 and Impala().batch_size(10_000) == 128
    assert Impala().scale == 4 and ImpalaSmall().scale == 1 and Impala(scale=2).scale == 2
    assert Impala.input_kinds == ("image",)
    for name in ("impala", "impala_small"):
        assert name in PLUGINS.architectures.names()


@pytest.mark.parametrize(("method", "warmup"), [("bc", 1000), ("idm_labeling", None)])
def test_baselines_train_with_impala_on_maze_images(tmp_path, monkeypatch, method, warmup):
    schedules = []
    real = common.fit_classifiers

    def spy(*args, **kw):
        schedules.append(kw["schedule"])
        return real(*args, **kw)

    monkeypatch.setattr(common, "fit_classifiers", spy)
    config = {"arch": "impala_small"} | ({} if warmup else {"warmup_steps": None})
    sweep = Sweep(methods=[method], envs=["maze:10x10"], budgets=["32"], seeds=[0], steps=20,
                  config=config, options={"state": "image"})  # fmt: skip
    plan = build_plan(PLUGINS, sweep, tmp_path)
    [spec] = plan.runs
    outcome = execute(spec, plan.method_of(spec), plan.task_of(spec), PLUGINS, torch.device("cpu"))
    assert sum(s["used"] for s in outcome.stages.values()) == 20
    assert 0.0 <= outcome.metrics["test_accuracy"] <= 1.0
    # every stage warms up as the config says (the default: the reference's 1,000 steps)
    assert schedules and {s.warmup_steps for s in schedules} == {warmup}


def test_impala_is_refused_on_vector_observations(tmp_path):
    from ssilbench.api import SsilbenchError

    sweep = Sweep(methods=["bc"], envs=["maze:10x10"], budgets=["32"], seeds=[0], steps=20,
                  config={"arch": "impala"})  # fmt: skip
    with pytest.raises(SsilbenchError, match="impala"):
        build_plan(PLUGINS, sweep, tmp_path)
