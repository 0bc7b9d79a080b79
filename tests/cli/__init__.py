"""Tests of the ssilbench command: messages, exit codes, outputs."""
