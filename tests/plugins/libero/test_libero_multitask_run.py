"""The paper's LIBERO-10 setup end to end through the CLI, on a few demonstrations of two
tasks written in LIBERO's HDF5 layout: ``ssilbench run --method uva,bc,idm_labeling,vm_idm
--env libero10:all`` trains one multitask model per method and seed, D_L one demonstration
per task; with LIBERO installed, the rollouts in both scenes give per-task success rates
that the leaderboard shows (``--metric success_rate/<task>``)."""

from __future__ import annotations

import json

import pytest

from ssilbench.testing import run_records
from ssilbench_libero.sim import libero_available
from ssilbench_libero.tasks import TASKS

from .test_libero_data import write_task_file

TINY = {
    "profile": "small",
    "width": 32, "depth": 2, "heads": 2, "head_width": 32, "head_depth": 1, "sample_steps": 2,
    "diffusion_steps": 10, "vae_steps": 3, "pretrain_steps": 3, "batch_size": 4, "vae_batch": 4,
}  # fmt: skip
FIRST, FOURTH = TASKS[0], TASKS[3]
METHODS = ("uva", "bc", "idm_labeling", "vm_idm")


def _sweep(cli, *more: str, methods: tuple[str, ...] = METHODS):
    src = cli.tmp / "hdf5"
    write_task_file(src, FIRST, demos={"demo_0": 12, "demo_1": 10, "demo_2": 9}, seed=1)
    write_task_file(src, FOURTH, demos={"demo_0": 11, "demo_1": 10}, seed=2)
    imported = cli("data", "import", "libero10", "--from", str(src), "--data-root",
                   str(cli.data), "--tasks", f"{FIRST.id},{FOURTH.id}")  # fmt: skip
    assert imported.returncode == 0, imported.stderr
    result = cli.run("--method", ",".join(methods), "--env", "libero10:all", "--budgets", "1",
                     "--seeds", "0", "--steps", "3", "-o", f"tasks={FIRST.id},{FOURTH.id}",
                     "-c", "arch_options=" + json.dumps(TINY), *more, timeout=1800)  # fmt: skip
    assert result.returncode == 0, result.stderr
    records = run_records(cli.results)
    assert sorted(r["method"] for r in records) == sorted(methods)  # one run per method
    for record in records:
        assert record["status"] == "done", record["error"]
        assert record["env"] == "libero10:all"
        assert json.loads(record["metrics"])["labeled_demonstrations"] == 2  # 1 per task
    return records


def test_one_multitask_run_per_method_without_rollouts(cli):
    _sweep(cli, "--no-rollouts")


@pytest.mark.slow
@pytest.mark.skipif(
    not libero_available(), reason="LIBERO is not installed: pip install 'ssilbench[libero]'"
)
def test_multitask_rollouts_report_each_task(cli):
    # One method: the rollouts are the environment's, whichever policy acts (every method's
    # multitask run trains above; UVA's rollouts in LIBERO: test_libero_uva.py).
    records = _sweep(
        cli, "-o", "protocol=smoke", "-o", "max_steps=3", "-o", "max_simulators=1", methods=("bc",)
    )
    for record in records:
        metrics = json.loads(record["metrics"])
        for task in (FIRST, FOURTH):
            assert metrics[f"success_rate/{task.id}"] in (0.0, 0.5, 1.0)  # 2 smoke episodes
        assert metrics["success_rate"] in (0.0, 0.25, 0.5, 0.75, 1.0)
    board = cli("leaderboard", "--results", str(cli.results), "--metric",
                f"success_rate/{FOURTH.id}")  # fmt: skip
    assert board.returncode == 0, board.stderr
    assert "libero10:all" in board.stdout and "N_L=1" in board.stdout
