"""The cost a plan gives: runs the sweep stacks at their share of the group's step time,
measured stacked, not at the step time of a run trained alone; and step times kept from an
earlier plan are said to be so, with when and at what load, and measured again on request."""

from __future__ import annotations

import json

import pytest
import torch

from ssilbench.planning.plan import build_plan
from ssilbench.plugins import load_plugins
from ssilbench.runner.dryrun import DryRunSettings, dry_run, interpolate
from ssilbench.runner.timings import (
    MAX_LABELED,
    Measurement,
    StageTiming,
    Timings,
    measure,
    measurement_key,
)
from ssilbench.runner.workload import Recorded, label_spans, labeled_transitions
from ssilbench.runs.spec import Sweep

PLUGINS = load_plugins()
STEPS = 40
ALONE, STACKED = 1.0, 0.25  # made-up step times: what is costed with which shows in the sum


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    sweep = Sweep(methods=["bc"], envs=["maze:10x10"], budgets=["16", "64"], seeds=[0, 1, 2],
                  steps=STEPS)  # fmt: skip
    return build_plan(PLUGINS, sweep, tmp_path_factory.mktemp("data"))


def _timings(plan, per_labeled: float = 0.0) -> Timings:
    """Step times of bc on the task, alone and three runs stacked, at the smallest and the
    largest label budget, as if measured before: ``per_labeled`` more a step for each
    labeled transition (a full-batch stage)."""
    spec = plan.runs[0]
    method, task = plan.method_of(spec), plan.task_of(spec)
    device = torch.device("cpu")
    timings = Timings(None)
    for stacked, seconds in ((1, ALONE), (3, STACKED)):
        for labeled in (16, 64):
            key = measurement_key(method, task.spec, device, stacked, labeled)
            stages = {"policy": StageTiming(seconds + per_labeled * labeled)}
            timings.add(Measurement(key, "bc", "cpu", stages, 0.0, 0.0, stacked=stacked,
                                    labeled=labeled))  # fmt: skip
    return timings


def _policy_compute(plan, timings, **how) -> float:
    settings = DryRunSettings(measure_missing=False, **how)
    report = dry_run(plan, PLUGINS, torch.device("cpu"), timings, Recorded(set(), set()), settings)
    [work] = report.works
    assert (work.method, work.stage, work.to_train) == ("bc", "policy", len(plan.runs))
    return work.seconds


def test_each_run_is_costed_at_its_label_budget(tmp_path):
    # Measured at the smallest and the largest budget (16 and 64 labeled transitions); a run
    # at 40 is costed halfway between, not at the sample size every run was timed at before.
    sweep = Sweep(methods=["bc"], envs=["maze:10x10"], budgets=["16", "40", "64"], seeds=[0],
                  steps=STEPS)  # fmt: skip
    plan = build_plan(PLUGINS, sweep, tmp_path)
    per = 0.01
    expected = STEPS * sum(ALONE + per * n for n in (16, 40, 64))
    assert _policy_compute(plan, _timings(plan, per), stack=False) == pytest.approx(expected)


def test_fractions_of_a_dataset_are_measured_at_the_transitions_they_stand_for(tmp_path):
    sweep = Sweep(methods=["bc"], envs=["maze:10x10"], budgets=["0.05", "0.5", "1.0"],
                  seeds=[0], steps=STEPS)  # fmt: skip
    plan = build_plan(PLUGINS, sweep, tmp_path)
    data = plan.task_of(plan.runs[0]).dataset
    assert data is not None  # the mazes are built with the plan
    n = data.num_transitions
    counts = [labeled_transitions(plan, spec) for spec in plan.runs]
    assert sorted(counts) == [round(0.05 * n), round(0.5 * n), n]
    [(lo, hi)] = label_spans(plan, list(range(len(plan.runs)))).values()
    assert (lo, hi) == (round(0.05 * n), min(n, MAX_LABELED))


