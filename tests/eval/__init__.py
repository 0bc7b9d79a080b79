"""Tests of ssilbench.eval: rollouts and evaluation."""
