"""Tests of ssilbench.data: the transition store, the split, batches, downloads."""
