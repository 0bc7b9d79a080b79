"""The step times shipped with ssilbench: a dry run prices a sweep from them at once, says
where they were measured, and measures on this device only when asked (``--measure``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ssilbench.planning.plan import build_plan
from ssilbench.plugins import load_plugins
from ssilbench.runner.step_table import SHIPPED, StepTable, portable_key
from ssilbench.runner.timings import Measurement, StageTiming, Timings, measurement_key
from ssilbench.runs.spec import Sweep

PLUGINS = load_plugins()


@pytest.fixture(scope="module")
def bc_key(tmp_path_factory):
    sweep = Sweep(methods=["bc"], envs=["maze:10x10"], budgets=["16"], seeds=[0], steps=20)
    plan = build_plan(PLUGINS, sweep, tmp_path_factory.mktemp("d"))
    spec = plan.runs[0]
    method, task = plan.method_of(spec), plan.task_of(spec)
    return lambda labeled: measurement_key(method, task.spec, torch.device("cpu"), 1, labeled)


def _table(tmp_path, key, points: dict[int, float]) -> StepTable:
    timings = Timings(None)
    for labeled, seconds in points.items():
        k = key(labeled)
        timings.add(Measurement(k, "bc", "cpu (x86_64, 1 threads)",
                                {"policy": StageTiming(seconds, 1e6)}, 0.0, 0.0,
                                labeled=labeled, load=0.5))  # fmt: skip
    table = StepTable(tmp_path / "table.json")
    assert table.add(timings) == len(points)
    table.save()
    return StepTable(tmp_path / "table.json")


def test_a_portable_key_keeps_the_device_kind_and_drops_the_torch_version(bc_key):
    fields = json.loads(portable_key(bc_key(16)))
    assert fields["device"] == "cpu" and "torch" not in fields and fields["labeled"] == 16
    assert fields["method"] == "bc"


def test_a_label_count_between_shipped_ones_is_interpolated_never_extrapolated(tmp_path, bc_key):
    table = _table(tmp_path, bc_key, {16: 1.0, 64: 2.0})
    assert table.get(bc_key(16)).stages["policy"].seconds_per_step == 1.0
    between = table.get(bc_key(40))
    assert between.key == bc_key(40) and between.labeled == 40
    assert between.stages["policy"].seconds_per_step == pytest.approx(1.5)
    assert table.get(bc_key(1000)).stages["policy"].seconds_per_step == 2.0
    assert table.get(bc_key(None)) is None  # no label count: only an exact entry
    cuda = bc_key(16).replace('"device": "cpu', '"device": "cuda')
    assert table.get(cuda) is None  # an entry stands for its device kind only


def test_a_dry_run_prices_from_the_shipped_table_at_once_and_measures_only_when_asked(cli):
    sweep = ["--method", "bc", "--env", "maze:10x10", "--budgets", "16,64", "--seeds", "0",
             "--steps", "40", "--data-root", str(cli.data)]  # fmt: skip
    measured = cli("plan", *sweep, "--measure", "--results", str(cli.tmp / "a"))
    assert measured.returncode == 0, measured.stderr
    assert "measuring step times 1 of 2: bc on maze:10x10 at 16 labeled" in measured.stderr
    table = StepTable(cli.tmp / "table.json")
    assert table.add(Timings(cli.tmp / "a" / "timings.json")) == 2
    table.save()
    env_table = {"SSILBENCH_STEP_TABLE": str(cli.tmp / "table.json")}
    cli.env = lambda base=cli.env: {**base(), **env_table}
    shown = cli("run", *sweep, "--dry-run", "--results", str(cli.tmp / "b"))
    assert shown.returncode == 0, shown.stderr
    assert "measuring" not in shown.stderr and not (cli.tmp / "b").exists()
    assert "Estimated compute: training" in shown.stdout
    assert "2 shipped with ssilbench, measured on cpu (" in shown.stdout
    refused = cli("run", *sweep, "--measure", "--results", str(cli.tmp / "c"))
    assert refused.returncode == 2 and "add --dry-run" in refused.stderr
    assert not (cli.tmp / "c").exists()


def test_the_shipped_table_holds_portable_measurements():
    if not SHIPPED.is_file():
        pytest.skip("no step times shipped")
    entries = json.loads(SHIPPED.read_text())
    assert entries, SHIPPED
    for entry in entries:
        m = Measurement.from_json(entry)
        assert portable_key(m.key) == m.key  # no torch version, the device's kind only
        assert m.stages and all(t.seconds_per_step > 0 for t in m.stages.values())
        assert m.device.split(" ")[0] == json.loads(m.key)["device"]


def _one_shipped_entry(tmp_path, monkeypatch):
    """A shipped table of one measured entry (bc at 16 labels, with its FLOP count), and
    the plan of a sweep that also needs bc at 256 and all of IDM labeling's step times."""
    from ssilbench.runner.step_flops import FlopTable

    torch.set_num_threads(1)
    monkeypatch.setenv("SSILBENCH_STEP_FLOPS", str(tmp_path / "flops.json"))
    monkeypatch.setenv("SSILBENCH_STEP_TABLE", str(tmp_path / "table.json"))
    anchor_plan = build_plan(PLUGINS, Sweep(methods=["bc"], envs=["maze:10x10"], budgets=["16"],
                                            seeds=[0], steps=20), tmp_path / "d")  # fmt: skip
    spec = anchor_plan.runs[0]
    method, task = anchor_plan.method_of(spec), anchor_plan.task_of(spec)
    anchor = measurement_key(method, task.spec, torch.device("cpu"), 1, 16)
    counts = FlopTable()
    anchor_flops = counts.count(anchor, method, task, PLUGINS)
    counts.save()
    timings = Timings(None)
    timings.add(Measurement(anchor, "bc", "cpu (x86_64, 1 threads)",
                            {"policy": StageTiming(0.002, None)}, 1e-5, 0.001, load=0.5,
                            labeled=16))  # fmt: skip
    table = StepTable(tmp_path / "table.json")
    table.add(timings)
    table.save()
    sweep = Sweep(methods=["bc", "idm_labeling"], envs=["maze:10x10"], budgets=["16", "256"],
                  seeds=[0], steps=20)  # fmt: skip
    return anchor, anchor_flops, table, build_plan(PLUGINS, sweep, tmp_path / "d")


