"""Tests of ssilbench.train: step budgets, the loops, stacked training, the stage cache."""
