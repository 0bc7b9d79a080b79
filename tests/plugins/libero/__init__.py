"""Tests of the ssilbench_libero plugin."""
