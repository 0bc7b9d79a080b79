"""Tests of the ssilbench_procgen plugin."""