def test_a_step_time_is_interpolated_between_the_measured_budgets_and_grows_beyond():
    assert interpolate(40, 16, 64, 1.0, 2.0) == 1.5
    assert interpolate(16, 16, 64, 1.0, 2.0) == 1.0 and interpolate(64, 16, 64, 1.0, 2.0) == 2.0
    assert interpolate(7, 7, 7, 3.0, 3.0) == 3.0  # one budget: one measurement
    # beyond the largest measured budget (MAX_LABELED) at the measured slope, never falling
    assert interpolate(112, 16, 64, 1.0, 2.0) == 3.0
    assert interpolate(112, 16, 64, 2.0, 1.0) == 1.0


def test_runs_stacked_in_one_process_are_costed_at_the_stacked_step_time(plan):
    # one process stacks each budget's three seeds into one group
    assert _policy_compute(plan, _timings(plan)) == 6 * STEPS * STACKED


def test_runs_trained_one_at_a_time_are_costed_alone(plan):
    timings = _timings(plan)
    assert _policy_compute(plan, timings, stack=False) == 6 * STEPS * ALONE
    # a pool takes runs one at a time unless asked to stack
    assert _policy_compute(plan, timings, workers=2) == 6 * STEPS * ALONE
    # asked to stack, a pool's units are the label budgets: still three runs to a group
    assert _policy_compute(plan, timings, workers=2, stack=True) == 6 * STEPS * STACKED


def test_a_stage_too_large_to_stack_is_costed_alone(plan, monkeypatch):
    # the trainer streams a stage whose data exceeds STACK_BYTES, run by run
    monkeypatch.setattr("ssilbench.train.batched.STACK_BYTES", 1)
    assert _policy_compute(plan, _timings(plan)) == 6 * STEPS * ALONE


def test_a_stacked_measurement_fits_the_runs_together(plan, monkeypatch):
    spec = plan.runs[0]
    method, task = plan.method_of(spec), plan.task_of(spec)
    fitted: list[int] = []
    fit_many = method.cls.fit_many

    def counting(self, ctxs):
        fitted.append(len(ctxs))
        return fit_many(self, ctxs)

    monkeypatch.setattr(method.cls, "fit_many", counting)
    torch.set_num_threads(1)
    m = measure(method, task, PLUGINS, torch.device("cpu"), stacked=3)
    assert fitted == [3]
    assert m.stacked == 3 and m.stages["policy"].steps_timed >= 1
    assert m.key == measurement_key(method, task.spec, torch.device("cpu"), 3)
    assert m.key != measurement_key(method, task.spec, torch.device("cpu"))


@pytest.mark.parametrize("labeled", [300, 1500])
def test_a_measurement_trains_on_the_labeled_transitions_it_is_asked_for(
    plan, monkeypatch, labeled
):
    # 1500 is more than the usual sample store holds (1024 frames): it grows to hold them
    from ssilbench.runner import timings

    spec = plan.runs[0]
    method, task = plan.method_of(spec), plan.task_of(spec)
    seen: list[tuple[str, int]] = []
    declare = timings.RunInputs.declare

    def recording(method, task, store, budget, *args, **kwargs):
        seen.append((budget, store.num_transitions))
        return declare(method, task, store, budget, *args, **kwargs)

    monkeypatch.setattr(timings.RunInputs, "declare", staticmethod(recording))
    torch.set_num_threads(1)
    m = measure(method, task, PLUGINS, torch.device("cpu"), steps=2, labeled=labeled)
    [(budget, transitions)] = seen
    assert budget == str(labeled) and transitions >= labeled
    assert m.labeled == labeled
    assert m.key == measurement_key(method, task.spec, torch.device("cpu"), 1, labeled)
    assert m.key != measurement_key(method, task.spec, torch.device("cpu"))


