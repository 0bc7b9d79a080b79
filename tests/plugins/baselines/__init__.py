"""Tests of the ssilbench_baselines plugin."""
