"""Evaluation overlapped with training: snapshots of the policy are scored in a worker thread
while the method trains on.

On a GPU, training keeps the device busy while rollouts are mostly environment stepping on
the CPU, so running them side by side hides most of the evaluation time. On a CPU the two
would only compete for the same cores, so the worker turns this on for CUDA devices only.
Scores are the same as when evaluating in line: a snapshot holds the weights of the step it
was taken at, each evaluation draws from its own seeded generator, and evaluations run one
at a time, in the order they were submitted, so records reach the timeline in step order.

Submitting does not wait for the evaluation in flight: snapshots queue behind it, so one
slow evaluation does not hold training back. The queue is bounded (``max_pending``
snapshots, the one being evaluated included), which bounds the device memory snapshots take;
a submission beyond it waits for the oldest evaluation to finish.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext

import torch

from ssilbench.api import Policy

MAX_PENDING = 4


class OverlappedEvaluation:
    """Runs ``record(policy, step)`` on policy snapshots, in order, in one background thread.

    An evaluation's error is raised by the next :meth:`submit`, :meth:`wait` or
    :meth:`close`, once; the snapshots queued after it are dropped unevaluated, so the
    records stop where the failure happened.
    """

    def __init__(
        self,
        record: Callable[[Policy, int], object],
        device: torch.device,
        max_pending: int = MAX_PENDING,
    ) -> None:
        if max_pending < 1:
            raise ValueError(f"max_pending must be at least 1, not {max_pending}")
        self.record = record
        self.device = device
        self.max_pending = max_pending
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ssilbench-eval")
        self.pending: deque[Future] = deque()
        self._failed = threading.Event()
        self._stream = None

    def _run(self, snapshot: Policy, step: int, ready) -> None:
        if self._failed.is_set():
            return  # an earlier evaluation failed: a later record would leave a gap
        try:
            self._evaluate(snapshot, step, ready)
        except BaseException:
            self._failed.set()
            raise

    def _evaluate(self, snapshot: Policy, step: int, ready) -> None:
        stream = self._stream
        if self.device.type == "cuda":
            if stream is None:
                stream = self._stream = torch.cuda.Stream(self.device)
            stream.wait_event(ready)  # the snapshot's copy has finished on the training stream
        with torch.cuda.stream(stream) if stream is not None else nullcontext():
            self.record(snapshot, step)
        if stream is not None:
            # The snapshot's memory returns to the allocator when this thread drops it; no
            # kernel of this stream may still be reading it then.
            stream.synchronize()

    def submit(self, policy: Policy, step: int) -> None:
        """Queue an evaluation of a snapshot of ``policy`` as of ``step`` and return; waits
        only while ``max_pending`` snapshots are already waiting or being evaluated."""
        self._collect_finished()
        while len(self.pending) >= self.max_pending:
            self._settle_oldest()
        snapshot = policy.snapshot()
        ready = None
        if self.device.type == "cuda":
            ready = torch.cuda.Event()
            ready.record()
        self.pending.append(self.pool.submit(self._run, snapshot, step, ready))

    def _settle_oldest(self) -> None:
        # Popped before its result is read, so an error is raised once.
        self.pending.popleft().result()

    def _collect_finished(self) -> None:
        while self.pending and self.pending[0].done():
            self._settle_oldest()

    def wait(self) -> None:
        """Wait until every queued evaluation has been recorded; an error is raised here."""
        while self.pending:
            self._settle_oldest()

    def close(self) -> None:
        try:
            self.wait()
        finally:
            self.pending.clear()
            self.pool.shutdown(wait=True)
