"""Tests of ssilbench.runs: run settings and identity, the results store, export and merge."""
