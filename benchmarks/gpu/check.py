"""The GPU check of the paper's Procgen table: one script, seconds on one H200.

On the device it runs on it measures

1. the steady-state step time of every stage of ``bc``, ``idm_labeling``, ``lapo`` and
   ``lapo_plus`` at the paper's sizes (IMPALA x4, the paper-size world model) and batch 128,
   in bf16 with channels-last on CUDA: the methods' own ``fit`` on random 64x64x3 frames,
   each stage stopped after a few steps (``ssilbench.runner.timings.measure``), with the
   floating-point operations of one step and the peak device memory;
2. labelling throughput: an IMPALA x4 IDM over (s, s') pairs read from a store, rows/s;
3. one evaluation: 64 ``procgen:bigfish`` environments with an untrained paper-size policy
   (when procgen is installed); otherwise one policy call on 64 observations, and the
   evaluation projected from the policy calls of one measured on a CPU
   (``benchmarks/test_bench_evaluation.py``: 368 calls, the longest episode);
4. the projected time of one 120k-step run of each method and of the paper's table:
   16 games x 3 seeds x 5 label budgets x 4 methods, with stages shared the way ssilbench
   shares them (``Stage.share``/``per``: one world model per game, one latent policy per
   game and seed), D_U of 2.6M transitions, an evaluation every 500 policy steps.

The report (``--out``) is written after each stage (each method, the labelling, the
evaluation, the projection), so a crash or a time limit keeps what was measured before it;
its ``done`` lists the stages finished and ``complete`` is true once all are.

Usage::

    python benchmarks/gpu/check.py [--device cuda] [--out report.json]
    python benchmarks/gpu/check.py --quick --device cpu      # a smoke test with small models
    python benchmarks/gpu/check.py --quick --batch 4 --device cpu --project-h100 0.3
                                         # the projection's smoke test (seconds on a CPU)

``benchmarks/gpu/README.md`` says how to run it on a lent GPU machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

PAPER = {
    "games": 16,
    "seeds": 3,
    "budgets": 5,
    "transitions": 2_600_000,
    "steps": 120_000,
    "eval_every": 500,
    "eval_episodes": 64,
}
CPU_EVAL_CALLS = 368  # policy calls of one evaluation (benchmarks/test_bench_evaluation.py)
ENV_STEPS_PER_S = 55_000  # procgen bigfish, 64 envs (REFERENCE.md: 55k-95k)
METHODS = ("bc", "idm_labeling", "lapo", "lapo_plus")
# H100 SXM dense peaks (NVIDIA's data sheet), for --project-h100: training in bf16; the
# policy at evaluation runs in float32, whose convolutions cuDNN computes in TF32.
H100_BF16_FLOPS = 989e12
H100_TF32_FLOPS = 494e12


def _task(plugins):
    from ssilbench.planning.plan import TaskInfo

    env = plugins.environments.create("procgen")
    options = env.Options()
    return TaskInfo("procgen:bigfish", options, env.load("bigfish", options), None)


# Every minibatch setting of the four methods' configs (--batch sets those a config has).
BATCH_FIELDS = ("batch_size", "idm_batch_size", "world_model_batch")


def _method(plugins, name: str, quick: bool, batch: int | None = None):
    from ssilbench.planning.plan import MethodInfo

    cls = plugins.methods.load(name)
    # bf16 with channels-last: lapo's fast_cuda (on by default), impala_bf16 for the others
    values = {} if name.startswith("lapo") else {"arch": "impala_bf16"}
    if quick:
        values = {"size": "small"} if name.startswith("lapo") else {"arch": "impala_small"}
    if batch is not None:
        values |= {k: batch for k in BATCH_FIELDS if k in cls.Config.model_fields}
    return MethodInfo(name, cls, cls.Config.model_validate(values))


def measure_stages(
    plugins,
    device,
    quick: bool,
    steps: int | None = None,
    batch: int | None = None,
    measured: Callable[[str, dict], None] | None = None,
    methods: tuple[str, ...] = METHODS,
) -> dict:
    """Each method's stages timed (see the module docstring); ``measured(name, info)`` is
    called after each method, so that a caller can keep it before the next one starts."""
    from ssilbench.runner.timings import measure

    out = {}
    task = _task(plugins)
    for name in methods:
        method = _method(plugins, name, quick, batch)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        began = time.perf_counter()
        m = measure(method, task, plugins, device, steps=steps or (4 if quick else 12), flops=True)
        stages = {
            stage: {"seconds_per_step": t.seconds_per_step, "flops_per_step": t.flops_per_step}
            for stage, t in m.stages.items()
        }
        out[name] = {
            "stages": stages,
            "declared": {s.name: s.steps for s in _stages(method, task)},
            "shares": {s.name: [s.share, list(s.per)] for s in _stages(method, task) if s.share},
            "policy_call_64_s": m.eval_forward_seconds,
            "peak_device_gib": (
                torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
            ),
            "measured_in_s": time.perf_counter() - began,
        }
        print(f"{name}: " + ", ".join(f"{s} {v['seconds_per_step'] * 1e3:.1f} ms/step"
                                      for s, v in stages.items()), flush=True)  # fmt: skip
        if measured is not None:
            measured(name, out[name])
    return out


def _stages(method, task):
    return method.cls().stages(method.config, PAPER["steps"], task.spec, False)


def labelling_rows_per_s(plugins, device, quick: bool) -> float:
    """An IMPALA IDM over (s, s') pairs of a view, as idm_labeling labels D_U."""
    from ssilbench.data.batches import TransitionFrames
    from ssilbench.data.split import UnlabeledView
    from ssilbench.train.supervised import predict, speed_of

    arch = plugins.architectures.create("impala_small" if quick else "impala")
    speed = speed_of(arch, device)
    net = speed.module(arch.build((6, 64, 64), 15).to(device)).eval()
    rows = 1024 if quick else 8192
    frames = np.random.default_rng(0).integers(0, 256, (rows + 1, 3, 64, 64), dtype=np.uint8)
    inputs = TransitionFrames(UnlabeledView(frames, np.arange(rows)), device).inputs("pair")
    predict(net, inputs[slice(0, 256)], speed)  # warm-up
    _sync(device)
    began = time.perf_counter()
    predict(net, inputs, speed)
    _sync(device)
    return rows / (time.perf_counter() - began)


def counted_flops(fn) -> float:
    """Floating-point operations of ``fn()`` (torch.utils.flop_counter)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return float(counter.get_total_flops())


def flops_projection(
    plugins, stages: dict, utilisation: float, quick: bool = False
) -> tuple[dict, float, dict]:
    """Step times, labelling rows/s and an evaluation's time on an H100 running at
    ``utilisation`` of its peak, from the floating-point operations counted here (of the
    small IMPALA with ``quick``, as the stages were)."""
    from ssilbench.data.tensors import as_model_input

    impala = plugins.architectures.create("impala_small" if quick else "impala")
    cpu = torch.device("cpu")
    frames = np.random.default_rng(0).integers(0, 256, (64, 6, 64, 64), dtype=np.uint8)
    with torch.no_grad():
        idm = impala.build((6, 64, 64), 15).eval()
        per_row = counted_flops(lambda: idm(as_model_input(frames, cpu))) / 64
        policy = impala.build((3, 64, 64), 15).eval()
        per_call = counted_flops(lambda: policy(as_model_input(frames[:, :3], cpu)))
    projected = {}
    for name, info in stages.items():
        timed = {
            stage: {**t, "seconds_per_step": t["flops_per_step"] / (H100_BF16_FLOPS * utilisation)}
            for stage, t in info["stages"].items()
        }
        projected[name] = {**info, "stages": timed}
    rows_per_s = H100_BF16_FLOPS * utilisation / per_row
    call = per_call / (H100_TF32_FLOPS * utilisation) + PAPER["eval_episodes"] / ENV_STEPS_PER_S
    why = (f"an H100 at {utilisation:g} of its peak over the operations counted here, "
           f"{CPU_EVAL_CALLS} policy calls of 64 observations and procgen at "
           f"{ENV_STEPS_PER_S:,} steps/s")  # fmt: skip
    evaluation = {"seconds": CPU_EVAL_CALLS * call, "measured": False, "why": why,
                  "policy_call_flops": per_call, "labelling_flops_per_row": per_row}  # fmt: skip
    return projected, rows_per_s, evaluation


def procgen_missing() -> str | None:
    """Why procgen cannot run here (not importable, or its native library does not load),
    or None when it can."""
    from ssilbench_procgen.vec_env import procgen_problem

    return procgen_problem()


def _projected_evaluation(policy_call_s: float, why: str) -> dict:
    seconds = CPU_EVAL_CALLS * (policy_call_s + PAPER["eval_episodes"] / ENV_STEPS_PER_S)
    return {"seconds": seconds, "measured": False, "why": why}


def evaluation_seconds(plugins, device, policy_call_s: float, quick: bool) -> dict:
    """One evaluation's wall time: measured with procgen, else projected."""
    from ssilbench.errors import PluginError
    from ssilbench.eval.rollout import Evaluator
    from ssilbench.train.supervised import ClassifierPolicy

    if (why := procgen_missing()) is not None:  # kept, so that the next machine can mend it
        return _projected_evaluation(policy_call_s, why)
    task = _task(plugins).task
    arch = plugins.architectures.create("impala_small" if quick else "impala")
    net = arch.build((3, 64, 64), 15).to(device).eval()
    evaluator = Evaluator(task, device)
    try:
        evaluator(ClassifierPolicy(net))  # warm-up: builds procgen, kernels
        began = time.perf_counter()
        result = evaluator(ClassifierPolicy(net))
        seconds = time.perf_counter() - began
    except PluginError as exc:  # a library procgen built from source does not load
        return _projected_evaluation(policy_call_s, str(exc))
    finally:
        evaluator.close()
    return {"seconds": seconds, "measured": True, "mean_return": result.mean_return}


def project(stages: dict, label_rows_per_s: float, eval_s: float) -> dict:
    """Hours of one run of each method and of the table (see the module docstring)."""
    games, seeds, budgets = PAPER["games"], PAPER["seeds"], PAPER["budgets"]
    per_run, table, counted = {}, 0.0, set()
    for name, info in stages.items():
        run = table_part = 0.0
        for stage, steps in info["declared"].items():
            seconds = steps * info["stages"].get(stage, {}).get("seconds_per_step", math.nan)
            run += seconds
            share = info["shares"].get(stage)
            if share is None:
                trainings = games * seeds * budgets
            elif tuple(share[1]) == ("seed",):
                trainings = games * seeds
            else:
                trainings = games
            if share is not None and share[0] in counted:
                trainings = 0  # trained by the other method already (LAPO's world model)
            table_part += trainings * seconds
            if share is not None:
                counted.add(share[0])
        # Labelling D_U: idm_labeling every run; lapo/lapo_plus the world model's latents,
        # once per game for both (their decoders then read latents, a negligible cost).
        labelling = PAPER["transitions"] / label_rows_per_s
        if name == "idm_labeling":
            run += labelling
            table_part += labelling * games * seeds * budgets
        elif name.startswith("lapo"):
            run += labelling
            table_part += labelling * games if "latents" not in counted else 0.0
            counted.add("latents")
        policy_steps = sum(
            steps for stage, steps in info["declared"].items() if stage in _POLICY[name]
        )
        evaluations = policy_steps / PAPER["eval_every"]
        run += evaluations * eval_s
        table_part += evaluations * eval_s * games * seeds * budgets
        per_run[name] = run / 3600
        table += table_part
    unshared = sum(per_run.values()) * games * seeds * budgets
    return {"one_run_hours": per_run, "table_hours": table / 3600,
            "table_hours_every_run_alone": unshared}  # fmt: skip


_POLICY = {"bc": {"policy"}, "idm_labeling": {"policy"}, "lapo": {"decoder"},
           "lapo_plus": {"policy"}}  # fmt: skip


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Report:
    """The JSON report, written to ``path`` (when given) after each stage: ``done`` lists the
    stages finished, ``complete`` says whether all were."""

    def __init__(self, path: Path | None, **head) -> None:
        self.path, self.began = path, time.perf_counter()
        self.data = {**head, "done": [], "complete": False, "wall_s": 0.0}

    def method(self, key: str, name: str, info: dict) -> None:
        self.data.setdefault(key, {})[name] = info
        self.record(name)

    def record(self, stage: str, **values) -> None:
        self.data.update(values)
        self.data["done"].append(stage)
        self.save()

    def save(self) -> None:
        """Replace the file whole, so that a process killed while writing leaves the last
        complete report."""
        if self.path is None:
            return
        self.data["wall_s"] = time.perf_counter() - self.began
        partial = self.path.with_name(self.path.name + ".partial")
        partial.write_text(json.dumps(self.data, indent=1, default=float))
        os.replace(partial, self.path)


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--quick", action="store_true", help="small models (a smoke test)")
    parser.add_argument(
        "--batch",
        type=int,
        default=None,
        help="every stage's minibatch (default: the methods' own, 128 as in the paper); a "
        "smaller one makes a smoke test of seconds, whose times say nothing of the paper's",
    )
    parser.add_argument(
        "--methods",
        default=",".join(METHODS),
        help="comma-separated methods to measure (default: the four of the paper's table; "
        "the table's projection counts only these)",
    )
    parser.add_argument(
        "--project-h100",
        type=float,
        metavar="UTILISATION",
        default=None,
        help="no GPU: count each stage's floating-point operations here and project the times "
        "of an H100 running at this share of its peak (e.g. 0.3)",
    )
    args = parser.parse_args(argv)
    args.methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
    if not args.methods or set(args.methods) - set(METHODS):
        parser.error(f"--methods: choose among {', '.join(METHODS)} (comma-separated)")
    if args.batch is not None and args.batch < 1:
        parser.error("--batch: give a positive minibatch size")
    if args.out is not None and not args.out.parent.is_dir():
        parser.error(f"--out {args.out}: the folder {args.out.parent} does not exist")
    return args


def main(argv: list[str] | None = None) -> dict:
    args = _arguments(argv)
    from ssilbench.plugins import load_plugins

    device = torch.device(args.device)
    plugins = load_plugins()
    report = Report(
        args.out,
        device=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        projected_h100_utilisation=args.project_h100,
        torch=torch.__version__,
        quick=args.quick,
        batch=args.batch,
        methods=list(args.methods),
    )
    report.save()  # a wrong --out fails now, not after the measurements
    if args.batch is not None:
        print(f"--batch {args.batch}: every time below is of batch {args.batch}, not the "
              "paper's 128 (a smoke test)", flush=True)  # fmt: skip
    # Projected, the times measured here are kept apart from the projected ones.
    key = "stages" if args.project_h100 is None else "measured_here"

    def keep(name: str, info: dict) -> None:
        report.method(key, name, info)

    if args.project_h100 is not None:
        counted = measure_stages(plugins, device, args.quick, 2, args.batch, keep, args.methods)
        stages, rows_per_s, evaluation = flops_projection(plugins, counted, args.project_h100,
                                                          args.quick)  # fmt: skip
        report.record("flops", stages=stages, labelling_rows_per_s=rows_per_s,
                      evaluation=evaluation)  # fmt: skip
    else:
        stages = measure_stages(plugins, device, args.quick, None, args.batch, keep,
                                args.methods)  # fmt: skip
        rows_per_s = labelling_rows_per_s(plugins, device, args.quick)
        report.record("labelling", labelling_rows_per_s=rows_per_s)
        call = next(iter(stages.values()))["policy_call_64_s"]
        evaluation = evaluation_seconds(plugins, device, call, args.quick)
        report.record("evaluation", evaluation=evaluation)
    print(f"labelling: {rows_per_s:,.0f} (s, s') rows/s", flush=True)
    how = "measured" if evaluation["measured"] else f"projected: {evaluation['why']}"
    print(f"one evaluation (64 envs): {evaluation['seconds']:.1f} s ({how})", flush=True)
    projection = project(stages, rows_per_s, evaluation["seconds"])
    report.record("projection", projection=projection, complete=True)
    for name, hours in projection["one_run_hours"].items():
        print(f"one 120k-step {name} run: {hours:.2f} h")
    methods = "4 methods" if len(stages) == len(METHODS) else f"{', '.join(stages)} only"
    print(f"the paper's table (16 games x 3 seeds x 5 budgets x {methods}): "
          f"{projection['table_hours']:,.0f} device-hours "
          f"({projection['table_hours_every_run_alone']:,.0f} if every run trained all of "
          "its stages alone)")  # fmt: skip
    if args.out is not None:
        print(f"wrote {args.out}")
    return report.data


if __name__ == "__main__":
    main(sys.argv[1:])
