"""Tests of build_plan: a sweep becomes checked RunSpecs, or one clear error before any run."""

from __future__ import annotations

from pathlib import Path

import pytest

from ssilbench.errors import ConfigError, UnknownNameError, UsageError
from ssilbench.planning.plan import build_plan
from ssilbench.planning.values import display_label, non_default, parse_assignments, parse_value
from ssilbench.runs.spec import Sweep


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    """Shared by the module so that the maze:10x10 dataset is built once."""
    return tmp_path_factory.mktemp("data")


def sweep(**overrides) -> Sweep:
    values = {
        "methods": ["bc", "vm_idm"],
        "envs": ["maze:10x10"],
        "budgets": ["16", "64"],
        "seeds": [0, 1],
    }
    return Sweep(**{**values, **overrides})


def test_plan_of_a_small_sweep(plugins, data_root):
    plan = build_plan(plugins, sweep(), data_root)
    assert len(plan.runs) == 8
    assert len({r.run_id for r in plan.runs}) == 8
    assert {(r.method, r.budget, r.seed) for r in plan.runs} == {
        (m, b, s) for m in ("bc", "vm_idm") for b in ("16", "64") for s in (0, 1)
    }
    for run in plan.runs:
        assert run.env == "maze:10x10"
        assert run.options["state"] == "position"
        assert run.steps == 1500  # the maze default
        assert run.eval_every == 500
    assert {m.name for m in plan.methods.values()} == {"bc", "vm_idm"}
    (info,) = plan.tasks.values()
    assert info.env == "maze:10x10"
    assert plan.task_key(plan.runs[0]) in plan.tasks
    assert info.dataset.num_transitions > 64


def test_run_ids_are_stable_across_builds(plugins, data_root):
    first = build_plan(plugins, sweep(), data_root)
    second = build_plan(plugins, sweep(), data_root)  # reopens (and verifies) the dataset
    assert [r.run_id for r in first.runs] == [r.run_id for r in second.runs]
    assert [r.canonical_json() for r in first.runs] == [r.canonical_json() for r in second.runs]


def test_run_ids_depend_on_the_settings(plugins, data_root):
    default = {r.run_id for r in build_plan(plugins, sweep(), data_root).runs}
    fewer_steps = build_plan(plugins, sweep(steps=100), data_root).runs
    assert all(r.steps == 100 for r in fewer_steps)
    assert default.isdisjoint(r.run_id for r in fewer_steps)


def test_steps_scale_is_a_fraction_of_the_environment_default(plugins, data_root):
    scaled = build_plan(plugins, sweep(steps_scale=0.1), data_root).runs
    assert {r.steps for r in scaled} == {150}  # 10% of the maze's 1,500
    same = build_plan(plugins, sweep(steps=150), data_root).runs
    assert [r.run_id for r in scaled] == [r.run_id for r in same]  # the runs, not the flag
    assert {r.steps for r in build_plan(plugins, sweep(steps_scale=1e-9), data_root).runs} == {1}


def test_labels_name_only_values_that_differ_from_the_defaults():
    from pydantic import BaseModel

    from ssilbench.planning.values import display_label

    class Config(BaseModel):
        hidden: tuple[int, ...] = (128, 128)
        lr: float = 1e-3

    assert display_label("m", {"hidden": [128, 128]}, Config) == "m"  # a tuple read back as a list
    assert display_label("m", {"hidden": [64], "lr": 0.01}, Config) == "m (hidden=[64], lr=0.01)"


def test_a_field_left_out_of_the_dump_at_its_default_is_labelled_where_it_differs():
    from pydantic import BaseModel

    from ssilbench.api import omitted_at_default
    from ssilbench.planning.values import display_label, non_default

    class Options(BaseModel):
        lr: float = 1e-3
        palette: str = "ours"
        _serialise = omitted_at_default("palette")

    assert Options().model_dump() == {"lr": 1e-3}
    assert Options(palette="ours").model_dump(mode="json") == Options().model_dump(mode="json")
    assert Options(palette="paper").model_dump() == {"lr": 1e-3, "palette": "paper"}
    assert Options.model_validate(Options().model_dump()) == Options()  # reads back
    assert non_default(Options()) == {}
    assert non_default(Options(palette="paper")) == {"palette": "paper"}
    assert display_label("m", {"palette": "paper"}, Options) == "m (palette=paper)"


def test_unknown_method(plugins, data_root):
    with pytest.raises(UnknownNameError) as info:
        build_plan(plugins, sweep(methods=["bc", "vm_idn"]), data_root)
    assert "Did you mean 'vm_idm'?" in str(info.value)
    assert f"Available: {', '.join(plugins.methods.names())}." in str(info.value)


def test_unknown_task(plugins, data_root):
    with pytest.raises(UnknownNameError) as info:
        build_plan(plugins, sweep(envs=["maze:11x11"]), data_root)
    message = str(info.value)
    assert "'11x11'" in message
    assert "10x10, 20x20, 50x50" in message
    assert "maze:all" in message


def test_unknown_family(plugins, data_root):
    with pytest.raises(UnknownNameError) as info:
        build_plan(plugins, sweep(envs=["maez:10x10"]), data_root)
    assert "Unknown environment 'maez'" in str(info.value)
    assert "Did you mean 'maze'?" in str(info.value)


def test_malformed_env_id(plugins, data_root):
    with pytest.raises(UsageError, match="Malformed environment id"):
        build_plan(plugins, sweep(envs=["maze:"]), data_root)


