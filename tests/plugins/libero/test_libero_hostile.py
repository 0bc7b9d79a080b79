"""A hostile LIBERO HDF5 file reads nothing from outside itself and loads no filter plugin:
datasets stored through an unknown filter, in an external file, as a virtual dataset, behind
a link to another file, or as variable-length objects are refused from their metadata,
before any value is read."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ssilbench.testing import cli_exit_code

from .test_libero_data import FIRST, write_task_file

h5py = pytest.importorskip("h5py", reason="h5py is not installed: pip install 'ssilbench[libero]'")

KEY = "data/demo_0/actions"
ACTIONS = np.zeros((5, 7))


def _unknown_filter(handle, tmp: Path) -> str:
    handle.create_dataset(KEY, data=ACTIONS, chunks=True, compression=32001,
                          allow_unknown_filter=True)  # fmt: skip
    return f"'{KEY}' is stored with the HDF5 filter '' (id 32001), which ssilbench does not decode"


def _external_file(handle, tmp: Path) -> str:
    secret = tmp / "secret.bin"  # any file the reader can see, read as if it were actions
    secret.write_bytes(np.full((5, 7), 0.5).tobytes())
    handle.create_dataset(KEY, shape=(5, 7), dtype="f8",
                          external=[(str(secret), 0, secret.stat().st_size)])  # fmt: skip
    return f"'{KEY}' keeps its data in another file ('{secret}', HDF5 external storage)"


def _virtual_dataset(handle, tmp: Path) -> str:
    other = tmp / "other.h5"
    with h5py.File(other, "w") as source:
        source["x"] = ACTIONS
    layout = h5py.VirtualLayout(shape=ACTIONS.shape, dtype="f8")
    layout[:] = h5py.VirtualSource(str(other), "x", shape=ACTIONS.shape)
    handle.create_virtual_dataset(KEY, layout)
    return f"'{KEY}' is a virtual dataset, its data mapped from other files"


def _external_link(handle, tmp: Path) -> str:
    other = tmp / "other.h5"
    with h5py.File(other, "w") as source:
        source["x"] = ACTIONS
    handle[KEY] = h5py.ExternalLink(str(other), "x")
    return f"'{KEY}' is a link to another file ('{other}')"


def _objects(handle, tmp: Path) -> str:
    handle.create_dataset(KEY, data=np.array(["0"] * 5, dtype=object),
                          dtype=h5py.string_dtype())  # fmt: skip
    return f"'{KEY}' holds variable-length objects (object)"


HOSTILE = {
    "unknown filter": _unknown_filter,
    "external storage": _external_file,
    "virtual dataset": _virtual_dataset,
    "external link": _external_link,
    "variable-length objects": _objects,
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_dataset_stored_elsewhere_or_through_a_plugin_is_refused(case, tmp_path, capsys):
    source = tmp_path / "libero_10"
    write_task_file(source, FIRST)
    path = source / FIRST.demo_file
    with h5py.File(path, "r+") as handle:
        del handle[KEY]
        expected = HOSTILE[case](handle, tmp_path)
    data = tmp_path / "data"
    code = cli_exit_code("data", "import", "libero10", "--from", str(source), "--tasks",
                         FIRST.id, "--data-root", str(data))  # fmt: skip
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2, error
    assert str(path) in error and expected in error, error
    assert "ssilbench data download libero10" in error
    assert not (data / "libero10").exists() or not any((data / "libero10").rglob("*"))
