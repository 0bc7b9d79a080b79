"""The baseline methods and architectures, trained for real on small maze runs (in-process)."""

from __future__ import annotations

import pytest
import torch

from ssilbench.api import ConfigError
from ssilbench.testing import Sweep, build_plan, execute, execute_many, load_plugins
from ssilbench_baselines import common as common_module
from ssilbench_baselines.architectures import CNN1, CNN5, MLP5, LinearClassifier

PLUGINS = load_plugins()
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    return tmp_path_factory.mktemp("data")


def _run(data_root, method, budget="64", seed=0, steps=200, config=None, options=None):
    sweep = Sweep(
        methods=[method],
        envs=["maze:10x10"],
        budgets=[budget],
        seeds=[seed],
        steps=steps,
        config=config or {},
        options=options or {},
    )
    plan = build_plan(PLUGINS, sweep, data_root)
    [spec] = plan.runs
    return execute(spec, plan.method_of(spec), plan.task_of(spec), PLUGINS, CPU)


@pytest.mark.parametrize("method", ["bc", "idm_labeling", "vm_idm"])
def test_method_spends_its_budget_and_is_evaluated(data_root, method):
    outcome = _run(data_root, method)
    assert sum(s["used"] for s in outcome.stages.values()) == 200
    assert all(s["used"] == s["declared"] for s in outcome.stages.values())
    assert 0.0 <= outcome.final_score <= 1.0
    assert outcome.max_score >= outcome.final_score
    assert outcome.timeline[-1]["step"] == 200
    assert 0.0 <= outcome.metrics["test_accuracy"] <= 1.0
    assert outcome.n_labeled == 64


@pytest.mark.parametrize("method", ["bc", "idm_labeling", "vm_idm"])
def test_same_spec_gives_the_same_numbers_on_cpu(data_root, method):
    first = _run(data_root, method, seed=3, steps=120)
    second = _run(data_root, method, seed=3, steps=120)
    assert first.timeline == second.timeline


def test_stage_plans_follow_the_config(data_root):
    assert list(_run(data_root, "idm_labeling", steps=100).stages) == ["idm", "policy"]
    split = _run(data_root, "idm_labeling", steps=100, config={"idm_fraction": 0.3}).stages
    assert split["idm"]["declared"] == 30 and split["policy"]["declared"] == 70
    assert list(_run(data_root, "vm_idm", steps=100).stages) == ["idm"]
    learned = _run(data_root, "vm_idm", steps=100, config={"video_model": "learned"}).stages
    assert list(learned) == ["video_model", "idm"]
    assert learned["video_model"]["declared"] == 50


def test_ground_truth_video_model_is_required_when_asked_for(data_root, monkeypatch):
    # The maze's tasks, as the registry gives them, without their ground-truth video model.
    maze = PLUGINS.environments.create("maze")
    maze_task = type(maze.load("10x10", maze.Options()))
    monkeypatch.setattr(maze_task, "video_model", lambda self: None)
    with pytest.raises(ConfigError, match="no ground-truth video model"):
        _run(data_root, "vm_idm", config={"video_model": "ground_truth"})
    auto = _run(data_root, "vm_idm", steps=100)  # auto falls back to a learned model
    assert list(auto.stages) == ["video_model", "idm"]


def test_idm_labeling_soft_and_hard_targets(data_root, monkeypatch):
    seen = []
    real = common_module.fit_classifiers  # the stages of idm_labeling fit through it

    def spy(nets, inputs, targets, budgets, **kw):
        for wanted, budget in zip(targets, budgets, strict=True):
            rows = wanted[slice(None)]
            seen.append((budget.stage.name, rows.dtype, tuple(rows.shape)))
        return real(nets, inputs, targets, budgets, **kw)

    monkeypatch.setattr(common_module, "fit_classifiers", spy)
    _run(data_root, "idm_labeling", steps=40)  # hard by default, as the paper's code labels
    _run(data_root, "idm_labeling", steps=40, config={"labels": "soft"})
    hard, soft = seen[1], seen[3]
    assert soft[0] == hard[0] == "policy"
    assert soft[1] == torch.float32 and soft[2][1] == 4  # a distribution per transition
    assert hard[1] == torch.int64 and len(hard[2]) == 1


def test_vm_idm_with_the_true_video_model_learns_the_expert(data_root):
    # The IDM only has to read the move off (s, v*(s)): with every state labeled it is
    # solved, so the VM*-IDM policy matches the expert on every feasible state.
    outcome = _run(data_root, "vm_idm", budget="all", steps=1500)
    assert outcome.metrics["test_accuracy"] == 1.0
    assert outcome.final_score == 1.0


def test_image_states_with_convolutional_architectures(data_root):
    outcome = _run(data_root, "bc", steps=30, config={"arch": "cnn5"}, options={"state": "image"})
    assert outcome.stages["policy"]["used"] == 30
    outcome = _run(data_root, "vm_idm", steps=30, options={"state": "image"})
    assert 0.0 <= outcome.metrics["test_accuracy"] <= 1.0


@pytest.mark.parametrize(
    ("arch", "shape"),
    [(LinearClassifier(), (2,)), (MLP5(), (4,)), (CNN1(), (6, 11, 11)), (CNN5(), (3, 11, 11))],
)
def test_architectures_map_inputs_to_logits(arch, shape):
    net = arch.build(shape, 4)
    assert net(torch.zeros(5, *shape)).shape == (5, 4)


def test_architecture_batch_rules_follow_the_paper():
    assert MLP5().batch_size(100) == 100 and MLP5().batch_size(5000) == 512
    assert CNN1().batch_size(10) == 10 and CNN5().batch_size(1000) == 32
    assert MLP5.lr == 1e-3 and CNN1.lr == 1e-4


def test_cnn5_rejects_images_too_small_for_three_poolings():
    with pytest.raises(ValueError, match="at least 8x8"):
        CNN5().build((3, 7, 7), 4)


@pytest.mark.parametrize("method", ["bc", "idm_labeling", "vm_idm"])
def test_stacked_runs_match_runs_fitted_one_by_one(data_root, method):
    # Minibatches of 8 drawn run by run as a run alone draws them: the stacked computation
    # applies the same updates as separate runs, up to float summation order.
    sweep = Sweep(methods=[method], envs=["maze:10x10"], budgets=["16", "64"], seeds=[0, 1],
                  steps=60, config={"batch_size": 8})  # fmt: skip
    plan = build_plan(PLUGINS, sweep, data_root)
    alone = [execute(s, plan.method_of(s), plan.task_of(s), PLUGINS, CPU) for s in plan.runs]
    together = execute_many(plan.runs, plan.method_of(plan.runs[0]),
                            plan.task_of(plan.runs[0]), PLUGINS, CPU)  # fmt: skip
    for a, b in zip(alone, together, strict=True):
        assert a.stages == b.stages
        for key in ("test_accuracy", "policy_entropy"):
            assert b.metrics[key] == pytest.approx(a.metrics[key], abs=1e-4)


def test_stopping_rule_ends_converged_stages_early(data_root):
    sweep = Sweep(methods=["bc"], envs=["maze:10x10"], budgets=["16"], seeds=[0], steps=3000,
                  stop_early=True, config={"arch": "mlp5"})  # fmt: skip
    plan = build_plan(PLUGINS, sweep, data_root)
    [spec] = plan.runs
    outcome = execute(spec, plan.method_of(spec), plan.task_of(spec), PLUGINS, CPU)
    stage = outcome.stages["policy"]
    assert stage["stopped_early"] and "converged" in stage["stopped_early"]
    assert stage["used"] < 3000 and stage["used"] % 500 == 0
