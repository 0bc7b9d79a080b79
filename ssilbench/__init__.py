"""ssilbench: a plugin-based benchmark suite for semi-supervised imitation learning."""

__version__ = "0.3.0"
