"""Tests of the built-in plugins, one package per plugin (each may import its own plugin, the
public API and ``ssilbench.testing``; ``tests/contract/test_plugin_boundaries.py`` checks it)."""
