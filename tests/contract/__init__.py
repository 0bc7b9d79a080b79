"""Tests of the plugin contract: loading plugins, registries, conformance, compatibility."""