def test_a_key_without_an_entry_is_scaled_by_counted_flops_and_nothing_is_measured(
    tmp_path, monkeypatch
):
    from ssilbench.runner import dryrun
    from ssilbench.runner.dryrun import DryRunSettings, dry_run
    from ssilbench.runner.workload import Recorded

    anchor, anchor_flops, table, plan = _one_shipped_entry(tmp_path, monkeypatch)

    def no_measuring(*args, **kwargs):
        raise AssertionError("a dry run measured a step time")

    monkeypatch.setattr(dryrun, "measure", no_measuring)
    report = dry_run(plan, PLUGINS, torch.device("cpu"), Timings(None), Recorded(set(), set()),
                     DryRunSettings(measure_missing=False))  # fmt: skip
    assert report.training_s is not None and all(w.seconds is not None for w in report.works)
    found = {key: m for key, (_, m) in report.measurements.items()}
    assert found[anchor].scaled_from is None  # the anchor itself: measured
    scaled = [m for m in found.values() if m.scaled_from]
    assert {m.method for m in scaled} == {"bc", "idm_labeling"}  # bc at 256, all of IDM's
    bc_256 = next(m for m in scaled if m.method == "bc")
    per_flop = 0.002 / anchor_flops.stages["policy"]
    assert bc_256.stages["policy"].seconds_per_step == pytest.approx(
        per_flop * bc_256.stages["policy"].flops_per_step
    )
    assert bc_256.stages["policy"].flops_per_step > anchor_flops.stages["policy"]  # batch 128
    text = report.render()
    assert "1 shipped with ssilbench, measured on cpu (x86_64, 1 threads), at load 0.5" in text
    assert "3 scaled by counted FLOPs" in text and "from the seconds per FLOP of shipped " \
        "measurements (bc default N_L=16)" in text  # fmt: skip
    cuda = anchor.replace('"device": "cpu', '"device": "cuda')
    assert not table.can_scale(cuda)  # a CPU's rate says nothing of a GPU
    # The estimate a batch job's run makes before it starts counts nothing (minutes at the
    # paper's sizes): keys without a shipped count stay unpriced.
    from ssilbench.runner import step_flops

    monkeypatch.setattr(step_flops, "count_flops", no_measuring)
    quiet = dry_run(plan, PLUGINS, torch.device("cpu"), Timings(None), Recorded(set(), set()),
                    DryRunSettings(measure_missing=False, count_flops=False))  # fmt: skip
    priced = {m.method for _, m in quiet.measurements.values() if m is not None}
    assert "idm_labeling" not in priced and "bc" in priced


