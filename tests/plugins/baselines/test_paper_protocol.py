"""The maze paper's code's training settings as baseline options: input standardisation,
full-batch stages, the IDM stage's own batch size and Xavier initialisation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from ssilbench.api import ConfigError
from ssilbench.kit import Standardise, Standardised, trainable
from ssilbench.testing import Sweep, build_plan, execute, load_plugins
from ssilbench_baselines import common
from ssilbench_baselines.architectures import CNN1, CNN5, MLP5, LinearClassifier
from ssilbench_baselines.bc import BCConfig
from ssilbench_baselines.idm_labeling import IDMLabelingConfig

PLUGINS = load_plugins()
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    return tmp_path_factory.mktemp("data")


def _run(data_root, method, config, options=None, budget="0.5", steps=300):
    sweep = Sweep(methods=[method], envs=["maze:10x10"], budgets=[budget], seeds=[1],
                  steps=steps, config=config, options=options or {"data": "states"},
                  rollouts=False)  # fmt: skip
    plan = build_plan(PLUGINS, sweep, data_root)
    [spec] = plan.runs
    return execute(spec, plan.method_of(spec), plan.task_of(spec), PLUGINS, CPU)


def test_the_scaler_has_population_moments_and_leaves_constant_features_unscaled():
    rows = torch.tensor([[1.0, 5.0, 2.0], [3.0, 5.0, 4.0], [8.0, 5.0, 9.0]])
    scaler = Standardise.fit(rows)
    x = rows.numpy().astype(np.float64)
    np.testing.assert_allclose(scaler.mean.numpy(), x.mean(0), rtol=1e-6)
    np.testing.assert_allclose(scaler.scale.numpy(), [x[:, 0].std(), 1.0, x[:, 2].std()], rtol=1e-6)
    scaled = scaler(rows)
    np.testing.assert_allclose(scaled.mean(0).numpy(), [0.0, 0.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(scaled[:, [0, 2]].std(0, unbiased=False).numpy(), [1, 1], rtol=1e-5)


def test_the_scaler_refuses_images():
    with pytest.raises(ValueError, match="vector inputs"):
        Standardise.fit(torch.zeros(4, 3, 5, 5))


def test_a_standardised_network_trains_its_inner_part_on_scaled_rows():
    rows = torch.arange(12.0).view(6, 2)
    inner = torch.nn.Linear(2, 3)
    net = Standardised(Standardise.fit(rows), inner)
    part, scaled = trainable(net, rows)
    assert part is inner
    assert len(scaled) == len(rows) and scaled.is_floating_point()
    assert torch.equal(scaled[np.array([0, 5])], net.scaler(rows[[0, 5]]))
    assert torch.equal(net(rows), inner(scaled[slice(None)]))
    other = Standardised(Standardise.fit(rows * 2), inner)
    assert scaled.fingerprint != trainable(other, rows * 2)[1].fingerprint
    plain = torch.nn.Linear(2, 3)
    assert trainable(plain, rows) == (plain, rows)


@pytest.mark.parametrize("method", ["bc", "idm_labeling", "vm_idm"])
def test_standardised_full_batch_runs_spend_their_budget_and_differ_from_raw_inputs(
    data_root, method
):
    extra = {"video_model": "ground_truth"} if method == "vm_idm" else {}
    raw = _run(data_root, method, {"arch": "mlp5", **extra})
    scaled = _run(
        data_root, method, {"arch": "mlp5", "standardise": "labeled", "batch_size": "full", **extra}
    )
    assert all(s["used"] == s["declared"] for s in scaled.stages.values())
    assert 0.0 <= scaled.metrics["test_accuracy"] <= 1.0
    assert scaled.metrics != raw.metrics


def test_standardise_over_every_transition_differs_from_over_d_l(data_root):
    labeled = _run(data_root, "bc", {"arch": "lc", "standardise": "labeled"}, budget="0.1")
    every = _run(data_root, "bc", {"arch": "lc", "standardise": "all"}, budget="0.1")
    assert labeled.metrics != every.metrics


def test_standardise_on_images_is_refused_with_what_to_do(data_root):
    with pytest.raises(ConfigError, match="applies to vector observations.*standardise=none"):
        _run(data_root, "bc", {"arch": "cnn1", "standardise": "labeled"},
             options={"state": "image", "data": "states"}, steps=5)  # fmt: skip


def test_batch_settings():
    assert common.batch_size("full", MLP5(), 777) == 777
    assert common.batch_size(None, MLP5(), 777) == 512
    assert common.batch_size(64, MLP5(), 777) == 64
    assert IDMLabelingConfig(idm_batch_size="full", batch_size=512).idm_batch_size == "full"
    for wrong in (0, "half", 2.5):
        with pytest.raises(ValidationError):
            BCConfig(batch_size=wrong)


def test_the_paper_architectures_start_from_xavier_weights_and_zero_biases():
    torch.manual_seed(0)
    for net in (MLP5().build((4,), 4), CNN1().build((6, 9, 9), 4), CNN5().build((3, 16, 16), 4)):
        layers = [m for m in net.modules() if isinstance(m, torch.nn.Linear | torch.nn.Conv2d)]
        assert layers and all(float(m.bias.detach().abs().max()) == 0.0 for m in layers)
        for m in layers:
            fan_out, fan_in = m.weight.shape[0], m.weight[0].numel()
            receptive = m.weight[0, 0].numel()
            bound = (6.0 / (fan_in + fan_out * receptive)) ** 0.5
            assert float(m.weight.detach().abs().max()) <= bound + 1e-7
    lc = LinearClassifier().build((2,), 4)
    assert (
        float(
            next(m for m in lc.modules() if isinstance(m, torch.nn.Linear))
            .bias.detach()
            .abs()
            .max()
        )
        > 0
    )


def test_vm_idm_pairing_at_its_default_leaves_the_config_and_run_ids_as_they_were():
    from ssilbench_baselines.vm_idm import VMIDMConfig

    default = VMIDMConfig().model_dump(mode="json")
    assert "pairing" not in default  # runs recorded before the field existed keep their ids
    assert VMIDMConfig(pairing="initial").model_dump(mode="json") == default
    finetuned = VMIDMConfig(pairing="finetuned").model_dump(mode="json")
    assert finetuned == {**default, "pairing": "finetuned"}
    assert VMIDMConfig.model_validate(default).pairing == "initial"
    assert VMIDMConfig.model_validate(finetuned).pairing == "finetuned"
