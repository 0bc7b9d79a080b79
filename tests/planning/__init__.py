"""Tests of ssilbench.planning: values, options, sweep files, resolve and prepare."""
