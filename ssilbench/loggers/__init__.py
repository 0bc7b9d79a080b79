"""Loggers: where a sweep sends each recorded run besides the results store (TensorBoard
event files, Weights & Biases, MLflow, or a plugin's own, registered with the hook
``ssilbench_register_loggers``). See :mod:`ssilbench.loggers.base`."""
