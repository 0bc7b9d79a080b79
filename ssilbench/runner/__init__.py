"""Executing planned runs: scheduling them into units, launching them here or on a
cluster, training each in a worker, following their progress, and estimating their cost."""
