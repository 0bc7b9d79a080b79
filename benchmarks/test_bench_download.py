"""Cost of a checked download: streaming from 127.0.0.1, hashing the bytes on disk under the
file's lock, and checking then unpacking a zip archive.

Run with ``python -m pytest benchmarks/test_bench_download.py`` (not part of the default test
run). The files are 8 MB and 64 MB of random bytes (incompressible, as the published data
mostly is): 8x apart, so that the printed ratios show how time and the process's peak
memory grow with size (time linearly, memory not at all: the file is streamed in 1 MB
blocks), which is what carries the figures over to the 1-2 GB LIBERO files. The numbers
are printed and kept in the benchmark's ``extra_info``.
"""

from __future__ import annotations

import hashlib
import shutil
import time
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest

from ssilbench.cli.download_progress import SilentReporter
from ssilbench.data import download as dl
from ssilbench.data.local_server import LocalServer

SIZES = (8 * 10**6, 64 * 10**6)


@pytest.fixture(scope="module", params=SIZES, ids=["8MB", "64MB"])
def mirror(request, tmp_path_factory) -> tuple[Path, str, int]:
    size = request.param
    root = tmp_path_factory.mktemp("mirror")
    data = np.random.default_rng(0).integers(0, 256, size, dtype=np.uint8).tobytes()
    (root / "blob.bin").write_bytes(data)
    with zipfile.ZipFile(root / "blob.zip", "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        zf.writestr("game/0.npz", data)
    return root, hashlib.sha256(data).hexdigest(), size


def traced_peak_mb(work) -> float:
    """The most memory Python allocated at once while ``work()`` ran (tracemalloc)."""
    tracemalloc.start()
    try:
        work()
        return tracemalloc.get_traced_memory()[1] / 1e6
    finally:
        tracemalloc.stop()


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


def _manifest(name: str, **entry) -> dl.Manifest:
    return dl.Manifest.model_validate({
        "format": "ssilbench.downloads", "version": 1, "family": "bench", "title": "bench",
        "files": [{"name": name, "url": f"https://example.org/{name}", **entry}],
    })  # fmt: skip


def test_download_and_hash_on_disk(benchmark, mirror, tmp_path):
    root, digest, size = mirror
    m = _manifest("blob.bin", sha256=digest)

    def once():
        dest = tmp_path / "dest"
        shutil.rmtree(dest, ignore_errors=True)
        planned = dl.plan_downloads(m, m.files, dest, server.url)
        dl.download_all(m, planned, dest, SilentReporter())

    with LocalServer(root) as server:
        benchmark.pedantic(once, rounds=3, iterations=1)
        peak = traced_peak_mb(once)
    start = time.perf_counter()
    dl.sha256_of(tmp_path / "dest" / "blob.bin")
    hashing = time.perf_counter() - start
    total = benchmark.stats.stats.mean
    rate, hash_rate = size / 1e6 / total, size / 1e6 / hashing
    print(f"\n{size / 1e6:.0f} MB: download + check {total:.2f} s ({rate:.0f} MB/s), of which "
          f"hashing the file on disk {hashing:.2f} s ({hash_rate:.0f} MB/s); at most "
          f"{peak:.1f} MB allocated at once")  # fmt: skip
    benchmark.extra_info.update(mb=size / 1e6, mb_per_s=rate, hash_mb_per_s=hash_rate,
                                peak_allocated_mb=peak)  # fmt: skip


def test_check_and_unpack_an_archive(benchmark, mirror, tmp_path):
    root, _, size = mirror
    archive = tmp_path / "blob.zip"
    shutil.copy(root / "blob.zip", archive)

    def once():
        dest = tmp_path / "dest"
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir()
        dl.unpack_zip(archive, dest, "0" * 64)

    benchmark.pedantic(once, rounds=3, iterations=1)
    mean = benchmark.stats.stats.mean
    benchmark.extra_info.update(mb=size / 1e6, unpack_mb_per_s=size / 1e6 / mean)
    print(
        f"\n{size / 1e6:.0f} MB archive: checked and unpacked in {mean:.2f} s "
        f"({size / 1e6 / mean:.0f} MB/s)"
    )