def test_a_method_that_cannot_stack_is_measured_alone(tmp_path):
    sweep = Sweep(methods=["lapo"], envs=["maze:10x10"], budgets=["16"], seeds=[0],
                  steps=60, options={"state": "image"}, config={"size": "small"})  # fmt: skip
    plan = build_plan(PLUGINS, sweep, tmp_path / "data")
    spec = plan.runs[0]
    method = plan.method_of(spec)
    assert not method.cls.batched
    torch.set_num_threads(1)
    m = measure(method, plan.task_of(spec), PLUGINS, torch.device("cpu"), stacked=4)
    assert m.stacked == 1


def test_plan_says_which_step_times_were_measured_stacked(cli):
    shown = cli("plan", "--measure", "--method", "bc", "--env", "maze:10x10", "--budgets", "16",
                "--seeds", "0,1", "--steps", "40", "--results", str(cli.results),
                "--data-root", str(cli.data))  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert "measured stacked too (2 runs fitted together" in shown.stdout
    alone = cli("plan", "--measure", "--method", "bc", "--env", "maze:10x10", "--budgets", "16",
                "--seeds", "0,1", "--steps", "40", "--workers", "2", "--results",
                str(cli.tmp / "other"), "--data-root", str(cli.data))  # fmt: skip
    assert alone.returncode == 0, alone.stderr
    assert "measured stacked" not in alone.stdout


def _kept(results) -> dict[str, tuple[float, float | None]]:
    return {m["key"]: (m["measured_at"], m["load"])
            for m in json.loads((results / "timings.json").read_text())}  # fmt: skip


def test_kept_step_times_say_when_and_at_what_load_and_remeasure_replaces_them(cli):
    args = [
        "plan",
        "--measure",
        "--method",
        "bc",
        "--env",
        "maze:10x10",
        "--budgets",
        "16",
        "--seeds",
        "0,1",
        "--steps",
        "40",
        "--results",
        str(cli.results),
        "--data-root",
        str(cli.data),
    ]
    first = cli(*args)
    assert first.returncode == 0, first.stderr
    assert "on a small store of the task's shape): now, at load " in first.stdout
    assert "measuring step times 1 of 2: bc on maze:10x10 at 16 labeled" in first.stderr
    assert "measuring step times 2 of 2: bc on maze:10x10" in first.stderr
    measured = _kept(cli.results)
    assert len(measured) == 2  # bc alone and two runs stacked
    kept = json.loads((cli.results / "timings.json").read_text())
    # plan takes the median of 11 step-to-step times (12 steps), a passing spike moves it less
    assert {m["stages"]["policy"]["steps_timed"] for m in kept} == {11}
    assert all(load is not None and load >= 0 for _, load in measured.values())
    again = cli(*args)
    assert again.returncode == 0, again.stderr
    assert "): 2 kept in timings.json from earlier plans (the oldest from " in again.stdout
    assert "'ssilbench plan --remeasure' measures them again" in again.stdout
    assert "measuring" not in again.stderr and _kept(cli.results) == measured
    fresh = cli(*args, "--remeasure")
    assert fresh.returncode == 0, fresh.stderr
    assert "): now, at load " in fresh.stdout and "kept in timings.json" not in fresh.stdout
    remeasured = _kept(cli.results)
    assert remeasured.keys() == measured.keys()
    assert all(remeasured[k][0] > measured[k][0] for k in measured)
    # run takes no --remeasure: a run measures only what is missing
    refused = cli("run", *args[1:], "--remeasure", "--dry-run")
    assert refused.returncode == 2 and "No such option '--remeasure'" in refused.stderr


def test_a_sweep_over_an_hour_on_a_cpu_is_told_what_would_fit(plan):
    def rendered(seconds: float) -> str:
        timings = _timings(plan)
        for m in timings.items.values():
            m.stages["policy"].seconds_per_step = seconds
        settings = DryRunSettings(measure_missing=False, stack=False)
        return dry_run(plan, PLUGINS, torch.device("cpu"), timings, Recorded(set(), set()),
                       settings).render()  # fmt: skip

    long = rendered(60.0)  # 6 runs x 40 steps x 60 s: 4 h
    assert "On this CPU that is about 4.0 h. To try the sweep here first: --steps-scale 0.1" in long
    assert "fewer label budgets or seeds" in long and "--device cuda" in long
    assert "To try the sweep here first" not in rendered(1.0)  # 4 min: nothing to suggest


