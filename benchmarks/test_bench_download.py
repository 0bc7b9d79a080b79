"""Cost of a checked download: streaming from 127.0.0.1, hashing the bytes on disk under the
file's lock, and checking then unpacking a zip archive.

Run with ``python -m pytest benchmarks/test_bench_download.py`` (not part of the default test
run). The file is 64 MB of random bytes (incompressible, as the published data mostly is);
the times scale linearly with size, so MB/s figures carry over to the 1-2 GB LIBERO files.
The numbers are printed and kept in the benchmark's ``extra_info``.
"""

from __future__ import annotations

import hashlib
import shutil
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from ssilbench.cli.download_progress import SilentReporter
from ssilbench.data import download as dl
from ssilbench.data.local_server import LocalServer

SIZE = 64 * 10**6


@pytest.fixture(scope="module")
def mirror(tmp_path_factory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("mirror")
    data = np.random.default_rng(0).integers(0, 256, SIZE, dtype=np.uint8).tobytes()
    (root / "blob.bin").write_bytes(data)
    with zipfile.ZipFile(root / "blob.zip", "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        zf.writestr("game/0.npz", data)
    return root, hashlib.sha256(data).hexdigest()


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
    root, digest = mirror
    m = _manifest("blob.bin", sha256=digest)

    def once():
        dest = tmp_path / "dest"
        shutil.rmtree(dest, ignore_errors=True)
        planned = dl.plan_downloads(m, m.files, dest, server.url)
        dl.download_all(m, planned, dest, SilentReporter())

    with LocalServer(root) as server:
        benchmark.pedantic(once, rounds=3, iterations=1)
    start = time.perf_counter()
    dl.sha256_of(tmp_path / "dest" / "blob.bin")
    hashing = time.perf_counter() - start
    total = benchmark.stats.stats.mean
    rate, hash_rate = SIZE / 1e6 / total, SIZE / 1e6 / hashing
    print(f"\n64 MB: download + check {total:.2f} s ({rate:.0f} MB/s), of which hashing the "
          f"file on disk {hashing:.2f} s ({hash_rate:.0f} MB/s)")  # fmt: skip
    benchmark.extra_info.update(mb_per_s=rate, hash_mb_per_s=hash_rate)


def test_check_and_unpack_an_archive(benchmark, mirror, tmp_path):
    root, _ = mirror
    archive = tmp_path / "blob.zip"
    shutil.copy(root / "blob.zip", archive)

    def once():
        dest = tmp_path / "dest"
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir()
        dl.unpack_zip(archive, dest, "0" * 64)

    benchmark.pedantic(once, rounds=3, iterations=1)
    mean = benchmark.stats.stats.mean
    benchmark.extra_info.update(unpack_mb_per_s=SIZE / 1e6 / mean)
    print(f"\n64 MB archive: checked and unpacked in {mean:.2f} s ({SIZE / 1e6 / mean:.0f} MB/s)")
