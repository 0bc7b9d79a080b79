"""Tests of the ssilbench_pusht plugin."""