PRETRAIN_STEPS = 10**6


def _pretrain_then_fit(self, ctx):
    """A pretraining outside the declared stages, far too long for a measurement to train
    whole, then the method's own fit."""
    side = ctx.plan.side_stage("pretrain", PRETRAIN_STEPS)
    while side.remaining:
        side.tick()
    return type(self).__mro__[1].fit(self, ctx)


def _pretraining_sweep(tmp_path):
    """bc and idm_labeling on one task, both pretraining the same way first: a plan and
    their measurements (3 steps of each stage)."""
    sweep = Sweep(methods=["bc", "idm_labeling"], envs=["maze:10x10"], budgets=["16"],
                  seeds=[0, 1], steps=STEPS)  # fmt: skip
    plan = build_plan(PLUGINS, sweep, tmp_path / "data")
    torch.set_num_threads(1)
    timings = Timings(None)
    for spec in plan.runs[::2]:  # one run of each method
        method = plan.method_of(spec)
        method.cls = type(f"Pretrained{method.cls.__name__}", (method.cls,),
                          {"fit": _pretrain_then_fit})  # fmt: skip
        for labeled in (None, 16):
            m = measure(method, plan.task_of(spec), PLUGINS, torch.device("cpu"), steps=3,
                        labeled=labeled)  # fmt: skip
            assert m.stages["pretrain"].steps_timed == 2  # 3 steps: 2 intervals, not 10**6
            assert m.stages["pretrain"].side_steps == PRETRAIN_STEPS
            assert all(t.side_steps is None for name, t in m.stages.items() if name != "pretrain")
            timings.add(m)
    return plan, timings


def test_training_outside_the_stages_is_timed_briefly_and_priced_once_per_task(tmp_path):
    plan, timings = _pretraining_sweep(tmp_path)
    settings = DryRunSettings(measure_missing=False, shipped=False, stack=False)
    report = dry_run(plan, PLUGINS, torch.device("cpu"), timings, Recorded(set(), set()), settings)
    [side] = [w for w in report.works if w.outside]
    # four runs of two methods reach it; it trains once, for the task
    assert (side.method, side.stage, side.steps) == ("bc,idm_labeling", "pretrain", PRETRAIN_STEPS)
    assert (side.runs, side.trainings, side.to_train) == (4, 1, 1)
    # the step times at the runs' label budget, one of each method
    measured = [m.stages["pretrain"].seconds_per_step for m in timings.items.values()
                if m.labeled == 16]  # fmt: skip
    assert side.seconds == pytest.approx(PRETRAIN_STEPS * sum(measured) / 2)  # their median
    declared = sum(w.seconds for w in report.works if not w.outside)
    assert report.training_s == pytest.approx(declared + side.seconds)
    text = report.render()
    assert "  * pretrain: trained outside the declared stages" in text, text
    assert "Not in the estimate" not in text


def test_training_outside_the_stages_kept_without_its_steps_is_named_not_priced(tmp_path):
    """Step times kept before side stages recorded their steps: named, not in the sum."""
    plan, timings = _pretraining_sweep(tmp_path)
    for m in timings.items.values():
        m.stages["pretrain"].side_steps = None
    settings = DryRunSettings(measure_missing=False, shipped=False, stack=False)
    report = dry_run(plan, PLUGINS, torch.device("cpu"), timings, Recorded(set(), set()), settings)
    assert not any(w.outside for w in report.works)
    assert report.training_s == pytest.approx(sum(w.seconds for w in report.works))
    text = report.render()
    assert "Not in the estimate: bc pretrain (" in text and "idm_labeling pretrain (" in text
    assert "train outside the declared stages" in text
