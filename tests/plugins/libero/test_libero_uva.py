"""UVA on a LIBERO-10 task end to end through the CLI: demonstrations imported (the
``data demo`` one, or written in LIBERO's layout), UVA (looked up by name) trained, and
rollouts in the real scene."""

from __future__ import annotations

import json

import pytest

from ssilbench.testing import run_records
from ssilbench_libero.sim import libero_available
from ssilbench_libero.tasks import TASKS

from .conftest import DEMO_TASK
from .test_libero_data import write_task_file

# A tiny model: seconds per run on a CPU (the point is the pipeline, not the score).
TINY = {
    "profile": "small",
    "width": 32, "depth": 2, "heads": 2, "head_width": 32, "head_depth": 1, "sample_steps": 2,
    "diffusion_steps": 10, "vae_steps": 3, "pretrain_steps": 3, "batch_size": 4, "vae_batch": 4,
}  # fmt: skip
ARCH = ["-c", "arch_options=" + json.dumps(TINY)]


needs_libero = pytest.mark.skipif(
    not libero_available(), reason="LIBERO is not installed: pip install 'ssilbench[libero]'"
)


@pytest.mark.slow
@needs_libero
def test_uva_runs_on_the_libero10_demo(cli, libero_demo):
    """``data demo libero10``'s dataset (scripted episodes played in the real scene), as the
    printed command says to use it: -o dataset=demo; UVA's defaults on libero10 (the agent
    view, 10-number actions) train and evaluate on it, and the record says it was the demo."""
    cli.data = libero_demo.root
    uva_smoke_run(cli, DEMO_TASK.id, "-o", "dataset=demo", *ARCH, budget=1)
    [record] = run_records(cli.results)
    assert json.loads(record["spec"])["options"]["dataset"] == "demo"
    assert "dataset=demo" in record["env_label"]


@pytest.mark.slow
@needs_libero
def test_uva_runs_a_libero10_task_end_to_end(cli):
    """The reference's history (t-12, t-8, t-4, t) and every input, 7-number actions, on
    demonstrations written in LIBERO's layout and imported."""
    task = TASKS[0]
    write_task_file(cli.tmp / "hdf5", task=task, demos={"demo_0": 12, "demo_1": 10, "demo_2": 9})
    imported = cli("data", "import", "libero10", "--from", str(cli.tmp / "hdf5"),
                   "--data-root", str(cli.data), "--tasks", task.id)  # fmt: skip
    assert imported.returncode == 0, imported.stderr
    uva_smoke_run(cli, task.id, "-o", "frame_stack=13", "-c", "arch_options=" + json.dumps(
        {**TINY, "history_stride": 4, "inputs": "all", "actions": "native"}))  # fmt: skip


def uva_smoke_run(cli, task_id: str, *args: str, budget: int = 2) -> None:
    """``ssilbench run --method uva`` on one task, ``budget`` labeled demonstrations, 3
    steps, and the smoke protocol's two short episodes in the real scene: the run ends done."""
    result = cli.run("--method", "uva", "--env", f"libero10:{task_id}", "--budgets",
                     str(budget), "--seeds", "0", "--steps", "3", "-o", "protocol=smoke", "-o",
                     "max_steps=10", *args, timeout=900)  # fmt: skip
    assert result.returncode == 0, result.stderr
    [record] = run_records(cli.results)
    assert record["status"] == "done", record["error"]
    metrics = json.loads(record["metrics"])
    assert metrics["labeled_demonstrations"] == budget
    assert metrics["success_rate"] in (0.0, 0.5, 1.0)
