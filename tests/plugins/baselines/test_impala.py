"""The ``impala`` architectures (paper appendix "ProcGen Experiments"), built on the core's
IMPALA encoder (``ssilbench.kit.ImpalaTrunk``, tested in tests/kit/test_nets.py)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ssilbench.kit import ImpalaTrunk
from ssilbench.testing import Sweep, build_plan, execute, load_plugins
from ssilbench_baselines.impala import Impala, ImpalaSmall

PLUGINS = load_plugins()


def test_no_normalisation_layers():
    norms = (nn.BatchNorm2d, nn.GroupNorm, nn.LayerNorm, nn.InstanceNorm2d)
    net = Impala().build((3, 64, 64), 15)
    assert not any(isinstance(m, norms) for m in net.modules())


def test_architecture_adds_the_paper_action_decoder():
    arch = Impala()
    net = arch.build((6, 64, 64), 15)  # an IDM: (s, s') stacked as 6 channels
    assert net(torch.rand(3, 6, 64, 64)).shape == (3, 15)
    decoder = [m for m in net[1] if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in decoder] == [(256, 128), (128, 128), (128, 15)]
    trunk = ImpalaTrunk(6, scale=4)  # the core's encoder at the paper's scale
    assert sum(p.numel() for p in net[0].parameters()) == sum(p.numel() for p in trunk.parameters())


def test_the_papers_procgen_schedule():
    # 1% of the rate rising to all of it over the first 1k of 60k steps, then linear to zero.
    schedule = Impala.lr_schedule
    assert schedule.factor(0, 60_000) == pytest.approx(0.01)
    assert schedule.factor(1000, 60_000) == pytest.approx(1.0)
    assert schedule.factor(59_999, 60_000) == pytest.approx(0.0, abs=1e-12)
    # --steps-scale keeps the shape: the same shares of a 600-step stage.
    assert schedule.factor(10, 600) == pytest.approx(1.0)


def test_architecture_optimiser_defaults_and_scale_knob():
    assert Impala.lr == 2e-4
    assert Impala().batch_size(50) == 50 and Impala().batch_size(10_000) == 128
    assert Impala().scale == 4 and ImpalaSmall().scale == 1 and Impala(scale=2).scale == 2
    assert Impala.input_kinds == ("image",)
    for name in ("impala", "impala_small"):
        assert name in PLUGINS.architectures.names()


@pytest.mark.parametrize("method", ["bc", "idm_labeling"])
def test_baselines_train_with_impala_on_maze_images(tmp_path, method):
    sweep = Sweep(methods=[method], envs=["maze:10x10"], budgets=["32"], seeds=[0], steps=20,
                  config={"arch": "impala_small"}, options={"state": "image"})  # fmt: skip
    plan = build_plan(PLUGINS, sweep, tmp_path)
    [spec] = plan.runs
    outcome = execute(spec, plan.method_of(spec), plan.task_of(spec), PLUGINS, torch.device("cpu"))
    assert sum(s["used"] for s in outcome.stages.values()) == 20
    assert 0.0 <= outcome.metrics["test_accuracy"] <= 1.0


def test_impala_is_refused_on_vector_observations(tmp_path):
    from ssilbench.api import SsilbenchError

    sweep = Sweep(methods=["bc"], envs=["maze:10x10"], budgets=["32"], seeds=[0], steps=20,
                  config={"arch": "impala"})  # fmt: skip
    with pytest.raises(SsilbenchError, match="impala"):
        build_plan(PLUGINS, sweep, tmp_path)
