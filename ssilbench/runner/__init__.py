"""Sweeps: run specs, planning, execution and the results store."""