def test_measure_measures_what_the_table_would_only_scale(tmp_path, monkeypatch):
    """``--measure``: the step times the shipped table has no measurement of are measured
    here, not scaled by FLOPs; the one it measured is taken as it is."""
    from ssilbench.runner import dryrun
    from ssilbench.runner.dryrun import DryRunSettings, dry_run
    from ssilbench.runner.workload import Recorded

    anchor, _, _, plan = _one_shipped_entry(tmp_path, monkeypatch)
    asked: list[tuple[str, int | None]] = []

    def pretend(method, task, plugins, device, steps, stacked, labeled):
        asked.append((method.name, labeled))
        key = measurement_key(method, task.spec, device, stacked, labeled)
        stages = {name: StageTiming(0.004, None) for name in ("idm", "policy")}
        return Measurement(key, method.name, "cpu (x86_64, 1 threads)", stages, 1e-5, 0.001,
                           labeled=labeled, load=0.5)  # fmt: skip

    monkeypatch.setattr(dryrun, "measure", pretend)
    timings = Timings(None)
    report = dry_run(plan, PLUGINS, torch.device("cpu"), timings, Recorded(set(), set()),
                     DryRunSettings(measure_missing=True))  # fmt: skip
    assert sorted(asked) == [("bc", 256), ("idm_labeling", 16), ("idm_labeling", 256)]
    found = {key: m for key, (_, m) in report.measurements.items()}
    assert not any(m.scaled_from for m in found.values())
    assert found[anchor].stages["policy"].seconds_per_step == 0.002  # the shipped one
    assert len(timings.items) == 3 and anchor not in timings.items  # kept for next time
    assert "scaled by counted FLOPs" not in report.render()


@pytest.fixture
def shipped_only(monkeypatch):
    """The shipped step times and FLOP counts, and a dry run that may neither measure nor
    count (minutes a key at the paper's sizes)."""
    from ssilbench.runner import dryrun, step_flops
    from ssilbench.runner.step_flops import SHIPPED_FLOPS

    monkeypatch.setenv("SSILBENCH_STEP_TABLE", str(SHIPPED))
    monkeypatch.setenv("SSILBENCH_STEP_FLOPS", str(SHIPPED_FLOPS))

    def refused(*args, **kwargs):
        raise AssertionError("a dry run of the paper's sweep measured or counted")

    monkeypatch.setattr(dryrun, "measure", refused)
    monkeypatch.setattr(step_flops, "count_flops", refused)


def test_the_shipped_tables_price_the_procgen_paper_sweep_without_measuring_or_counting(
    tmp_path, shipped_only
):
    from ssilbench.runner.dryrun import DryRunSettings, dry_run
    from ssilbench.runner.workload import Recorded

    # the paper's four methods at its smallest, a measured and its largest label budget
    sweep = Sweep(methods=["bc", "idm_labeling", "lapo", "lapo_plus"], envs=["procgen:bigfish"],
                  budgets=["16", "1024", "all"], seeds=[11], steps=120000)  # fmt: skip
    plan = build_plan(PLUGINS, sweep, tmp_path / "data", datasets="read")
    report = dry_run(plan, PLUGINS, torch.device("cpu"), Timings(None), Recorded(set(), set()),
                     DryRunSettings(measure_missing=False))  # fmt: skip
    assert all(w.seconds is not None for w in report.works if w.to_train)
    assert report.training_s and report.evaluation_s  # data preparation: no dataset to size
    found = [m for _, m in report.measurements.values()]
    measured = {m.method for m in found if not m.scaled_from and m.labeled == 1024}
    assert measured == {"bc", "idm_labeling", "lapo", "lapo_plus"}
    # scaled: N_L = 16, and "all" of a dataset not built here (its size unknown: None)
    assert {m.labeled for m in found if m.scaled_from} == {16, None}
    text = report.render()
    assert "4 shipped with ssilbench, measured on cpu (" in text
    assert "scaled by counted FLOPs" in text and "lapo paper N_L=1,024" in text


def test_the_shipped_counts_price_the_manipulation_paper_sweep_without_counting(
    tmp_path, shipped_only
):
    """Figure 6's sweep (UVA's networks at the paper's sizes on Push-T and LIBERO-10):
    counting its FLOPs takes minutes a key, so the shipped file holds them; the shared
    pretraining outside the declared stages is priced once per task."""
    from ssilbench.planning.sweepfile import load_sweep_file, plan_blocks
    from ssilbench.runner.dryrun import DryRunSettings, dry_run
    from ssilbench.runner.workload import Recorded

    path = Path(__file__).parents[2] / "benchmarks" / "paper" / "manipulation.toml"
    plan, _ = plan_blocks(PLUGINS, load_sweep_file(path), path, tmp_path / "data", False,
                          datasets="read")  # fmt: skip
    report = dry_run(plan, PLUGINS, torch.device("cpu"), Timings(None), Recorded(set(), set()),
                     DryRunSettings(measure_missing=False))  # fmt: skip
    declared = [w for w in report.works if not w.outside]
    assert {w.method for w in declared} == {"bc", "idm_labeling", "vm_idm", "uva"}
    assert all(w.seconds is not None for w in report.works if w.to_train)
    tasks = len({spec.env for spec in plan.runs})
    side = {w.stage: w for w in report.works if w.outside}
    assert side.keys() == {"uva_autoencoder", "uva_pretrain"}
    for work in side.values():  # one training per task, for every method reaching it
        assert (work.method, work.trainings) == ("bc,idm_labeling,uva,vm_idm", tasks)
        assert work.runs == len(plan.runs) and work.seconds > 0
    assert "Not in the estimate" not in report.render()


