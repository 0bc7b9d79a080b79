"""Deprecated: API 1.0's ``ssilbench.data.store``, renamed ``ssilbench.data.datasets`` (the
store) and ``ssilbench.data.dataset_writer`` (its block-by-block writer) in API 1.1.

Importing it warns (DeprecationWarning) and gives the names it held; plugins import
``TransitionStore`` from :mod:`ssilbench.api`, and ``TransitionStoreWriter``,
``sha256_file`` from :mod:`ssilbench.kit`. It goes in API 2.0.
"""

from __future__ import annotations

from ssilbench.data.dataset_writer import AppendedArray, TransitionStoreWriter, partial_path
from ssilbench.data.datasets import (
    ARRAYS,
    FORMAT,
    FORMAT_VERSION,
    STAMPS,
    DatasetNotBuilt,
    TransitionStore,
    read_only,
    sha256_file,
)
from ssilbench.deprecation import deprecated_module

deprecated_module(
    "the module ssilbench.data.store",
    "import TransitionStore from ssilbench.api, and TransitionStoreWriter and sha256_file "
    "from ssilbench.kit",
    "1.1",
)

__all__ = [
    "ARRAYS",
    "FORMAT",
    "FORMAT_VERSION",
    "STAMPS",
    "AppendedArray",
    "DatasetNotBuilt",
    "TransitionStore",
    "TransitionStoreWriter",
    "partial_path",
    "read_only",
    "sha256_file",
]
