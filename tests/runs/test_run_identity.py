"""A run's identity: pure resolution, then preparation; protocol, data and plugin versions
in the run id; a worker that needs nothing but the specs; a leaderboard that never pools
runs of different protocols."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from ssilbench.data.datasets import TransitionStore
from ssilbench.errors import ConfigError, UsageError
from ssilbench.leaderboard.table import build_table
from ssilbench.planning.plan import (
    SweepPlan,
    build_plan,
    open_datasets,
    prepare,
    resolve,
    resolve_plan,
)
from ssilbench.runner.sweep import run_sweep, work_unit
from ssilbench.runner.units import PoolSetup
from ssilbench.runs.identity import dataset_fingerprint
from ssilbench.runs.records import RunRecord
from ssilbench.runs.spec import SPEC_VERSION, RunSpec, Sweep
from ssilbench.runs.store import ResultsStore

CPU = torch.device("cpu")


def tiny(**overrides) -> Sweep:
    values = dict(methods=["bc"], envs=["maze:10x10"], budgets=["16"], seeds=[0], steps=20)
    return Sweep(**{**values, **overrides})


def maze_task_class(plugins):
    return type(plugins.environments.create("maze").load("10x10"))


def change_eval_episodes(plugins, monkeypatch, episodes: int) -> None:
    """The maze plugin, as a new release that evaluates on ``episodes`` episodes."""
    env_cls = type(plugins.environments.create("maze"))
    load = env_cls.load

    def patched(self, task, options=None):
        loaded = load(self, task, options)
        loaded.spec = loaded.spec.model_copy(update={"eval_episodes": episodes})
        return loaded

    monkeypatch.setattr(env_cls, "load", patched)


def test_resolve_reads_no_file_and_needs_no_simulator(plugins, tmp_path, monkeypatch):
    task_cls = maze_task_class(plugins)

    def forbidden(*args, **kwargs):
        raise AssertionError("resolve touched a dataset or a simulator")

    monkeypatch.setattr(task_cls, "dataset", forbidden)
    monkeypatch.setattr(task_cls, "check_rollouts", forbidden)
    monkeypatch.chdir(tmp_path)
    specs = resolve(plugins, tiny(seeds=[0, 1], methods=["bc", "idm_labeling"]))
    assert len(specs) == 4 and list(tmp_path.iterdir()) == []
    for spec in specs:
        assert spec.version == SPEC_VERSION and spec.data is None and not spec.prepared
        assert spec.protocol and len(spec.protocol) == 16
        assert "maze" in spec.plugins and "baselines" in spec.plugins


def test_prepare_fills_in_the_data_and_keeps_the_design(plugins, tmp_path):
    resolved = resolve_plan(plugins, tiny())
    prepared = prepare(resolved, tmp_path)
    [before], [after] = resolved.runs, prepared.runs
    assert after.prepared and after.data == dataset_fingerprint(prepared.task_of(after).dataset)
    assert after.run_id != before.run_id and after.design_id == before.design_id
    assert prepared.stages[after.run_id] == resolved.stages[before.run_id]
    # Read-only preparation of a task without a dataset leaves its runs unprepared.
    [unbuilt] = prepare(resolve_plan(plugins, tiny()), tmp_path / "empty", "read").runs
    assert unbuilt.data is None and not (tmp_path / "empty").exists()


def test_eval_protocol_data_and_plugin_version_each_make_a_new_run(plugins, tmp_path, monkeypatch):
    [base] = build_plan(plugins, tiny(), tmp_path).runs
    # The plugin changes its evaluation protocol: fewer episodes.
    change_eval_episodes(plugins, monkeypatch, 8)
    [other_protocol] = build_plan(plugins, tiny(), tmp_path).runs
    monkeypatch.undo()
    assert other_protocol.protocol != base.protocol
    assert other_protocol.run_id != base.run_id and other_protocol.data == base.data

    # Another release of the environment's plugin.
    entry = plugins.environments.entries["maze"]
    monkeypatch.setitem(plugins.environments.entries, "maze", type(entry)(
        entry.name, entry.target, entry.description,
        type(entry.origin)(entry.origin.plugin, "ssilbench-maze", "9.9")))  # fmt: skip
    [other_version] = build_plan(plugins, tiny(), tmp_path).runs
    monkeypatch.undo()
    assert other_version.plugins["maze"] == "ssilbench-maze 9.9"
    assert other_version.run_id != base.run_id and other_version.setup_id != base.setup_id
    # ... the same design: reports still find the runs an earlier release recorded.
    assert other_version.design_id == base.design_id

    # The same release, with a results revision (a built-in plugin whose results changed).
    monkeypatch.setitem(plugins.environments.entries, "maze", type(entry)(
        entry.name, entry.target, entry.description,
        dataclasses.replace(entry.origin, revision=2)))  # fmt: skip
    [revised] = build_plan(plugins, tiny(), tmp_path).runs
    monkeypatch.undo()
    assert revised.plugins["maze"] == base.plugins["maze"] + " results r2"
    assert revised.run_id != base.run_id and revised.setup_id != base.setup_id
    assert revised.design_id == base.design_id

    # The dataset is generated again by another generator version.
    dataset = build_plan(plugins, tiny(), tmp_path).tasks[SweepPlan.task_key(base)].dataset
    TransitionStore.write(
        dataset.root, np.asarray(dataset.obs), np.asarray(dataset.actions),
        np.asarray(dataset.rewards), np.asarray(dataset.episode_ends),
        producer={**dataset.manifest["producer"], "generator": "next"},
    )  # fmt: skip
    [regenerated] = build_plan(plugins, tiny(), tmp_path).runs
    assert regenerated.data != base.data and regenerated.protocol == base.protocol
    assert regenerated.run_id != base.run_id and regenerated.design_id == base.design_id


def test_a_worker_needs_only_the_specs_and_refuses_changed_data(plugins, tmp_path):
    plan = build_plan(plugins, tiny(seeds=[0, 1]), tmp_path / "data")
    specs = [RunSpec.model_validate_json(s.model_dump_json()) for s in plan.runs]  # shipped
    setup = PoolSetup((), tmp_path / "data", "cpu")
    results = work_unit(setup, specs)
    assert [r.run_id for r in results] == [s.run_id for s in plan.runs]
    assert all(r.status == "done" for r in results), [r.failure for r in results]

    moved = specs[0].model_copy(update={"data": "0" * 16})
    [refused] = work_unit(setup, [moved])
    assert refused.status == "failed" and "built or imported again" in refused.failure.summary


def test_a_spec_from_another_installation_is_refused(plugins):
    [spec] = resolve(plugins, tiny())
    with pytest.raises(ConfigError, match="plugins installed here"):
        SweepPlan.of(plugins, [spec.model_copy(update={"protocol": "f" * 16})])
    with pytest.raises(ConfigError, match="spec version"):
        SweepPlan.of(plugins, [spec.model_copy(update={"version": SPEC_VERSION - 1})])


def test_a_changed_protocol_reruns_and_the_leaderboard_never_pools_the_two(
    plugins, tmp_path, monkeypatch
):
    torch.set_num_threads(1)
    data, results = tmp_path / "data", tmp_path / "results"
    with ResultsStore(results) as store:
        first = run_sweep(build_plan(plugins, tiny(), data), plugins, store, CPU)
        again = run_sweep(build_plan(plugins, tiny(), data), plugins, store, CPU)
        assert (first.done, again.done, again.skipped) == (1, 0, 1)

        change_eval_episodes(plugins, monkeypatch, 8)
        changed = run_sweep(build_plan(plugins, tiny(), data), plugins, store, CPU)
        assert (changed.done, changed.skipped) == (1, 0)
        records = store.rows("done")
        monkeypatch.undo()

        # The dataset generated again (another generator version): the next sweep reruns.
        plan = build_plan(plugins, tiny(), data)
        dataset = plan.task_of(plan.runs[0]).dataset
        TransitionStore.write(
            dataset.root, np.asarray(dataset.obs), np.asarray(dataset.actions),
            np.asarray(dataset.rewards), np.asarray(dataset.episode_ends),
            producer={**dataset.manifest["producer"], "generator": "next"},
        )  # fmt: skip
        regenerated = run_sweep(build_plan(plugins, tiny(), data), plugins, store, CPU)
        assert (regenerated.done, regenerated.skipped) == (1, 0)
        with_new_data = store.rows("done")
    assert len(records) == 2 and len(with_new_data) == 3
    same_protocol = [r for r in with_new_data if r.spec.protocol == plan.runs[0].protocol]
    assert len(same_protocol) == 2
    with pytest.raises(UsageError, match="differ in data "):
        build_table(same_protocol)
    with pytest.raises(UsageError, match="differ in protocol") as refused:
        build_table(records)
    assert "--latest" in str(refused.value)
    [table] = build_table(records, latest=True).tables
    cell = table.cell("bc", "16")
    assert cell.n == 1
    newest = max(records, key=lambda r: r.finished_at)
    assert cell.mean == pytest.approx(newest.score)


def test_runs_recorded_before_spec_version_4_are_read_and_never_pooled_with_new_ones(
    plugins, tmp_path
):
    [spec] = build_plan(plugins, tiny(), tmp_path / "data").runs
    legacy = spec.model_dump(exclude={"protocol", "plugins", "data"}) | {"version": 3}
    old = RunSpec.model_validate(legacy)
    assert old.protocol is None and old.design_id != spec.design_id
    rows = [
        RunRecord.of(old, "bc", "maze:10x10", score=0.5, metrics={}, finished_at=1.0),
        RunRecord.of(spec.model_copy(update={"seed": 1}), "bc", "maze:10x10", score=0.5,
                     metrics={}, finished_at=2.0),
    ]  # fmt: skip
    with pytest.raises(UsageError, match="differ in version, protocol, data, plugins"):
        build_table(rows)
    assert build_table(rows, latest=True).tables[0].cell("bc", "16").n == 1
    open_datasets(SweepPlan.of(plugins, [spec]), tmp_path / "data")  # the data is still the same


def test_a_refusal_names_the_options_and_plugins_that_differ(plugins, tmp_path):
    [spec] = build_plan(plugins, tiny(), tmp_path / "data").runs
    assert spec.options["layout"] == "paper"  # what a new run takes
    # A run recorded before: without the option, by an earlier maze plugin.
    options = {k: v for k, v in spec.options.items() if k != "layout"}
    before = spec.model_copy(update={"options": options, "code": {**spec.code, "maze": "0" * 16}})
    rows = [
        RunRecord.of(before, "bc", "maze:10x10", score=0.5, metrics={}, finished_at=1.0),
        RunRecord.of(spec.model_copy(update={"seed": 1}), "bc", "maze:10x10", score=0.5,
                     metrics={}, finished_at=2.0),
    ]  # fmt: skip
    with pytest.raises(UsageError, match=r"differ in code\.maze, options\.layout \("):
        build_table(rows)
