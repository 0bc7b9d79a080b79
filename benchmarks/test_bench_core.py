"""Speed of the core slice on maze:10x10: CLI start-up, training steps, evaluation, main job.

Run with ``python -m pytest benchmarks/`` (not part of the default test run). Targets from
the harness issue: ``--help`` and ``list`` under 1 s; the README's main job under 60 s on
two CPU cores.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ssilbench.api import RunContext
from ssilbench.data.split import split
from ssilbench.eval.rollout import Evaluator
from ssilbench.planning.plan import build_plan
from ssilbench.plugins import load_plugins
from ssilbench.runner.worker import execute
from ssilbench.runs.spec import Sweep
from ssilbench.stages import StagePlan

METHODS = ["bc", "idm_labeling", "vm_idm"]
STEPS = 300
README_JOB = [
    "run", "--method", "bc,idm_labeling,vm_idm", "--env", "maze:10x10",
    "--budgets", "16,64,256", "--seeds", "0,1", "--workers", "2", "-q",
]  # fmt: skip

PLUGINS = load_plugins()


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("data")


def _plan(data_root: Path, method: str, steps: int = STEPS):
    sweep = Sweep(methods=[method], envs=["maze:10x10"], budgets=["256"], seeds=[0], steps=steps)
    plan = build_plan(PLUGINS, sweep, data_root)
    [spec] = plan.runs
    return spec, plan.method_of(spec), plan.task_of(spec)


def _cli(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "ssilbench", *args], check=True, capture_output=True)


def test_cli_help(benchmark):
    benchmark.pedantic(_cli, args=("--help",), rounds=5, iterations=1)


def test_cli_list(benchmark):
    benchmark.pedantic(_cli, args=("list",), rounds=5, iterations=1)


@pytest.mark.parametrize("method", METHODS)
def test_training_steps(benchmark, data_root, method):
    """A whole run of STEPS optimiser steps at N_L=256 (one evaluation at the end)."""
    spec, info, task = _plan(data_root, method)
    outcome = benchmark.pedantic(
        execute, args=(spec, info, task, PLUGINS, torch.device("cpu")), rounds=3, iterations=1
    )
    benchmark.extra_info["steps"] = STEPS
    benchmark.extra_info["ms_per_step_incl_one_eval"] = benchmark.stats["mean"] / STEPS * 1e3
    assert sum(s["used"] for s in outcome.stages.values()) == STEPS


@pytest.mark.parametrize("method", METHODS)
def test_vectorised_evaluation(benchmark, data_root, method):
    """One evaluation of a trained policy: 64 rollouts to their end plus test accuracy."""
    spec, info, task = _plan(data_root, method, steps=50)
    labeled, unlabeled = split(task.dataset, spec.budget, spec.seed)
    stages = info.cls().stages(info.config, 50, task.spec, True)
    plan = StagePlan(stages, eval_every=10**9, evaluate=lambda policy: 0.0)
    ctx = RunContext(
        config=info.config, spec=task.spec, labeled=labeled, unlabeled=unlabeled,
        video_model=task.task.video_model(), device=torch.device("cpu"), seed=0, plan=plan,
        architectures=PLUGINS.architectures.create, evaluate=lambda policy: 0.0,
    )  # fmt: skip
    policy = info.cls().fit(ctx)
    evaluator = Evaluator(task.task, torch.device("cpu"))
    result = benchmark(evaluator, policy)
    benchmark.extra_info["episodes"] = len(result.returns)
    assert len(result.returns) == task.spec.eval_episodes


def test_readme_main_job(benchmark, tmp_path, data_root):
    """The README's first command after installation (datasets cached as after a first run)."""
    results = tmp_path / "results"

    def job():
        shutil.rmtree(results, ignore_errors=True)
        _cli(*README_JOB, "--results", str(results), "--data-root", str(data_root))

    _cli("data", "build", "maze:10x10", "--data-root", str(data_root))
    benchmark.pedantic(job, rounds=1, iterations=1)
