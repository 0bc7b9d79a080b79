"""UVA on Push-T end to end through the CLI: demonstrations recorded by this plugin and
imported, the shared initialisation, every method on the UVA architecture (looked up by
name, as a user would) and real rollouts."""

from __future__ import annotations

import json

import pytest
import torch

from ssilbench.testing import run_records

pytest.importorskip(
    "gym_pusht", reason="gym-pusht is not installed: pip install 'ssilbench[pusht]'"
)

# A tiny model: seconds per run on a CPU (the point is the pipeline, not the score).
TINY = {
    "profile": "small",
    "width": 32, "depth": 2, "heads": 2, "head_width": 32, "head_depth": 1, "sample_steps": 2,
    "diffusion_steps": 10, "vae_steps": 3, "pretrain_steps": 3, "batch_size": 4, "vae_batch": 4,
}  # fmt: skip
ARCH = ["-c", "arch_options=" + json.dumps(TINY)]


# The runs read the dataset `data demo` imported.
DEMO = ["-o", "dataset=demo"]


@pytest.fixture
def pusht_data(cli):
    """``ssilbench data demo pusht``: scripted episodes written as a replay zarr, imported."""
    result = cli("data", "demo", "pusht", "--episodes", "4", "--episode-length", "30",
                 "--data-root", str(cli.data))  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "-o dataset=demo" in result.stdout  # the run command to use is printed
    return cli


@pytest.mark.slow
def test_every_method_on_uva_runs_pusht_end_to_end(pusht_data):
    cli = pusht_data
    short = [
        "-o",
        "eval_episodes=2",
        "-o",
        "max_steps=16",
        "--budgets",
        "2",
        "--seeds",
        "0",
        "--steps",
        "4",
        *DEMO,
    ]
    result = cli.run("--method", "uva,bc,idm_labeling,vm_idm", "--env", "pusht", *short, *ARCH)
    assert result.returncode == 0, result.stderr
    # The autoencoder and the video pretraining are trained once and shared.
    assert result.stdout.count("(reused)") + result.stderr.count("(reused)") >= 3
    records = run_records(cli.results)
    assert [r["method"] for r in records] == ["bc", "idm_labeling", "uva", "vm_idm"]
    for r in records:
        assert r["status"] == "done", r["error"]
        metrics = json.loads(r["metrics"])
        assert metrics["labeled_demonstrations"] == 2
        assert 0.0 <= r["score"] <= 1.0  # mean over episodes of the best coverage reward
        assert "success_rate" in metrics
        stages = json.loads(r["stages"])
        assert sum(s["used"] for s in stages.values()) == 4  # step parity
        # The demo is told apart from the download's data in the record and its label.
        assert json.loads(r["spec"])["options"]["dataset"] == "demo"
        assert "dataset=demo" in r["env_label"]
    board = cli("leaderboard", "--results", str(cli.results), "--export", "md")
    assert board.returncode == 0, board.stderr
    assert "N_L=2 demos" in board.stdout


@pytest.mark.slow
def test_uva_vm_idm_sampling_path_reuses_the_trained_network(pusht_data):
    cli = pusht_data
    short = [
        "-o",
        "eval_episodes=1",
        "-o",
        "max_steps=8",
        "--budgets",
        "2",
        "--seeds",
        "0",
        "--steps",
        "3",
        *DEMO,
    ]
    for path in ("policy", "vm_idm"):
        result = cli.run("--method", "uva", "--env", "pusht", *short, *ARCH,
                         "-c", f"sampling={path}")  # fmt: skip
        assert result.returncode == 0, result.stderr
    records = run_records(cli.results)
    assert len(records) == 2
    stages = [json.loads(r["stages"])["multitask"] for r in records]
    assert sum("reused" in s for s in stages) == 1  # the second path trained nothing new


@pytest.mark.slow
def test_bad_uva_options_exit_2_before_anything_runs(pusht_data, tmp_path):
    cli = pusht_data
    short = ["--budgets", "2", "--seeds", "0", "--steps", "2", "-o", "eval_episodes=1", *DEMO]
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
    assert ckpt.returncode == 2  # not MAR-B's layout (checkpoint_layout=reference)
    assert "364 missing" in ckpt.stderr and "1 unexpected (classifier.weight)" in ckpt.stderr
    options = json.dumps({**TINY, "backbone_checkpoint": str(unrelated),
                          "checkpoint_layout": "by_name"})  # fmt: skip
    ckpt = cli.run("--method", "uva", "--env", "pusht", *short, "-c", "arch_options=" + options)
    assert ckpt.returncode == 2
    assert "none of its 1 tensors matches" in ckpt.stderr and "(0 of" in ckpt.stderr
    odd = json.dumps({**TINY, "vae_ch_mult": [1, 2, 2, 2, 2, 2, 2]})  # 64x: 96 px do not divide
    sizes = cli.run("--method", "uva", "--env", "pusht", *short, "-c", "arch_options=" + odd)
    assert sizes.returncode == 2
    assert "not divisible" in sizes.stderr
    assert not (cli.results / "results.sqlite").exists() or run_records(cli.results) == []
    wrong = cli.run("--method", "bc", "--env", "pusht", *short, "-c", "arch=mlp5")
    assert wrong.returncode == 2
    assert "continuous" in wrong.stderr
    # A continuous-action network of one input cannot take Push-T's agent_pos as well.
    one_input = cli.run("--method", "bc", "--env", "pusht", *short, "-c", "arch=continuous")
    assert one_input.returncode == 2, one_input.stderr
    assert "agent_pos" in one_input.stderr and "unified" in one_input.stderr


@pytest.mark.slow
def test_a_missing_simulator_is_one_message_and_exit_2(pusht_data):
    """Without gym-pusht (blocked here at interpreter start) the planner refuses the sweep
    before any run is recorded, saying what to install."""
    cli = pusht_data
    cli.write_plugin("sitecustomize", "import sys\nsys.modules['gym_pusht'] = None\n")
    result = cli.run(
        "--method", "bc", "--env", "pusht", "--budgets", "2", "--seeds", "0", "--steps", "2", *DEMO
    )
    assert result.returncode == 2, result.stderr
    assert "pip install 'ssilbench[pusht]'" in result.stderr
    assert not (cli.results / "results.sqlite").exists() or run_records(cli.results) == []
    offline = cli.run("--method", "bc", "--env", "pusht", "--budgets", "2", "--seeds", "0",
                      "--steps", "2",
                      "--no-rollouts", *DEMO, *ARCH)  # fmt: skip
    assert offline.returncode == 0, offline.stderr  # training alone needs no simulator
