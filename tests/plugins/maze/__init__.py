"""Tests of the ssilbench_maze plugin."""
