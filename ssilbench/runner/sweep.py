"""Run a planned sweep locally: skip finished runs, record each outcome, keep going on failure."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ssilbench.plugins import Plugins
from ssilbench.runner.plan import Plan, label
from ssilbench.runner.store import ResultsStore
from ssilbench.runner.worker import describe_device, execute, versions


@dataclass
class SweepReport:
    total: int
    skipped: int = 0
    done: int = 0
    failed_before: int = 0  # failed in an earlier sweep and not retried
    failed: list[tuple[str, str]] = field(default_factory=list)  # (run label, last error line)

    @property
    def ok(self) -> bool:
        return not self.failed and not self.failed_before


def run_label(plan: Plan, spec) -> tuple[str, str]:
    """(method label, env label) with non-default config/options spelled out."""
    method = plan.methods[spec.method]
    task = plan.tasks[plan.task_key(spec)]
    return (
        label(spec.method, spec.config, method.cls.Config),
        label(spec.env, spec.options, type(task.options)),
    )


def run_sweep(
    plan: Plan,
    plugins: Plugins,
    store: ResultsStore,
    device: torch.device,
    retry_failed: bool = False,
    on_progress: Callable[[str, str], None] | None = None,
) -> SweepReport:
    """Execute every run of the plan not already done; ``on_progress(event, label)`` reports."""
    store.mark_stale_interrupted()
    statuses = store.statuses()
    provenance = versions(plugins)
    device_name = describe_device(device)
    report = SweepReport(total=len(plan.runs))
    notify = on_progress or (lambda event, text: None)

    for spec in plan.runs:
        method_label, env_label = run_label(plan, spec)
        text = f"{method_label} on {env_label}, N_L={spec.budget}, seed {spec.seed}"
        status = statuses.get(spec.run_id)
        if status == "done" or (status == "failed" and not retry_failed):
            report.skipped += 1
            report.failed_before += status == "failed"
            notify("skipped", text)
            continue
        notify("start", text)
        store.start(spec, method_label, env_label, device_name, provenance)
        began = time.perf_counter()
        try:
            outcome = execute(
                spec, plan.methods[spec.method], plan.tasks[plan.task_key(spec)], plugins, device
            )
        except Exception as exc:
            store.fail(spec.run_id, traceback.format_exc(), time.perf_counter() - began)
            report.failed.append((text, f"{type(exc).__name__}: {exc}"))
            notify("failed", text)
            continue
        store.finish(spec.run_id, outcome, time.perf_counter() - began)
        report.done += 1
        notify("done", text)
    return report
