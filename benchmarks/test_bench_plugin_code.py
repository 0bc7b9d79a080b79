"""What fingerprinting the plugins' code costs a sweep's plan.

Run with ``python -m pytest benchmarks/test_bench_plugin_code.py``. Target: hashing every
built-in plugin's files from scratch (what a new process does once) under 50 ms on two CPU
cores; resolving the README's main job (18 runs) afterwards reads the cached fingerprints.
"""

from __future__ import annotations

from ssilbench.fingerprint import package_fingerprint
from ssilbench.planning.plan import resolve
from ssilbench.plugins import load_plugins
from ssilbench.runs.spec import Sweep

PACKAGES = ["ssilbench_baselines", "ssilbench_lapo", "ssilbench_libero", "ssilbench_maze",
            "ssilbench_procgen", "ssilbench_pusht", "ssilbench_uva"]  # fmt: skip
README_JOB = Sweep(methods=["bc", "idm_labeling", "vm_idm"], envs=["maze:10x10"],
                   budgets=["16", "64", "256"], seeds=[0, 1])  # fmt: skip


def hash_all_uncached() -> list[str]:
    package_fingerprint.cache_clear()
    return [package_fingerprint(p) for p in PACKAGES]


def test_fingerprints_of_every_built_in_plugin_from_scratch(benchmark):
    prints = benchmark(hash_all_uncached)
    assert "unknown" not in prints
    assert benchmark.stats.stats.median < 0.05


def test_resolving_the_readme_job_with_fingerprints(benchmark):
    plugins = load_plugins()
    resolve(plugins, README_JOB)  # warm: the process has hashed its plugins once
    specs = benchmark(resolve, plugins, README_JOB)
    assert len(specs) == 18 and all(s.code for s in specs)
