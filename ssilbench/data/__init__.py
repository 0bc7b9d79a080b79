"""Datasets: the transition store, the SSIL split and conversion to model inputs."""
