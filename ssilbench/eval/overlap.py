"""Evaluation overlapped with training: a snapshot of the policy is scored in a worker thread
while the method trains on.

On a GPU, training keeps the device busy while rollouts are mostly environment stepping on
the CPU, so running them side by side hides most of the evaluation time. On a CPU the two
would only compete for the same cores, so the worker turns this on for CUDA devices only.
Scores are the same as when evaluating in line: the snapshot holds the weights of the step
it was taken at, the evaluation draws from its own seeded generator, and evaluations run
one at a time, in order.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext

import torch

from ssilbench.api import Policy


class OverlappedEvaluation:
    """Runs ``record(policy, step)`` on policy snapshots in one background thread."""

    def __init__(self, record: Callable[[Policy, int], object], device: torch.device) -> None:
        self.record = record
        self.device = device
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ssilbench-eval")
        self.pending: Future | None = None
        self._stream = None

    def _run(self, snapshot: Policy, step: int, ready) -> None:
        stream = self._stream
        if self.device.type == "cuda":
            if stream is None:
                stream = self._stream = torch.cuda.Stream(self.device)
            stream.wait_event(ready)  # the snapshot's copy has finished on the training stream
        with torch.cuda.stream(stream) if stream is not None else nullcontext():
            self.record(snapshot, step)

    def submit(self, policy: Policy, step: int) -> None:
        """Evaluate a snapshot of ``policy`` as of ``step``; at most one evaluation is in
        flight, so a slow evaluation holds training back rather than piling up."""
        self.wait()
        snapshot = policy.snapshot()
        ready = None
        if self.device.type == "cuda":
            ready = torch.cuda.Event()
            ready.record()
        self.pending = self.pool.submit(self._run, snapshot, step, ready)

    def wait(self) -> None:
        """Wait for the evaluation in flight; its error, if any, is raised here."""
        pending, self.pending = self.pending, None
        if pending is not None:
            pending.result()

    def close(self) -> None:
        try:
            self.wait()
        finally:
            self.pool.shutdown(wait=True)
