"""Arrays computed once from a trained stage: an IDM's labels of D_U, LAPO's latents.

Labelling 2.6M transitions with an IMPALA IDM costs about a tenth of a 60k-step stage, and
every run that uses the same IDM on the same data would do it again. The result is a
function of the network's trained weights and of the rows it reads, so it is kept beside
the stage cache under the hash of both, written once (under the key's lease, so that
concurrent workers do not label twice) and read back by every later run: into the device
when it is small, per minibatch when it is not (``ssilbench.data.batches.ArrayRows``).
"""

from __future__ import annotations

import itertools
import os
import tempfile
import time
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ssilbench.data.batches import (
    RESIDENT_BYTES,
    ArrayRows,
    RowSource,
    chunk_rows,
    chunks,
    row_bytes,
)
from ssilbench.data.dataset_writer import AppendedArray
from ssilbench.train.memo import ROWS_SUFFIX as SUFFIX
from ssilbench.train.memo import StageCache, touch


def artifact_path(cache: StageCache, key: str) -> Path:
    return cache.root / key[:2] / f"{key}{SUFFIX}"


def cached_rows(
    cache: StageCache | None,
    trainer: str,
    nets: list[nn.Module],
    inputs: RowSource,
    compute: Callable[[slice], torch.Tensor],
    settings: dict[str, Any],
    device: torch.device,
) -> ArrayRows:
    """``compute(rows)`` over every row of ``inputs`` (in chunks), as rows on ``device``:
    read from the cache when an identical computation was kept, else computed and kept."""
    if cache is None:
        return _uncached(trainer, inputs, compute, device)
    key = cache.key(trainer, nn.ModuleList(nets), [inputs], settings, device)
    path = artifact_path(cache, key)
    array = _load(path)  # the common case (kept by an earlier run) takes no lease
    if array is None:
        with cache.lease(key, on_wait=cache.waiting(f"{len(inputs):,} rows")):
            array = _load(path)  # another process may have written it while we waited
            if array is None:
                cache.say("labelling", f"{len(inputs):,} rows")
                _write(path, _blocks(inputs, compute))
                cache.describe(key, {"stage": f"{trainer} of {len(inputs)} rows",
                                     "saved": time.time()})  # fmt: skip
                array = _load(path)
    touch(path)
    return ArrayRows(array, device, key)


def _load(path: Path) -> np.ndarray | None:
    """The kept rows, memory-mapped; None when there are none (or they are damaged)."""
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError):
        return None


def _blocks(inputs: RowSource, compute: Callable[[slice], torch.Tensor]) -> Iterator[np.ndarray]:
    with torch.no_grad():
        for rows in chunks(len(inputs), chunk_rows(row_bytes(inputs))):
            yield compute(rows).detach().cpu().numpy()


def _write(path: Path, blocks: Iterable[np.ndarray]) -> None:
    """Block by block into a hidden file beside ``path``, then renamed into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    out: AppendedArray | None = None
    try:
        for block in blocks:
            if out is None:
                out = AppendedArray(tmp, block.shape[1:], block.dtype)
            out.append(block)
        out.finish()
        os.replace(tmp, path)
    except BaseException:
        if out is not None:
            out.abort()
        tmp.unlink(missing_ok=True)
        raise


def _uncached(
    trainer: str, inputs: RowSource, compute: Callable[[slice], torch.Tensor], device
) -> ArrayRows:
    """Without a cache: in memory when small, else in a temporary file removed with the
    rows that read it."""
    fingerprint = f"{trainer}:uncached:{uuid.uuid4()}"  # never a cache key: no cache here
    blocks = _blocks(inputs, compute)
    first = next(blocks)
    if first.nbytes // max(len(first), 1) * len(inputs) <= RESIDENT_BYTES:
        return ArrayRows(np.concatenate([first, *blocks]), device, fingerprint)
    fd, name = tempfile.mkstemp(prefix="ssilbench-", suffix=SUFFIX)
    os.close(fd)
    path = Path(name)
    try:
        _write(path, itertools.chain([first], blocks))
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    rows = ArrayRows(np.load(path, mmap_mode="r", allow_pickle=False), device, fingerprint)
    weakref.finalize(rows, path.unlink, missing_ok=True)
    return rows
