"""Tests of the ssilbench_lapo plugin."""