def test_counting_by_shape_finds_the_flops_that_computing_counts(tmp_path):
    from ssilbench.runner.step_flops import count_flops
    from ssilbench.runner.timings import measure

    torch.set_num_threads(1)
    sweep = Sweep(methods=["idm_labeling"], envs=["maze:10x10"], budgets=["64"], seeds=[0],
                  steps=20)  # fmt: skip
    plan = build_plan(PLUGINS, sweep, tmp_path / "d")
    spec = plan.runs[0]
    method, task = plan.method_of(spec), plan.task_of(spec)
    computed = measure(method, task, PLUGINS, torch.device("cpu"), steps=2, flops=True,
                       labeled=64)  # fmt: skip
    counted = count_flops(method, task, PLUGINS, 64)
    assert counted.stages.keys() == computed.stages.keys() == {"idm", "policy"}
    for name, stage in computed.stages.items():
        assert stage.flops_per_step > 0
        assert counted.stages[name] == pytest.approx(stage.flops_per_step)
    assert counted.eval_forward > 0 and counted.other_per_transition > 0  # labelling D_U


def test_a_minibatch_step_grows_with_the_labels_up_to_its_batch_and_then_stays():
    from ssilbench.runner.dryrun import _knee, interpolate

    def at(flops: float) -> Measurement:
        return Measurement("k", "bc", "cpu", {"policy": StageTiming(1.0, flops)}, 0.0, 0.0)

    # counted FLOPs grew 8x from 16 to 16,384 labels: a batch of 128 (16 x 8), not N_L
    knee = _knee((16, 16384), [at(16e6), at(128e6)], "policy")
    assert knee == pytest.approx(128)
    assert interpolate(72, 16, 16384, 0.1, 0.8, knee) == pytest.approx(0.45)
    assert interpolate(1024, 16, 16384, 0.1, 0.8, knee) == pytest.approx(0.8)
    assert interpolate(10**6, 16, 16384, 0.1, 0.8, knee) == pytest.approx(0.8)  # no growth
    # full batch (FLOPs grew as N_L): linear, and growing past the largest count
    full = _knee((16, 64), [at(16e6), at(64e6)], "policy")
    assert full == 64 and interpolate(112, 16, 64, 1.0, 2.0, full) == 3.0
    assert _knee((16, 64), [at(16e6), at(None)], "policy") is None  # no counts: linear


def test_a_scaled_step_is_never_priced_below_the_fastest_measured_one(tmp_path, bc_key):
    # A step's fixed cost does not shrink with its FLOPs: a network a thousand times smaller
    # than every measured one is priced at the fastest measured step, not a thousandth of it;
    # runs stacked by five share that step.
    from types import SimpleNamespace

    from ssilbench.runner.step_flops import FlopCount

    table = _table(tmp_path, bc_key, {16: 0.002, 256: 0.003})
    counted = {k: FlopCount({"policy": 1e6}, 0.0, 0.0) for k in table.items}
    table.flops = SimpleNamespace(get=counted.get)
    stacked = json.dumps({**json.loads(bc_key(64)), "stacked": 5}, sort_keys=True)
    for key, floor in ((bc_key(64), 0.002), (stacked, 0.002 / 5)):
        tiny = table.scaled(key, FlopCount({"policy": 1e3}, 0.0, 0.0))
        assert tiny is not None and tiny.stages["policy"].seconds_per_step == pytest.approx(floor)
        assert tiny.scaled_from == [portable_key(bc_key(16))]  # the fastest entry, named
    # above the floor, FLOPs scale as before: twice the anchor's, twice its step
    large = table.scaled(bc_key(64), FlopCount({"policy": 2e6}, 0.0, 0.0))
    assert large is not None and large.stages["policy"].seconds_per_step == pytest.approx(0.004)
