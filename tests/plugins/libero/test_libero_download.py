"""``ssilbench data download libero10``: the LIBERO-10 HDF5 files (written in the published
layout) served by a local HTTP server under their Hugging Face paths. The shipped manifest
pins each file's sha256, so the small test files are refused with it; pinned to their own
hashes (``--sha256``) they are downloaded and imported."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from ssilbench.api import TransitionStore
from ssilbench.testing import LocalServer, usage_error
from ssilbench_libero.environment import dataset_dir
from ssilbench_libero.tasks import TASKS

from .test_libero_data import write_task_file

pytest.importorskip("h5py", reason="h5py is not installed: pip install 'ssilbench[libero]'")

CHOSEN = TASKS[:2]


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture
def mirror(tmp_path: Path) -> Path:
    served = tmp_path / "mirror"
    for seed, task in enumerate(CHOSEN):
        write_task_file(served / "libero_10", task, {"demo_0": 3, "demo_1": 4}, seed)
    return served


def _download(cli, server, *args):
    return cli("data", "download", "libero10", "--tasks", ",".join(t.id for t in CHOSEN),
               "--from-url", server.url, "--data-root", str(cli.data), *args)  # fmt: skip


def test_the_shipped_hashes_are_checked(cli, mirror):
    with LocalServer(mirror) as server:
        result = _download(cli, server)
        assert len(server.gets(f"libero_10/{CHOSEN[0].demo_file}")) == 1
    error = usage_error(result)
    assert f"libero_10/{CHOSEN[0].demo_file} is corrupted or not the published file" in error
    assert "(from the libero10 manifest)" in error
    assert "2 file(s) to download, 2.8 GB" in result.stdout  # the published sizes
    assert not (cli.data / "libero10").exists()


def test_pinned_files_download_and_import(cli, mirror):
    pins = []
    for task in CHOSEN:
        name = f"libero_10/{task.demo_file}"
        pins += ["--sha256", f"{name}={hashlib.sha256((mirror / name).read_bytes()).hexdigest()}"]
    with LocalServer(mirror, drop_after={f"libero_10/{CHOSEN[1].demo_file}": 4096}) as server:
        result = _download(cli, server, *pins)
        ranges = [g.range for g in server.gets(f"libero_10/{CHOSEN[1].demo_file}")]
    assert result.returncode == 0, result.stderr
    assert ranges == [None, "bytes=4096-"]
    for task in CHOSEN:
        store = TransitionStore.open(dataset_dir(cli.data, "demos", task.id), verify=True)
        assert store.num_episodes == 2
