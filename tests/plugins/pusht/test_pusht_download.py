"""``ssilbench data download pusht``: diffusion policy's ``pusht.zip`` (a replay zarr in the
published layout under ``pusht/``) served by a local HTTP server, checked, unpacked and
imported as the dataset ``pusht:pusht`` runs read."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest

from ssilbench.api import TransitionStore
from ssilbench.testing import LocalServer, usage_error
from ssilbench_pusht.environment import dataset_dir

pytest.importorskip("zarr", reason="zarr is not installed: pip install 'ssilbench[pusht]'")

LENGTHS = (12, 9)


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


def episode(length: int, seed: int):
    from ssilbench_pusht.replay import ReplayEpisode

    rng = np.random.default_rng(seed)
    return ReplayEpisode(
        img=rng.integers(0, 256, (length, 96, 96, 3)).astype(np.float32),
        state=rng.uniform(100, 400, (length, 5)).astype(np.float32),
        keypoint=rng.uniform(0, 512, (length, 9, 2)).astype(np.float32),
        action=rng.uniform(0, 512, (length, 2)).astype(np.float32),
        n_contacts=np.zeros((length, 1), np.float32),
        max_coverage=0.0,
    )


@pytest.fixture
def mirror(tmp_path: Path) -> Path:
    """``pusht.zip`` as published: ``pusht/pusht_cchi_v7_replay.zarr/...``."""
    from ssilbench_pusht.replay import write_replay_zarr

    unpacked = tmp_path / "published"
    zarr_path = unpacked / "pusht" / "pusht_cchi_v7_replay.zarr"
    write_replay_zarr(zarr_path, [episode(n, i) for i, n in enumerate(LENGTHS)], chunk_frames=8)
    served = tmp_path / "mirror"
    served.mkdir()
    with zipfile.ZipFile(served / "pusht.zip", "w") as archive:
        for path in sorted(unpacked.rglob("*")):
            if path.is_file():
                archive.write(path, path.relative_to(unpacked).as_posix())
    return served


def test_download_unpacks_and_imports_the_replay(cli, mirror):
    with LocalServer(mirror, drop_after={"pusht.zip": 5000}) as server:
        result = cli("data", "download", "pusht", "--from-url", server.url,
                     "--data-root", str(cli.data), "--remove-downloads")  # fmt: skip
        assert [g.range for g in server.gets("pusht.zip")] == [None, "bytes=5000-"]
    assert result.returncode == 0, result.stderr
    store = TransitionStore.open(dataset_dir(cli.data, "demos"), verify=True)
    assert (store.num_frames, store.num_episodes) == (sum(LENGTHS), len(LENGTHS))
    np.testing.assert_array_equal(np.asarray(store.obs[:12]),
                                  episode(12, 0).img.astype(np.uint8))  # fmt: skip
    # --remove-downloads: the zip and the unpacked zarr are gone, the lock file stays.
    downloads = cli.data / "downloads" / "pusht"
    assert sorted(p.name for p in downloads.iterdir()) == ["downloads.lock.json"]


def test_a_truncated_zip_is_refused_and_nothing_imported(cli, mirror, tmp_path):
    # A mirror holding a damaged copy: the first-use hash is recorded from a good copy, so
    # the damaged one is refused (the publisher gives no hash).
    good = (mirror / "pusht.zip").read_bytes()
    with LocalServer(mirror) as server:
        first = cli("data", "download", "pusht", "--from-url", server.url, "--no-import",
                    "--data-root", str(cli.data))  # fmt: skip
        assert first.returncode == 0, first.stderr
        (cli.data / "downloads" / "pusht" / "pusht.zip").unlink()
        (mirror / "pusht.zip").write_bytes(good[: len(good) // 2])
        error = usage_error(cli("data", "download", "pusht", "--from-url", server.url,
                                "--data-root", str(cli.data)))  # fmt: skip
    assert "pusht.zip is corrupted or not the published file" in error
    assert "(from the lock file" in error
    assert not dataset_dir(cli.data, "demos").exists()
