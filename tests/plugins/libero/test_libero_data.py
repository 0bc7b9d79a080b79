"""LIBERO-10 data: importing the LIBERO team's HDF5 demonstrations into stores.

The tests write small files in the exact published layout (a few demonstrations of a few
steps each). Every bad input goes through the CLI in a subprocess: exit code 2, one message
naming the file and the key, and no store left behind that looks complete.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ssilbench.api import DatasetError, UsageError
from ssilbench.testing import check_dataset, partial_path, usage_error
from ssilbench_libero import demo
from ssilbench_libero.environment import Libero10Environment, Libero10Options, dataset_dir
from ssilbench_libero.tasks import BY_ID, TASKS

h5py = pytest.importorskip("h5py", reason="h5py is not installed: pip install 'ssilbench[libero]'")

FIRST, SECOND = TASKS[0], TASKS[1]
# Demonstration names and lengths; demo_10 must come after demo_2 (numeric order).
DEMOS = {"demo_0": 5, "demo_2": 3, "demo_10": 4}


def write_task_file(folder: Path, task=FIRST, demos=DEMOS, seed: int = 0, compress=False,
                    language: str | None = None) -> dict[str, dict[str, np.ndarray]]:  # fmt: skip
    """``<bddl>_demo.hdf5`` in LIBERO's layout (the plugin's writer) with random contents of
    the right shapes; returns what it wrote, demo by demo."""
    rng = np.random.Generator(np.random.PCG64(seed))
    written = {}
    for name, length in demos.items():
        written[name] = {
            "obs/agentview_rgb": rng.integers(0, 256, (length, 128, 128, 3), dtype=np.uint8),
            "obs/eye_in_hand_rgb": rng.integers(0, 256, (length, 128, 128, 3), dtype=np.uint8),
            "obs/gripper_states": rng.normal(size=(length, 2)),
            "obs/joint_states": rng.normal(size=(length, 7)),
            "obs/ee_states": rng.normal(size=(length, 6)),
            "actions": np.clip(rng.normal(size=(length, 7)), -1, 1),
            "states": rng.normal(size=(length, 47)),
            "rewards": np.eye(1, length, length - 1, dtype=np.uint8)[0],
            "dones": np.eye(1, length, length - 1, dtype=np.uint8)[0],
        }
    demo.write_task_file(folder, task, written, language=language, compress=compress)
    return written


@pytest.fixture
def source(tmp_path: Path) -> Path:
    src = tmp_path / "download" / "libero_10"
    write_task_file(src, FIRST, seed=1)
    write_task_file(src, SECOND, demos={"demo_0": 2, "demo_1": 6}, seed=2)
    return tmp_path / "download"  # the importer also looks in libero_10/


def _import(source: Path, root: Path, tasks: list[str], replace=False, **options):
    lines: list[str] = []
    stores = Libero10Environment().import_dataset(
        source, root, tasks, Libero10Options(**options), replace=replace, log=lines.append
    )
    return stores, lines


def test_import_streams_demonstrations_into_one_store_per_task(source, tmp_path):
    root = tmp_path / "data"
    written = write_task_file(source / "libero_10", FIRST, seed=1)
    stores, lines = _import(source, root, [FIRST.id, SECOND.id])
    assert [s.root for s in stores] == [dataset_dir(root, "demos", t.id) for t in (FIRST, SECOND)]
    store = stores[0]
    # One episode per demonstration, in numeric order: demo_0, demo_2, demo_10.
    assert store.episode_ends.tolist() == [5, 8, 12]
    assert store.obs.shape == (12, 128, 128, 3) and store.obs.dtype == np.uint8
    assert store.actions.shape == (12, 7) and store.actions.dtype == np.float32
    assert sorted(store.extras) == ["proprio", "wrist"]
    assert store.extras["wrist"].shape == (12, 128, 128, 3)
    assert store.extras["proprio"].shape == (12, 9) and store.extras["proprio"].dtype == np.float32
    order = ["demo_0", "demo_2", "demo_10"]
    cat = {key: np.concatenate([written[d][key] for d in order]) for key in written["demo_0"]}
    # Images upright: rows reversed, as the simulator's observations.
    np.testing.assert_array_equal(store.obs, cat["obs/agentview_rgb"][:, ::-1])
    np.testing.assert_array_equal(store.extras["wrist"], cat["obs/eye_in_hand_rgb"][:, ::-1])
    np.testing.assert_allclose(
        store.extras["proprio"],
        np.concatenate([cat["obs/gripper_states"], cat["obs/joint_states"]], axis=1),
        rtol=1e-6,
    )
    np.testing.assert_allclose(store.actions, cat["actions"], rtol=1e-6)
    np.testing.assert_array_equal(store.rewards, cat["rewards"].astype(np.float32))
    meta = store.manifest["metadata"]
    assert meta["language_instruction"] == FIRST.language and meta["demonstrations"] == 3
    assert meta["demo_success_rate"] == 1.0 and meta["bddl"] == FIRST.bddl
    assert store.manifest["producer"]["demos"] == order
    assert stores[1].episode_ends.tolist() == [2, 8]
    assert any("3 demonstrations, 12 frames" in line for line in lines)
    # The core's dataset checks: shapes, dtypes, action bounds, extras, reopening.
    check_dataset(Libero10Environment().load(FIRST.id, Libero10Options()), root)


def test_reimport_skips_and_replace_rebuilds(source, tmp_path):
    root = tmp_path / "data"
    _import(source, root, [FIRST.id])
    first = dataset_dir(root, "demos", FIRST.id)
    stores, lines = _import(source, root, [FIRST.id])
    assert stores == [] and any("already imported" in line for line in lines)
    write_task_file(source / "libero_10", FIRST, demos={"demo_0": 7}, seed=5)
    stores, _ = _import(source, root, [FIRST.id], replace=True)
    assert stores[0].root == first and stores[0].num_frames == 7
    # Another dataset name is another folder.
    stores, _ = _import(source, root, [FIRST.id], dataset="again")
    assert stores[0].root == dataset_dir(root, "again", FIRST.id)


def test_missing_dataset_says_how_to_import(tmp_path):
    task = Libero10Environment().load(FIRST.id, Libero10Options())
    with pytest.raises(DatasetError, match="ssilbench data import libero10 --from DIR --tasks "
                                           f"{FIRST.id}"):  # fmt: skip
        task.dataset(tmp_path)
    with pytest.raises(UsageError, match="no such folder"):
        _import(tmp_path / "nowhere", tmp_path / "data", [FIRST.id])


def test_every_task_is_expected_unless_tasks_are_named(source, tmp_path):
    with pytest.raises(DatasetError) as caught:
        _import(source, tmp_path / "data", [])
    message = str(caught.value)
    assert TASKS[2].demo_file in message and TASKS[9].demo_file in message
    assert FIRST.demo_file not in message and "--tasks" in message
    assert not (tmp_path / "data").exists()  # checked before anything was written


def test_corrupt_demonstration_found_while_copying_leaves_nothing(tmp_path, cli):
    # Headers read fine; a compressed chunk of the last demonstration's images is damaged,
    # so the failure comes after two demonstrations were already copied.
    src = tmp_path / "src"
    write_task_file(src, FIRST, compress=True)
    path = src / FIRST.demo_file
    with h5py.File(path, "r") as handle:
        info = handle["data/demo_10/obs/agentview_rgb"].id.get_chunk_info(0)
    data = bytearray(path.read_bytes())
    for offset in range(info.byte_offset + 16, info.byte_offset + info.size - 16, 97):
        data[offset] ^= 0xFF
    path.write_bytes(bytes(data))
    result = cli("data", "import", "libero10", "--from", str(src), "--tasks", FIRST.id,
                 "--data-root", str(cli.data))  # fmt: skip
    error = usage_error(result)
    assert str(path) in error
    assert "data/demo_10/obs/agentview_rgb" in error and "corrupt or truncated" in error
    target = dataset_dir(cli.data, "demos", FIRST.id)
    assert not target.exists() and not partial_path(target).exists()


def _edit(path: Path, change) -> None:
    with h5py.File(path, "r+") as handle:
        change(handle)


def _missing_key(path: Path) -> str:
    _edit(path, lambda h: h.__delitem__("data/demo_2/obs/joint_states"))
    return "key 'data/demo_2/obs/joint_states' is missing"


def _replace(path: Path, key: str, data: np.ndarray) -> None:
    """The dataset ``key`` of the file replaced by one holding ``data``."""
    group, name = key.rsplit("/", 1)

    def change(handle):
        del handle[key]
        handle[group].create_dataset(name, data=data)

    _edit(path, change)


def _lengths(path: Path) -> str:
    _replace(path, "data/demo_10/actions", np.zeros((3, 7)))
    return "'data/demo_10/actions' has 3 rows but data/demo_10/obs/agentview_rgb has 4"


def _image_size(path: Path) -> str:
    _replace(path, "data/demo_0/obs/eye_in_hand_rgb", np.zeros((5, 84, 84, 3), np.uint8))
    return "'data/demo_0/obs/eye_in_hand_rgb' holds uint8 images of shape (84, 84, 3)"


def _action_width(path: Path) -> str:
    _replace(path, "data/demo_0/actions", np.zeros((5, 4)))
    return "'data/demo_0/actions' has shape (5, 4); wrong action width, expected (T, 7)"


def _action_range(path: Path) -> str:
    def change(handle):
        actions = handle["data/demo_2/actions"][()]
        actions[1, 3] = 4.0
        handle["data/demo_2/actions"][...] = actions

    _edit(path, change)
    return "'data/demo_2/actions' reaches 4; LIBERO's actions lie in [-1, 1]"


def _no_problem_info(path: Path) -> str:
    _edit(path, lambda h: h["data"].attrs.__delitem__("problem_info"))
    return "attribute 'problem_info' of 'data' is missing"


def _other_task(path: Path) -> str:
    write_task_file(path.parent, FIRST, language=SECOND.language)
    return f"but libero10:{FIRST.id} is"


def _truncated(path: Path) -> str:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return "cannot be read as HDF5"


def _garbage(path: Path) -> str:
    path.write_bytes(b"this is not an HDF5 file\n" * 100)
    return "cannot be read as HDF5"


def _missing_file(path: Path) -> str:
    path.unlink()
    return f"--from {path.parent}: missing {FIRST.demo_file} (libero10:{FIRST.id})"


BAD_FILES = {
    "missing-file": _missing_file,
    "missing-key": _missing_key,
    "mismatched-lengths": _lengths,
    "wrong-image-size": _image_size,
    "wrong-action-width": _action_width,
    "action-range": _action_range,
    "no-problem-info": _no_problem_info,
    "other-task": _other_task,
    "truncated": _truncated,
    "not-hdf5": _garbage,
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_bad_files_exit_2_naming_file_and_key_and_leave_nothing(case, tmp_path, cli):
    src = tmp_path / "src"
    write_task_file(src, SECOND, demos={"demo_0": 3}, seed=3)  # a good file, checked first
    write_task_file(src, FIRST)
    path = src / FIRST.demo_file
    expected = BAD_FILES[case](path)
    result = cli("data", "import", "libero10", "--from", str(src), "--tasks",
                 f"{SECOND.id},{FIRST.id}", "--data-root", str(cli.data))  # fmt: skip
    error = usage_error(result)
    assert expected in error, error
    assert str(path if case != "missing-file" else path.name) in error
    # Every file is checked before anything is copied: not even the good task is written.
    folder = cli.data / "libero10"
    assert not folder.exists() or not any(folder.rglob("*")), list(folder.rglob("*"))


def test_unknown_task_exit_2_with_did_you_mean(source, cli):
    result = cli("data", "import", "libero10", "--from", str(source), "--tasks", "bowl-drawr")
    assert result.returncode == 2 and "Did you mean 'bowl-drawer'?" in result.stderr
    result = cli("data", "import", "libero10:bowl-drawer", "--from", str(source))
    assert result.returncode == 2 and "pick tasks with --games" in result.stderr


def test_cli_import_prints_the_stores(source, cli):
    result = cli("data", "import", "libero10", "--from", str(source), "--tasks",
                 FIRST.id, "--data-root", str(cli.data))  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"{dataset_dir(cli.data, 'demos', FIRST.id)}: 12 frames, 3 episodes, 9 transitions" in (
        result.stdout
    )
    assert BY_ID[FIRST.id] is FIRST
