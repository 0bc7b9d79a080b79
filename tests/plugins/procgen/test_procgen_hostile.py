"""A hostile Procgen chunk runs no code: an array of pickled Python objects under a key the
importer reads is refused from the chunk's headers, and chunks are only ever loaded with
``allow_pickle=False``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ssilbench.testing import cli_exit_code

from .test_procgen_data import GAME, TEST_DONE, TEST_SIZES, TRAIN_DONE, TRAIN_SIZES, write_split


class Payload:
    """Unpickling it creates the file ``marker``: what any code in the data could do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


@pytest.mark.parametrize("key", ["ta", "rewards", "obs"])
def test_a_chunk_of_pickled_objects_is_refused_and_runs_nothing(key, tmp_path, capsys):
    source = tmp_path / "lapo"
    write_split(source / GAME / "train", TRAIN_SIZES, TRAIN_DONE, seed=1)
    write_split(source / GAME / "test", TEST_SIZES, TEST_DONE, seed=2)
    chunk = source / GAME / "train" / "1.npz"
    marker = tmp_path / "payload-ran"
    with np.load(chunk) as data:
        arrays = {k: data[k] for k in data.files}
    hostile = np.empty(len(arrays["done"]), dtype=object)
    hostile[:] = [Payload(marker)] * len(hostile)
    arrays[key] = hostile
    np.savez(chunk, **arrays)  # np.savez pickles object arrays
    with np.load(chunk, allow_pickle=True) as data:  # the payload is live: loaded, it runs
        data[key]
    assert marker.exists()
    marker.unlink()
    data_root = tmp_path / "data"
    code = cli_exit_code("data", "import", "procgen", "--from", str(source), "--data-root",
                         str(data_root))  # fmt: skip
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2, error
    assert f"Chunk {chunk}: '{key}' holds pickled Python objects (object)" in error
    assert "which ssilbench never loads" in error
    assert not marker.exists()
    assert not (data_root / "procgen").exists() or not any((data_root / "procgen").rglob("*.npy"))
