"""What watching a run costs per training step: RunTelemetry.train_loss, the call every
optimiser step makes (a training step of the smallest maze model takes milliseconds on the
development machine). Run: pytest benchmarks/test_bench_telemetry.py --benchmark-only."""

from __future__ import annotations

import torch

from ssilbench.runner.telemetry import RunTelemetry


def test_train_loss_call(benchmark):
    telemetry = RunTelemetry("r", 10**9, lambda event: None)
    loss = torch.tensor(0.5)
    step = iter(range(1, 10**9))

    def one() -> None:
        telemetry.train_loss("policy", next(step), loss)

    benchmark(one)


def test_stacked_train_loss_call(benchmark):
    telemetry = RunTelemetry("r", 10**9, lambda event: None)
    losses = torch.rand(64)
    step = iter(range(1, 10**9))

    def one() -> None:
        telemetry.train_loss("policy", next(step), losses, 3)

    benchmark(one)
