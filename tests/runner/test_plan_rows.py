"""The plan's table of stages: one row per method config and step count, each at its own step
time (an LC and an MLP in one sweep are not priced at their mean), the config named where a
method has several; and a line saying when the estimate is an upper bound because runs may
stop early."""

from __future__ import annotations

import json

import pytest
import torch

from ssilbench.planning.plan import SweepPlan, build_plan
from ssilbench.plugins import load_plugins
from ssilbench.runner.dryrun import DryRunSettings, dry_run
from ssilbench.runner.timings import Measurement, StageTiming, Timings, measurement_key
from ssilbench.runner.workload import Recorded
from ssilbench.runs.spec import Sweep

PLUGINS = load_plugins()
STEPS = 40
SECONDS = {"lc": 0.5, "mlp5": 3.0, None: 1.0}  # made-up step times: which row got which shows


def _plan(tmp_path, **blocks) -> SweepPlan:
    """One bc run per architecture on maze:10x10, with the steps and stopping rule given."""
    plan = None
    for arch, how in blocks.items():
        config = {} if arch == "default" else {"arch": arch}
        sweep = Sweep(methods=["bc"], envs=["maze:10x10"], budgets=["16"], seeds=[0],
                      config=config, options={"state": "position"}, **how)  # fmt: skip
        part = build_plan(PLUGINS, sweep, tmp_path)
        plan = part if plan is None else (plan.extend(part) or plan)
    assert plan is not None
    return plan


def _report(plan: SweepPlan):
    timings = Timings(None)
    for spec in plan.runs:
        method, task = plan.method_of(spec), plan.task_of(spec)
        key = measurement_key(method, task.spec, torch.device("cpu"), 1, 16)
        stages = {"policy": StageTiming(SECONDS[spec.config.get("arch")])}
        timings.add(Measurement(key, "bc", "cpu", stages, 0.0, 0.0, stacked=1, labeled=16))
    settings = DryRunSettings(measure_missing=False, stack=False)
    return dry_run(plan, PLUGINS, torch.device("cpu"), timings, Recorded(set(), set()), settings)


def test_each_config_of_a_method_has_its_own_row_at_its_own_step_time(tmp_path):
    report = _report(_plan(tmp_path, lc={"steps": STEPS}, mlp5={"steps": 2 * STEPS}))
    rows = {w.shown: w for w in report.works}
    assert set(rows) == {"bc (arch=lc)", "bc (arch=mlp5)"}
    assert rows["bc (arch=lc)"].seconds_per_step == pytest.approx(SECONDS["lc"])
    assert rows["bc (arch=mlp5)"].seconds_per_step == pytest.approx(SECONDS["mlp5"])
    assert (rows["bc (arch=lc)"].steps, rows["bc (arch=mlp5)"].steps) == (STEPS, 2 * STEPS)
    assert report.training_s == pytest.approx(STEPS * SECONDS["lc"] + 2 * STEPS * SECONDS["mlp5"])
    table = report.render()
    assert "bc (arch=lc)" in table and "bc (arch=mlp5)" in table


@pytest.mark.parametrize("arch", ["default", "lc"])
def test_a_method_run_with_one_config_is_named_by_its_name_alone(tmp_path, arch):
    report = _report(_plan(tmp_path, **{arch: {"steps": STEPS}}))
    [work] = report.works
    seconds = SECONDS[None if arch == "default" else arch]
    assert (work.shown, work.stage, work.seconds_per_step) == ("bc", "policy", seconds)


def test_runs_that_may_stop_early_are_said_to_make_the_estimate_an_upper_bound(tmp_path):
    text = _report(_plan(tmp_path, lc={"steps": STEPS, "stop_early": "paper"},
                         mlp5={"steps": STEPS})).render()  # fmt: skip
    assert "1 of the 2 runs to train may stop a stage early" in text
    assert "an upper bound for them" in text
    text = _report(_plan(tmp_path, lc={"steps": STEPS}, mlp5={"steps": STEPS})).render()
    assert "stop a stage early" not in text


def test_scaled_keys_of_one_method_and_size_are_named_together_beyond_three():
    from ssilbench.runner.dryrun_report import _in_groups

    def key(method: str, arch: str, labeled: int, stacked: int | None = None) -> str:
        fields = {"method": method, "config": {"arch": arch}, "labeled": labeled}
        return json.dumps({**fields, "stacked": stacked} if stacked else fields)

    many = {key("bc", "cnn1", n, s) for n in (2, 10, 64) for s in (None, 5)}
    few = {key("vm_idm", "lc", 2), key("vm_idm", "lc", 64, 5)}
    assert _in_groups(many | few) == [
        "bc cnn1 (6 label counts and stackings)",
        "vm_idm lc N_L=2",
        "vm_idm lc N_L=64 x5 stacked",
    ]
