"""UVA end to end through the CLI: imported demonstrations, the shared initialisation, each
method on the UVA architecture, and real rollouts in Push-T and in a LIBERO-10 scene."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest
import torch

from ssilbench.api import RunContext
from ssilbench.data.split import split
from ssilbench.plugins import load_plugins
from ssilbench.train.budget import StagePlan
from ssilbench.train.loop import StoppingRule
from ssilbench.train.memo import StageCache

pytest.importorskip(
    "gym_pusht", reason="gym-pusht is not installed: pip install 'ssilbench[pusht]'"
)

# A tiny model: seconds per run on a CPU (the point is the pipeline, not the score).
TINY = {
    "width": 32, "depth": 2, "heads": 2, "head_width": 32, "head_depth": 1, "sample_steps": 2,
    "diffusion_steps": 10, "vae_steps": 3, "pretrain_steps": 3, "batch_size": 4, "vae_batch": 4,
}  # fmt: skip
ARCH = ["-c", "arch_options=" + json.dumps(TINY)]


def _records(results) -> list[dict]:
    db = sqlite3.connect(results / "results.sqlite")
    db.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in db.execute("SELECT * FROM runs ORDER BY method_label")]
    finally:
        db.close()


@pytest.fixture
def pusht_data(cli):
    from ssilbench_pusht.replay import make_demo_dataset

    make_demo_dataset(cli.tmp / "demo.zarr", num_episodes=4, seed=0, max_steps=30)
    result = cli("data", "import", "pusht", "--from", str(cli.tmp / "demo.zarr"),
                 "--data-root", str(cli.data))  # fmt: skip
    assert result.returncode == 0, result.stderr
    return cli


@pytest.mark.slow
def test_every_method_on_uva_runs_pusht_end_to_end(pusht_data):
    cli = pusht_data
    short = ["-o", "eval_episodes=2", "-o", "max_steps=16", "--budgets", "2", "--steps", "4"]
    result = cli.run("--method", "uva,bc,idm_labeling,vm_idm", "--env", "pusht", *short, *ARCH)
    assert result.returncode == 0, result.stderr
    # The autoencoder and the video pretraining are trained once and shared.
    assert result.stdout.count("(reused)") + result.stderr.count("(reused)") >= 3
    records = _records(cli.results)
    assert [r["method"] for r in records] == ["bc", "idm_labeling", "uva", "vm_idm"]
    for r in records:
        assert r["status"] == "done", r["error"]
        metrics = json.loads(r["metrics"])
        assert metrics["labeled_demonstrations"] == 2
        assert 0.0 <= r["score"] <= 1.0  # mean over episodes of the best coverage reward
        assert "success_rate" in metrics
        stages = json.loads(r["stages"])
        assert sum(s["used"] for s in stages.values()) == 4  # step parity
    board = cli("leaderboard", "--results", str(cli.results), "--export", "md")
    assert board.returncode == 0, board.stderr
    assert "N_L=2 demos" in board.stdout


@pytest.mark.slow
def test_uva_vm_idm_sampling_path_reuses_the_trained_network(pusht_data):
    cli = pusht_data
    short = ["-o", "eval_episodes=1", "-o", "max_steps=8", "--budgets", "2", "--steps", "3"]
    for path in ("policy", "vm_idm"):
        result = cli.run("--method", "uva", "--env", "pusht", *short, *ARCH,
                         "-c", f"sampling={path}")  # fmt: skip
        assert result.returncode == 0, result.stderr
    records = _records(cli.results)
    assert len(records) == 2
    stages = [json.loads(r["stages"])["multitask"] for r in records]
    assert sum("reused" in s for s in stages) == 1  # the second path trained nothing new


@pytest.mark.slow
def test_bad_uva_options_exit_2_before_anything_runs(pusht_data, tmp_path):
    cli = pusht_data
    short = ["--budgets", "2", "--steps", "2", "-o", "eval_episodes=1"]
    bad = cli.run("--method", "uva", "--env", "pusht", *short, "-c", 'arch_options={"widht": 8}')
    assert bad.returncode == 2
    assert "widht" in bad.stderr
    # Checkpoints are checked before any run starts (shapes only, on the meta device).
    missing = tmp_path / "missing.ckpt"
    options = json.dumps({**TINY, "vae_checkpoint": str(missing)})
    ckpt = cli.run("--method", "bc", "--env", "pusht", *short, "-c", "arch_options=" + options)
    assert ckpt.returncode == 2
    assert "does not exist" in ckpt.stderr
    unrelated = tmp_path / "unrelated.pt"
    torch.save({"state_dict": {"classifier.weight": torch.zeros(3, 3)}}, unrelated)
    options = json.dumps({**TINY, "backbone_checkpoint": str(unrelated)})
    ckpt = cli.run("--method", "uva", "--env", "pusht", *short, "-c", "arch_options=" + options)
    assert ckpt.returncode == 2
    assert "none of its 1 tensors matches" in ckpt.stderr and "(0 of" in ckpt.stderr
    odd = json.dumps({**TINY, "vae_ch_mult": [1, 2, 2, 2, 2, 2, 2]})  # 64x: 96 px do not divide
    sizes = cli.run("--method", "uva", "--env", "pusht", *short, "-c", "arch_options=" + odd)
    assert sizes.returncode == 2
    assert "not divisible" in sizes.stderr
    assert not (cli.results / "results.sqlite").exists() or _records(cli.results) == []
    wrong = cli.run("--method", "bc", "--env", "pusht", *short, "-c", "arch=mlp5")
    assert wrong.returncode == 2
    assert "continuous" in wrong.stderr


def test_label_then_train_on_labels_and_both_sampling_paths(tmp_path):
    """The role model directly: IDM labels for D_U in model units, a policy trained on them,
    deterministic sampling under a seeded generator, actions within the bounds."""
    from ssilbench_pusht.replay import make_demo_dataset

    plugins = load_plugins()
    env = plugins.environments.create("pusht")
    make_demo_dataset(tmp_path / "demo.zarr", num_episodes=3, seed=1, max_steps=20)
    options = env.Options()
    [store] = env.import_dataset(tmp_path / "demo.zarr", tmp_path / "data", ["pusht"], options,
                                 log=lambda _: None)  # fmt: skip
    task = env.load("pusht", options)
    labeled, unlabeled = split(store, "1", 0, "demonstrations")
    plan = StagePlan([], eval_every=10**9, evaluate=lambda p: None,
                     cache=StageCache(tmp_path / "cache"))  # fmt: skip
    ctx = RunContext(config=None, spec=task.spec, labeled=labeled, unlabeled=unlabeled,
                     video_model=None, device=torch.device("cpu"), seed=0, plan=plan,
                     architectures=plugins.architectures.create, evaluate=lambda p: 0.0,
                     log=lambda _: None)  # fmt: skip
    from ssilbench.api import Stage
    from ssilbench.train.roles import unified

    plan.stages = [Stage("idm", 3), Stage("policy", 3, policy=True)]
    model = unified(ctx, "uva", TINY)
    model.train(["idm"], labeled, plan.stage("idm"), seed=0)
    labels = model.label(unlabeled)
    chunk = task.spec.action_chunk
    assert labels.shape == (len(unlabeled), chunk, 2)
    assert np.all(np.abs(labels) <= 1.0)  # model units: actions scaled to [-1, 1]
    student = model.fresh()
    fresh = zip(student.net.state_dict().values(), model.init_state.values(), strict=True)
    assert all(torch.equal(a, b) for a, b in fresh)
    student.train(["policy"], unlabeled, plan.stage("policy"), seed=1, labels=labels)
    # --stop-early reaches a unified model too: a rule that is met at once stops the stage.
    plan.stages.append(Stage("stopped", 10))
    stopped = plan.stage("stopped")
    rule = StoppingRule(check_every=2, abs_tol=1e9)
    model.fresh().train(["idm"], labeled, stopped, seed=0, rule=rule)
    assert stopped.used == 2 and stopped.stopped_early

    frames = torch.from_numpy(np.array(store.obs[:4])).float().div(255)[None]
    agent = torch.from_numpy(np.array(store.extras["agent_pos"][:4]))[None]
    obs = {"obs": frames.repeat(2, 1, 1, 1, 1), "agent_pos": agent.repeat(2, 1, 1)}
    for path in ("policy", "vm_idm"):
        policy = student.policy(path)
        a = policy.act(obs, generator=torch.Generator().manual_seed(5))
        b = policy.act(obs, generator=torch.Generator().manual_seed(5))
        assert a.shape == (2, chunk, 2)
        assert torch.equal(a, b)
        assert bool((a >= 0).all() and (a <= 512).all())


def _libero_missing() -> str | None:
    try:
        from ssilbench_libero.sim import libero_available
    except ImportError:
        return "the libero plugin is not installed"
    return (
        None if libero_available() else "LIBERO is not installed: pip install 'ssilbench[libero]'"
    )


@pytest.mark.slow
@pytest.mark.skipif(_libero_missing() is not None, reason=str(_libero_missing()))
def test_uva_runs_a_libero10_task_end_to_end(cli):
    from test_libero_data import write_task_file

    from ssilbench_libero.tasks import TASKS

    task = TASKS[0]
    write_task_file(cli.tmp / "hdf5", task=task, demos={"demo_0": 12, "demo_1": 10, "demo_2": 9})
    imported = cli("data", "import", "libero10", "--from", str(cli.tmp / "hdf5"),
                   "--data-root", str(cli.data), "--tasks", task.id)  # fmt: skip
    assert imported.returncode == 0, imported.stderr
    result = cli.run("--method", "uva", "--env", f"libero10:{task.id}", "--budgets", "2",
                     "--steps", "3", "-o", "protocol=smoke", "-o", "max_steps=10", *ARCH,
                     timeout=900)  # fmt: skip
    assert result.returncode == 0, result.stderr
    [record] = _records(cli.results)
    assert record["status"] == "done", record["error"]
    metrics = json.loads(record["metrics"])
    assert metrics["labeled_demonstrations"] == 2
    assert metrics["success_rate"] in (0.0, 0.5, 1.0)  # two smoke episodes in the real scene


@pytest.mark.slow
def test_a_missing_simulator_is_one_message_and_exit_2(pusht_data):
    """Without gym-pusht (blocked here at interpreter start) the planner refuses the sweep
    before any run is recorded, saying what to install."""
    cli = pusht_data
    cli.write_plugin("sitecustomize", "import sys\nsys.modules['gym_pusht'] = None\n")
    result = cli.run("--method", "bc", "--env", "pusht", "--budgets", "2", "--steps", "2")
    assert result.returncode == 2, result.stderr
    assert "pip install 'ssilbench[pusht]'" in result.stderr
    assert not (cli.results / "results.sqlite").exists() or _records(cli.results) == []
    offline = cli.run("--method", "bc", "--env", "pusht", "--budgets", "2", "--steps", "2",
                      "--no-rollouts", *ARCH)  # fmt: skip
    assert offline.returncode == 0, offline.stderr  # training alone needs no simulator
