"""Tests of ssilbench.runner: executing sweeps, workers, executors, progress, estimates."""
