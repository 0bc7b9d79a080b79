"""The IMPALA-CNN trunk and the ``impala`` architecture (paper appendix "ProcGen Experiments")."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ssilbench.plugins import load_plugins
from ssilbench.runner.plan import build_plan
from ssilbench.runner.spec import Sweep
from ssilbench.runner.worker import execute
from ssilbench_baselines.impala import Impala, ImpalaSmall, ImpalaTrunk

PLUGINS = load_plugins()


def _conv(c_in: int, c_out: int) -> int:
    return c_in * c_out * 9 + c_out


def _hand_count(in_channels: int, scale: int, out_features: int = 256) -> int:
    """Three stages of conv + two residual blocks of two convs, then the linear layer."""
    total, c = 0, in_channels
    for base in (16, 32, 32):
        width = base * scale
        total += _conv(c, width) + 4 * _conv(width, width)
        c = width
    return total + c * 8 * 8 * out_features + out_features


@pytest.mark.parametrize("scale", [1, 2, 4])
def test_trunk_maps_64x64_frames_to_features(scale):
    trunk = ImpalaTrunk(3, scale=scale)
    out = trunk(torch.rand(5, 3, 64, 64))
    assert out.shape == (5, 256)
    assert trunk.feature_shape == (32 * scale, 8, 8)
    assert (out >= 0).all()  # ends in a ReLU


def test_trunk_features_and_channels_are_configurable():
    assert ImpalaTrunk(6, scale=1, out_features=64)(torch.rand(2, 6, 64, 64)).shape == (2, 64)
    small = ImpalaTrunk(3, scale=1, image_size=(11, 11))
    assert small(torch.rand(2, 3, 11, 11)).shape == (2, 256)
    assert small.feature_shape == (32, 2, 2)


def test_parameter_count_at_scale_4_matches_a_hand_computation():
    trunk = ImpalaTrunk(3, scale=4)
    count = sum(p.numel() for p in trunk.parameters())
    assert count == _hand_count(3, 4) == 3_649_024


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
    assert sum(p.numel() for p in net[0].parameters()) == _hand_count(6, 4)


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
    from ssilbench.errors import SsilbenchError

    sweep = Sweep(methods=["bc"], envs=["maze:10x10"], budgets=["32"], seeds=[0], steps=20,
                  config={"arch": "impala"})  # fmt: skip
    with pytest.raises(SsilbenchError, match="impala"):
        build_plan(PLUGINS, sweep, tmp_path)
