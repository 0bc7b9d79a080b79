"""Memory and time of one step-time measurement (``ssilbench.runner.timings.measure``) as the
labeled count it is asked for grows 8x and 64x: 256, 2,048 and 16,384 (MAX_LABELED).

The plan measures each method and task at the smallest and largest label budget of its runs,
and the measurement's sample store grows to hold that many transitions. This times ``bc``
(1L CNN, batch 32) on maze:50x50 images (3x51x51 uint8 random frames, the store a task gets
before its dataset is built), 4 steps, each size in a fresh process with one torch thread,
and records its peak resident memory (``ru_maxrss``). The store is written as uint8 to a
temporary folder; the trainer then materialises D_L as floats where it is under STACK_BYTES
(512 MiB), as a real run at that budget does.

    python -m pytest benchmarks/test_bench_plan_measure.py -s

Measured on this workplace's 2-core CPU machine at load 0.7 (torch 2.13.0): 256 labeled
transitions 0.9 s, 426 MB; 2,048: 1.2 s, 637 MB; 16,384: 3.2 s, 1,989 MB. The step time
barely moves (4.6, 5.0, 5.2 ms: batch 32); the memory grows with the labeled count, because
bc's trainer materialises D_L as floats for stacking (as a real run at that budget does):
16,384 images of 3x51x51 are 511 MB as float32.

Of those 1,989 MB, about 1 GB was the 1L CNN's stacked fast path looking for repeated
images: it kept every image's bytes as a dictionary key and stacked the distinct images
into a new tensor, two more copies of D_L. It now keys images by a 16-byte digest (compared
exactly where two share one) and stacks them a chunk at a time. Side by side, old code
from a worktree and new, each size in a fresh process, at load 2.5: 256: 425 / 410 MB;
2,048: 636 / 514 MB; 16,384: 1,988 / 1,476 MB (3.7 / 3.8 s). On the 50x50 maze's real
images (five runs' splits of 1,427 images) the two give identical patch ids and tables, in
0.9-1.3 s each.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

SIZES = [256, 2048, 16384]
CHILD = """
import dataclasses, json, resource, sys, tempfile, time
import torch
torch.set_num_threads(1)
from ssilbench.plugins import load_plugins
from ssilbench.planning.plan import build_plan
from ssilbench.runs.spec import Sweep
from ssilbench.runner.timings import measure
plugins = load_plugins()
sweep = Sweep(methods=["bc"], envs=["maze:50x50"], budgets=["16"], seeds=[0],
              options={"state": "image"}, steps=40)
plan = build_plan(plugins, sweep, tempfile.mkdtemp())
spec = plan.runs[0]
task = dataclasses.replace(plan.task_of(spec), dataset=None)  # random frames of its shape
began = time.perf_counter()
m = measure(plan.method_of(spec), task, plugins, torch.device("cpu"), steps=4,
            labeled=int(sys.argv[1]))
print(json.dumps({"seconds": time.perf_counter() - began,
                  "step": m.stages["policy"].seconds_per_step,
                  "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _measure(labeled: int) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(labeled)], capture_output=True,
                         text=True, check=True)  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("labeled", SIZES)
def test_measure_at_a_label_budget(benchmark, labeled):
    result = benchmark.pedantic(_measure, args=(labeled,), rounds=1, iterations=1)
    benchmark.extra_info.update(result)
    print(
        f"\nlabeled {labeled:>6,}: {result['seconds']:.1f} s, step {result['step'] * 1e3:.2f} ms,"
        f" peak RSS {result['max_rss_mb']:.0f} MB"
    )
