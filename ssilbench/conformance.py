"""The error every conformance check raises (``ssilbench.testing``): what a plugin's own
tests catch, apart from the library's other errors."""

from __future__ import annotations


class ConformanceError(AssertionError):
    """A task or a method breaks its contract; the message says which part."""
