"""The GPU check's projection of the paper's table (benchmarks/gpu/check.py)."""

from __future__ import annotations

import importlib.util
import json
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


def test_an_evaluation_whose_procgen_library_does_not_load_is_projected_and_says_why(
    check, monkeypatch
):
    # procgen imported on a lent GPU machine, but its native library lacked libGL.so.1 and
    # the check stopped at the evaluation; it now projects it, as without procgen.
    import ssilbench.eval.rollout
    from ssilbench.errors import PluginError
    from ssilbench.testing import load_plugins

    class Evaluator:
        def __init__(self, task, device):
            pass

        def __call__(self, policy):
            raise PluginError("could not load procgen's native library (libGL.so.1: ...)")

        def close(self):
            pass

    monkeypatch.setattr(check, "procgen_missing", lambda: None)
    monkeypatch.setattr(check, "_task", lambda plugins: type("T", (), {"task": None}))
    monkeypatch.setattr(ssilbench.eval.rollout, "Evaluator", Evaluator)
    got = check.evaluation_seconds(load_plugins(), "cpu", policy_call_s=0.01, quick=True)
    assert got["measured"] is False and "libGL.so.1" in got["why"]
    assert got["seconds"] == pytest.approx(
        check.CPU_EVAL_CALLS * (0.01 + check.PAPER["eval_episodes"] / check.ENV_STEPS_PER_S)
    )


def test_the_quick_projection_runs_end_to_end_prints_it_and_writes_the_report(
    check, tmp_path, capsys
):
    out = tmp_path / "report.json"
    check.main(["--quick", "--batch", "2", "--methods", "bc", "--device", "cpu",
                "--project-h100", "0.3", "--out", str(out)])  # fmt: skip
    printed = capsys.readouterr().out
    assert "one evaluation (64 envs):" in printed and "projected: an H100 at 0.3" in printed
    assert "one 120k-step bc run:" in printed
    assert "the paper's table (16 games x 3 seeds x 5 budgets x bc only):" in printed
    saved = json.loads(out.read_text())
    assert saved["complete"] and saved["done"] == ["bc", "flops", "projection"]
    # The projected step time is the step's operations, counted here, at 30% of the peak.
    counted = saved["measured_here"]["bc"]["stages"]["policy"]["flops_per_step"]
    projected = saved["stages"]["bc"]["stages"]["policy"]["seconds_per_step"]
    assert counted > 0 and projected == pytest.approx(counted / (check.H100_BF16_FLOPS * 0.3))
    hours = saved["projection"]["one_run_hours"]["bc"]
    assert saved["projection"]["table_hours"] == pytest.approx(hours * 16 * 3 * 5)


def test_a_crash_keeps_what_was_measured_before_it(check, tmp_path, monkeypatch):
    from ssilbench.runner.timings import Measurement, StageTiming

    def measure(method, *args, **kwargs):
        if method.name != "bc":
            raise RuntimeError("CUDA out of memory")
        return Measurement("key", "bc", "cpu", {"policy": StageTiming(0.01, 1e9, 2)}, 0.0, 0.002)

    monkeypatch.setattr("ssilbench.runner.timings.measure", measure)
    out = tmp_path / "report.json"
    with pytest.raises(RuntimeError, match="out of memory"):
        check.main(["--device", "cpu", "--project-h100", "0.3", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved["done"] == ["bc"] and saved["complete"] is False
    assert saved["measured_here"]["bc"]["stages"]["policy"]["flops_per_step"] == 1e9
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]  # no partial file left


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--out", "no/such/folder/report.json"], "does not exist"),
     (["--methods", "bc,gail"], "choose among bc, idm_labeling, lapo, lapo_plus"),
     (["--batch", "0"], "positive minibatch")],
)  # fmt: skip
def test_wrong_arguments_are_refused_before_measuring(check, args, message, capsys):
    with pytest.raises(SystemExit) as exit:
        check.main(["--device", "cpu", *args])
    assert exit.value.code == 2 and message in capsys.readouterr().err
