"""Network blocks of the core toolkit: the IMPALA encoder (paper appendix "ProcGen
Experiments") and the MLP that plugins build their models from."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ssilbench.kit.nets import ImpalaTrunk, mlp


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


def test_mlp_widths():
    net = mlp(10, (32, 16), 3)
    linears = [m for m in net if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(10, 32), (32, 16), (16, 3)]
    assert net(torch.rand(4, 10)).shape == (4, 3)
    assert len(mlp(5, (), 2)) == 1  # no hidden layer: one linear map


def test_scale_below_one_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        ImpalaTrunk(3, scale=0)
