"""The GPU check's projection of the paper's table (benchmarks/gpu/check.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "check.py"


@pytest.fixture(scope="module")
def check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _info(declared, seconds, shares=None):
    return {"declared": declared, "shares": shares or {},
            "stages": {k: {"seconds_per_step": v} for k, v in seconds.items()}}  # fmt: skip


def test_the_table_counts_each_shared_stage_once(check):
    world = ["lapo_world_model:x:50000", []]
    stages = {
        "bc": _info({"policy": 120_000}, {"policy": 0.01}),
        "lapo": _info({"world_model": 50_000, "latent_policy": 60_000, "decoder": 10_000},
                      {"world_model": 0.02, "latent_policy": 0.01, "decoder": 0.001},
                      {"world_model": world, "latent_policy": ["lapo_latent", ["seed"]]}),
        "lapo_plus": _info({"world_model": 50_000, "idm_decoder": 10_000, "policy": 60_000},
                           {"world_model": 0.02, "idm_decoder": 0.001, "policy": 0.01},
                           {"world_model": world}),
    }  # fmt: skip
    got = check.project(stages, label_rows_per_s=1e12, eval_s=0.0)
    runs = 16 * 3 * 5
    want = (
        runs * 120_000 * 0.01  # bc
        + 16 * 50_000 * 0.02  # one world model per game, for both methods
        + 16 * 3 * 60_000 * 0.01  # one latent policy per game and seed
        + runs * 10_000 * 0.001  # lapo's decoders
        + runs * (10_000 * 0.001 + 60_000 * 0.01)  # lapo_plus's own stages
    )
    assert got["table_hours"] == pytest.approx(want / 3600, rel=1e-3)
    alone = runs * (1200 + (1000 + 600 + 10) + (1000 + 10 + 600))
    assert got["table_hours_every_run_alone"] == pytest.approx(alone / 3600, rel=1e-3)
    # one run pays for all of its stages, shared or not
    assert got["one_run_hours"]["lapo"] == pytest.approx((1000 + 600 + 10) / 3600, rel=1e-3)


def test_evaluations_follow_the_policy_stage(check):
    stages = {"bc": _info({"policy": 120_000}, {"policy": 0.0})}
    got = check.project(stages, label_rows_per_s=1e12, eval_s=10.0)
    assert got["one_run_hours"]["bc"] == pytest.approx(240 * 10.0 / 3600, rel=1e-3)


def test_an_evaluation_without_procgen_is_projected_and_says_why(check, monkeypatch):
    monkeypatch.setattr(check, "procgen_missing", lambda: "No module named 'cffi'")
    got = check.evaluation_seconds(None, None, policy_call_s=0.01, quick=True)
    assert got == {
        "seconds": pytest.approx(
            check.CPU_EVAL_CALLS * (0.01 + check.PAPER["eval_episodes"] / check.ENV_STEPS_PER_S)
        ),
        "measured": False,
        "why": "No module named 'cffi'",
    }
