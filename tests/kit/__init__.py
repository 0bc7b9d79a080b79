"""Tests of the toolkit plugins build on (ssilbench.kit)."""