def test_unknown_option_suggests_the_right_one(plugins, data_root):
    with pytest.raises(ConfigError) as info:
        build_plan(plugins, sweep(options={"stat": "image"}), data_root)
    message = str(info.value)
    assert "'stat' is not a valid key" in message
    assert "Did you mean 'state'?" in message
    assert "Valid keys: copies, data, episodes" in message and "state" in message


def test_wrong_option_value(plugins, data_root):
    with pytest.raises(ConfigError, match="'state'"):
        build_plan(plugins, sweep(options={"state": "pixels"}), data_root)


def test_wrong_typed_config_value(plugins, data_root):
    with pytest.raises(ConfigError) as info:
        build_plan(plugins, sweep(config={"lr": "fast"}), data_root)
    assert "'lr'" in str(info.value)
    assert "'fast'" in str(info.value)


def test_out_of_range_config_value(plugins, data_root):
    with pytest.raises(ConfigError, match="'lr'"):
        build_plan(plugins, sweep(config={"lr": -1.0}), data_root)


def test_config_key_that_no_method_has(plugins, data_root):
    with pytest.raises(ConfigError) as info:
        build_plan(plugins, sweep(config={"nope": 1}), data_root)
    assert "'nope'" in str(info.value)
    assert "Valid keys:" in str(info.value)


def test_config_key_that_only_some_methods_have(plugins, data_root):
    plan = build_plan(plugins, sweep(config={"vm_fraction": 0.25}), data_root)
    configs = {r.method: r.config for r in plan.runs}
    assert configs["vm_idm"]["vm_fraction"] == 0.25
    assert "vm_fraction" not in configs["bc"]


def test_shared_config_key_applies_to_every_method(plugins, data_root):
    plan = build_plan(plugins, sweep(config={"lr": 0.01}), data_root)
    assert {r.config["lr"] for r in plan.runs} == {0.01}


def test_scoped_config_key_applies_to_one_method(plugins, data_root):
    plan = build_plan(plugins, sweep(config={"bc.arch": "lc"}), data_root)
    configs = {r.method: r.config for r in plan.runs}
    assert configs["bc"]["arch"] == "lc"
    assert configs["vm_idm"]["arch"] is None
    assert plan.method_of(next(r for r in plan.runs if r.method == "bc")).config.arch == "lc"


def test_scoped_key_of_a_method_outside_the_sweep(plugins, data_root):
    with pytest.raises(UsageError, match="idm_labeling"):
        build_plan(plugins, sweep(config={"idm_labeling.labels": "hard"}), data_root)


def test_scoped_key_is_validated(plugins, data_root):
    with pytest.raises(ConfigError, match="vm_fractoin"):
        build_plan(plugins, sweep(config={"vm_idm.vm_fractoin": 0.3}), data_root)


def test_architecture_that_cannot_take_the_observations(plugins, data_root):
    with pytest.raises(ConfigError) as info:
        build_plan(plugins, sweep(config={"arch": "cnn1"}), data_root)
    message = str(info.value)
    assert "arch=cnn1" in message
    assert "image" in message and "vector" in message
    assert "mlp5" in message  # lists the architectures


def test_unknown_architecture(plugins, data_root):
    with pytest.raises(UnknownNameError, match="Did you mean 'mlp5'"):
        build_plan(plugins, sweep(config={"vm_idm.vm_arch": "mlp6"}), data_root)


def test_budget_larger_than_the_dataset(plugins, data_root):
    with pytest.raises(UsageError) as info:
        build_plan(plugins, sweep(budgets=["16", "1000000"]), data_root)
    assert "N_L=1000000" in str(info.value)
    assert "larger than the dataset" in str(info.value)


def test_fraction_and_all_budgets(plugins, data_root):
    plan = build_plan(plugins, sweep(methods=["bc"], budgets=["0.5", "all"]), data_root)
    assert sorted({r.budget for r in plan.runs}) == ["0.5", "all"]


def test_label_and_non_default(plugins):
    BCConfig = plugins.methods.load("bc").Config  # noqa: N806 (a class)
    VMIDMConfig = plugins.methods.load("vm_idm").Config  # noqa: N806
    assert display_label("bc", {"arch": "lc"}, BCConfig) == "bc (arch=lc)"
    assert display_label("bc", {}, BCConfig) == "bc"
    assert display_label("bc", {"arch": None, "lr": None}, BCConfig) == "bc"
    assert display_label("bc", {"lr": 0.01, "arch": "lc"}, BCConfig) == "bc (arch=lc, lr=0.01)"
    assert non_default(BCConfig(arch="lc")) == {"arch": "lc"}
    assert non_default(BCConfig()) == {}
    assert non_default(VMIDMConfig(vm_fraction=0.25)) == {"vm_fraction": 0.25}


def test_label_of_planned_runs(plugins, data_root):
    plan = build_plan(plugins, sweep(config={"bc.arch": "lc"}), data_root)
    labels = {display_label(r.method, r.config, plan.method_of(r).cls.Config) for r in plan.runs}
    assert labels == {"bc (arch=lc)", "vm_idm"}


@pytest.mark.parametrize(
    ("text", "value"),
    [("3", 3), ("0.5", 0.5), ("true", True), ("null", None), ("[1, 2]", [1, 2]), ("lc", "lc")],
)
def test_parse_value(text, value):
    assert parse_value(text) == value


def test_parse_assignments():
    assert parse_assignments(["arch=lc", " lr = 0.01 ", "bc.batch_size=32"], "--config") == {
        "arch": "lc",
        "lr": 0.01,
        "bc.batch_size": 32,
    }
    with pytest.raises(UsageError, match="KEY=VALUE"):
        parse_assignments(["arch"], "--config")
    with pytest.raises(UsageError, match="KEY=VALUE"):
        parse_assignments(["=lc"], "--config")
