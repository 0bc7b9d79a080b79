"""A hostile replay zarr runs no code: arrays whose metadata names a codec that is not a pure
decompressor (numcodecs' pickle filter above all) or a non-numeric dtype are refused from
the metadata, before zarr reads a chunk, whatever zarr and numcodecs are installed."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from ssilbench.testing import cli_exit_code

pytest.importorskip("zarr", reason="zarr is not installed: pip install 'ssilbench[pusht]'")


class Payload:
    """Unpickling it creates the file ``marker``: what any code in the data could do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


@pytest.fixture
def replay(tmp_path: Path) -> Path:
    from ssilbench_pusht.replay import ReplayEpisode, write_replay_zarr

    rng = np.random.default_rng(0)
    n = 10
    episode = ReplayEpisode(
        img=rng.integers(0, 256, (n, 96, 96, 3)).astype(np.float32),
        state=rng.uniform(100, 400, (n, 5)).astype(np.float32),
        keypoint=rng.uniform(0, 512, (n, 9, 2)).astype(np.float32),
        action=rng.uniform(0, 512, (n, 2)).astype(np.float32),
        n_contacts=np.zeros((n, 1), np.float32),
        max_coverage=0.0,
    )
    path = tmp_path / "evil.zarr"
    write_replay_zarr(path, [episode], chunk_frames=10)
    return path


def _poison(array: Path, marker: Path, **meta) -> None:
    """Rewrite ``array``'s metadata with ``meta`` and its one chunk with a pickle payload."""
    zarray = json.loads((array / ".zarray").read_text())
    zarray.update(meta)
    (array / ".zarray").write_text(json.dumps(zarray))
    chunk = ".".join("0" * len(zarray["shape"]))
    (array / chunk).write_bytes(pickle.dumps(Payload(marker)))


def _pickle_object_dtype(path: Path, marker: Path) -> str:
    _poison(path / "data" / "action", marker, dtype="|O", compressor=None,
            filters=[{"id": "pickle", "protocol": 5}])  # fmt: skip
    return "the array 'data/action' declares the dtype '|O' (not a plain number)"


def _pickle_filter_on_floats(path: Path, marker: Path) -> str:
    # A numeric dtype does not make a file safe: zarr runs every filter it lists.
    _poison(path / "data" / "state", marker, compressor=None,
            filters=[{"id": "pickle", "protocol": 5}])  # fmt: skip
    return "the array 'data/state' declares the filter 'pickle'"


def _pickle_in_consolidated_metadata(path: Path, marker: Path) -> str:
    # zarr 3 reads consolidated metadata in preference to each array's own .zarray.
    _poison(path / "meta" / "episode_ends", marker)  # the chunk only; .zarray stays clean
    zarray = json.loads((path / "meta" / "episode_ends" / ".zarray").read_text())
    zarray.update(compressor=None, filters=[{"id": "pickle", "protocol": 5}])
    (path / ".zmetadata").write_text(json.dumps({
        "zarr_consolidated_format": 1,
        "metadata": {".zgroup": {"zarr_format": 2}, "meta/episode_ends/.zarray": zarray},
    }))  # fmt: skip
    return "the array 'meta/episode_ends' declares the filter 'pickle'"


def _v3_pickle_codec(path: Path, marker: Path) -> str:
    (path / "data" / "n_contacts" / "zarr.json").write_text(json.dumps({
        "zarr_format": 3, "node_type": "array", "shape": [10, 1], "data_type": "float32",
        "codecs": [{"name": "numcodecs.pickle", "configuration": {"protocol": 5}}],
    }))  # fmt: skip
    return "the array 'data/n_contacts' declares the codec 'numcodecs.pickle'"


def _pickle_behind_a_linked_folder(path: Path, marker: Path) -> str:
    # zarr follows a linked folder; so does the check.
    outside = path.parent / "elsewhere"
    (path / "data" / "action").rename(outside)
    (path / "data" / "action").symlink_to(outside, target_is_directory=True)
    _poison(outside, marker, compressor=None, filters=[{"id": "pickle", "protocol": 5}])
    return "the array 'data/action' declares the filter 'pickle'"


def _unknown_compressor(path: Path, marker: Path) -> str:
    zarray = json.loads((path / "data" / "img" / ".zarray").read_text())
    zarray["compressor"] = {"id": "imagecodecs_jpegxl"}
    (path / "data" / "img" / ".zarray").write_text(json.dumps(zarray))
    return "the array 'data/img' declares the compressor 'imagecodecs_jpegxl'"


HOSTILE = {
    "pickle, object dtype": _pickle_object_dtype,
    "pickle filter on float32": _pickle_filter_on_floats,
    "pickle in consolidated metadata": _pickle_in_consolidated_metadata,
    "pickle codec in a v3 zarr.json": _v3_pickle_codec,
    "pickle behind a linked folder": _pickle_behind_a_linked_folder,
    "unknown compressor": _unknown_compressor,
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_zarr_with_a_code_running_codec_is_refused_before_any_chunk_is_read(
    case, replay, tmp_path, capsys
):
    marker = tmp_path / "payload-ran"
    expected = HOSTILE[case](replay, marker)
    payload = pickle.dumps(Payload(marker))
    for chunk in replay.rglob("*"):  # each payload is live: unpickled, it runs
        if chunk.is_file() and chunk.read_bytes() == payload:
            pickle.loads(payload)
            assert marker.exists()
            marker.unlink()
    data = tmp_path / "data"
    code = cli_exit_code("data", "import", "pusht", "--from", str(replay), "--data-root", str(data))
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2, error
    assert expected in error and str(replay) in error
    assert "runs code stored in the file. Nothing was read from its chunks" in error
    assert not marker.exists()
    assert not (data / "pusht").exists()


def test_the_written_replay_passes_the_check(replay):
    from ssilbench_pusht.zarr_codecs import check_codecs

    check_codecs(replay)  # blosc-compressed numbers: what the writer and the publisher use
