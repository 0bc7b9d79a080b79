"""Tests of the on-disk TransitionStore: round trip, manifest, verification, atomic writes."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

import ssilbench.data.datasets as store_module
from ssilbench.data.datasets import ARRAYS, FORMAT, FORMAT_VERSION, TransitionStore, sha256_file
from ssilbench.errors import DatasetError

ENDS = np.array([4, 9, 12], dtype=np.int64)  # episodes of 4, 5 and 3 frames
N = int(ENDS[-1])


def arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "obs": rng.integers(0, 256, size=(N, 3, 4, 5), dtype=np.uint8),
        "actions": rng.integers(0, 4, size=N).astype(np.int64),
        "rewards": rng.random(N).astype(np.float32),
        "episode_ends": ENDS.copy(),
    }


def write(root: Path, **overrides) -> TransitionStore:
    data = {**arrays(), **overrides}
    return TransitionStore.write(
        root,
        data["obs"],
        data["actions"],
        data["rewards"],
        data["episode_ends"],
        producer={"plugin": "test", "seed": 0},
        metadata={"note": "hello"},
    )


def leftovers(parent: Path, root: Path) -> list[Path]:
    """Everything in ``parent`` other than the store folder itself."""
    return [p for p in parent.iterdir() if p != root]


def test_round_trip(tmp_path):
    root = tmp_path / "store"
    written = write(root)
    data = arrays()
    for store in (written, TransitionStore.open(root)):
        assert store.root == root
        for key in ARRAYS:
            array = getattr(store, key)
            assert isinstance(array, np.memmap)
            assert array.shape == data[key].shape
            assert array.dtype == data[key].dtype
            assert np.array_equal(np.asarray(array), data[key])
        assert store.num_frames == 12
        assert store.num_episodes == 3
        assert store.num_transitions == 9
        assert np.array_equal(store.transition_indices(), [0, 1, 2, 4, 5, 6, 7, 9, 10])


def test_rewards_are_stored_as_float32(tmp_path):
    store = write(tmp_path / "store", rewards=np.arange(N, dtype=np.float64))
    assert store.rewards.dtype == np.float32
    assert np.array_equal(store.rewards, np.arange(N))


def test_arrays_are_read_only(tmp_path):
    store = TransitionStore.open(write(tmp_path / "store").root)
    for key in ARRAYS:
        array = getattr(store, key)
        assert not array.flags.writeable
        with pytest.raises(ValueError):
            array[0] = 0


def test_manifest_contents(tmp_path):
    root = tmp_path / "store"
    store = write(root)
    manifest = json.loads((root / "manifest.json").read_text())
    assert manifest == store.manifest
    assert manifest["format"] == FORMAT == "ssilbench.transitions"
    assert manifest["format_version"] == FORMAT_VERSION == 1
    assert manifest["frames"] == 12
    assert manifest["episodes"] == 3
    assert manifest["transitions"] == 9
    assert manifest["obs_shape"] == [3, 4, 5]
    assert manifest["obs_dtype"] == "uint8"
    assert manifest["action_shape"] == []
    assert manifest["action_dtype"] == "int64"
    assert manifest["producer"] == {"plugin": "test", "seed": 0}
    assert manifest["metadata"] == {"note": "hello"}
    assert sorted(manifest["files"]) == sorted(f"{key}.npy" for key in ARRAYS)
    for name, info in manifest["files"].items():
        content = (root / name).read_bytes()
        assert info["sha256"] == hashlib.sha256(content).hexdigest() == sha256_file(root / name)
        assert info["bytes"] == len(content)


def flip_last_byte(path: Path) -> None:
    content = bytearray(path.read_bytes())
    content[-1] ^= 0xFF
    path.write_bytes(bytes(content))


@pytest.mark.parametrize("key", ARRAYS)
def test_verify_detects_a_flipped_byte(tmp_path, key):
    root = tmp_path / "store"
    write(root)
    TransitionStore.open(root, verify=True)  # intact: opens
    flip_last_byte(root / f"{key}.npy")
    with pytest.raises(DatasetError) as info:
        TransitionStore.open(root, verify=True)
    assert f"{key}.npy" in str(info.value)
    assert "does not match its manifest" in str(info.value)
    assert info.value.root == root


def test_without_verify_a_flipped_byte_is_not_checked(tmp_path):
    root = tmp_path / "store"
    write(root)
    flip_last_byte(root / "rewards.npy")
    store = TransitionStore.open(root, verify=False)
    assert store.num_frames == N


def test_verify_detects_a_size_change(tmp_path):
    root = tmp_path / "store"
    write(root)
    with open(root / "actions.npy", "ab") as fh:
        fh.write(b"\0")
    with pytest.raises(DatasetError, match="actions.npy"):
        TransitionStore.open(root)


def test_missing_manifest(tmp_path):
    root = tmp_path / "store"
    write(root)
    (root / "manifest.json").unlink()
    with pytest.raises(DatasetError, match="No dataset manifest") as info:
        TransitionStore.open(root)
    assert info.value.root == root


def test_missing_folder(tmp_path):
    root = tmp_path / "never_written"
    with pytest.raises(DatasetError, match="No dataset manifest") as info:
        TransitionStore.open(root)
    assert info.value.root == root


def test_malformed_json_manifest(tmp_path):
    root = tmp_path / "store"
    write(root)
    (root / "manifest.json").write_text('{"format": "ssilbench.transitions", ')
    with pytest.raises(DatasetError, match="not valid JSON") as info:
        TransitionStore.open(root)
    assert info.value.root == root


@pytest.mark.parametrize(
    "manifest", ["[]", '{"format": "ssilbench.transitions", "format_version": 1}']
)
def test_structurally_malformed_manifest(tmp_path, manifest):
    root = tmp_path / "store"
    write(root)
    (root / "manifest.json").write_text(manifest)
    with pytest.raises(DatasetError):
        TransitionStore.open(root)


@pytest.mark.parametrize(
    ("field", "value"),
    [("format_version", 2), ("format_version", "1"), ("format", "other.format")],
)
def test_wrong_format_or_version(tmp_path, field, value):
    root = tmp_path / "store"
    write(root)
    path = root / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest[field] = value
    path.write_text(json.dumps(manifest))
    with pytest.raises(DatasetError, match=f"not a {FORMAT} v{FORMAT_VERSION} manifest") as info:
        TransitionStore.open(root)
    assert info.value.root == root


@pytest.mark.parametrize("key", ARRAYS)
@pytest.mark.parametrize("verify", [True, False])
def test_missing_file(tmp_path, key, verify):
    root = tmp_path / "store"
    write(root)
    (root / f"{key}.npy").unlink()
    with pytest.raises(DatasetError, match=f"{key}.npy is missing") as info:
        TransitionStore.open(root, verify=verify)
    assert info.value.root == root


def test_file_missing_from_the_manifest(tmp_path):
    root = tmp_path / "store"
    write(root)
    path = root / "manifest.json"
    manifest = json.loads(path.read_text())
    del manifest["files"]["obs.npy"]
    path.write_text(json.dumps(manifest))
    with pytest.raises(DatasetError, match="obs.npy"):
        TransitionStore.open(root)


@pytest.mark.parametrize(
    "ends",
    [
        [],  # no episode
        [4, 9],  # does not end at len(obs)
        [4, 9, 13],  # ends beyond len(obs)
        [9, 4, 12],  # not increasing
        [1, 9, 12],  # first episode of one frame
        [4, 5, 12],  # a middle episode of one frame
        [4, 11, 12],  # last episode of one frame
    ],
)
def test_write_rejects_invalid_episode_ends(tmp_path, ends):
    root = tmp_path / "store"
    with pytest.raises(ValueError, match="episode"):
        write(root, episode_ends=np.array(ends, dtype=np.int64))
    assert list(tmp_path.iterdir()) == []


def test_write_rejects_arrays_of_different_lengths(tmp_path):
    with pytest.raises(ValueError, match="one entry per frame"):
        write(tmp_path / "store", actions=np.zeros(N - 1, dtype=np.int64))
    assert list(tmp_path.iterdir()) == []


def test_write_leaves_no_temporary_folder(tmp_path):
    root = tmp_path / "store"
    write(root)
    assert leftovers(tmp_path, root) == []
    assert sorted(p.name for p in root.iterdir()) == sorted(
        [f"{key}.npy" for key in ARRAYS] + ["manifest.json"]
    )


def test_rewrite_replaces_the_store(tmp_path):
    root = tmp_path / "store"
    write(root)
    (root / "stray.txt").write_text("old")
    store = write(root, actions=np.full(N, 3, dtype=np.int64))
    assert np.all(store.actions == 3)
    assert not (root / "stray.txt").exists()
    assert leftovers(tmp_path, root) == []
    TransitionStore.open(root, verify=True)


def _failing_sha256(monkeypatch, fail_on: int) -> None:
    real = store_module.sha256_file
    calls = []

    def sha256(path, *args, **kwargs):
        calls.append(path)
        if len(calls) == fail_on:
            raise OSError("disk full")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(store_module, "sha256_file", sha256)


def test_failed_write_leaves_nothing_behind(tmp_path, monkeypatch):
    root = tmp_path / "store"
    _failing_sha256(monkeypatch, fail_on=3)
    with pytest.raises(DatasetError, match="disk full"):
        write(root)
    assert list(tmp_path.iterdir()) == []


def test_failed_rewrite_keeps_the_old_store(tmp_path, monkeypatch):
    root = tmp_path / "store"
    write(root)
    _failing_sha256(monkeypatch, fail_on=2)
    with pytest.raises(DatasetError, match="disk full"):
        write(root, actions=np.full(N, 3, dtype=np.int64))
    monkeypatch.undo()
    assert leftovers(tmp_path, root) == []
    store = TransitionStore.open(root, verify=True)
    assert np.array_equal(store.actions, arrays()["actions"])


def test_verified_files_are_not_hashed_again_until_they_change(tmp_path, monkeypatch):
    import ssilbench.data.datasets as store_module

    root = tmp_path / "store"
    write(root)
    hashed = []
    real = store_module.sha256_file
    monkeypatch.setattr(store_module, "sha256_file", lambda p: hashed.append(p.name) or real(p))
    TransitionStore.open(root, verify=True)
    assert sorted(hashed) == sorted(f"{k}.npy" for k in ARRAYS)
    hashed.clear()
    TransitionStore.open(root, verify=True)
    assert hashed == []  # sizes and file-system times unchanged: nothing hashed
    # A same-size change with its modification time put back is still caught.
    path = root / "rewards.npy"
    before = path.stat()
    flip_last_byte(path)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    with pytest.raises(DatasetError, match="rewards.npy"):
        TransitionStore.open(root, verify=True)
    assert hashed == ["rewards.npy"]
