"""Tests of the ssilbench_uva plugin."""
