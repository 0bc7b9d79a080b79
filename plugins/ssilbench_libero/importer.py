"""``ssilbench data import libero10``: the LIBERO-10 HDF5 demonstrations into TransitionStores.

The download holds one file per task, ``<bddl name>_demo.hdf5``, laid out as::

    data/                       attributes env_name, problem_info (JSON with
                                language_instruction), bddl_file_name, env_args
    data/demo_<i>/actions       (T, 7) float   delta position, delta axis-angle, gripper
    data/demo_<i>/rewards       (T,)           1 where the task is done
    data/demo_<i>/dones         (T,)
    data/demo_<i>/states        (T, S)         MuJoCo states (not imported)
    data/demo_<i>/obs/agentview_rgb    (T, 128, 128, 3) uint8
    data/demo_<i>/obs/eye_in_hand_rgb  (T, 128, 128, 3) uint8
    data/demo_<i>/obs/gripper_states   (T, 2)
    data/demo_<i>/obs/joint_states     (T, 7)
    data/demo_<i>/obs/ee_states        (T, 6)  (not imported)

Each task becomes one store ``<data-root>/libero10/<dataset>/<task>``: one episode per
demonstration (in demo number order), frames = the agent-view images, extras ``wrist``
(eye-in-hand images) and ``proprio`` (gripper_states then joint_states, float32), actions
float32 (T, 7). The images are stored upright, rows reversed, exactly as the simulator's
observations (the demonstrations were rendered by the same MuJoCo read-out, bottom row
first). A demonstration's last action has no next frame, so it is the store's filler.

Every file is checked before anything is copied (its HDF5 metadata and the actions' values);
demonstrations are then copied one at a time, so memory holds one demonstration whatever
the file's size.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ssilbench.api import DatasetError, PluginError
from ssilbench.kit import TransitionStore, TransitionStoreWriter
from ssilbench_libero.tasks import (
    ACTION_DIM,
    IMAGE_SHAPE,
    PROPRIO_DIM,
    PROPRIO_LAYOUT,
    SUITE,
    LiberoTask,
)

_DEMO = re.compile(r"^demo_(\d+)$")
# (key under data/demo_<i>, trailing shape or None for any, "image" / "number")
_KEYS: tuple[tuple[str, tuple[int, ...], str], ...] = (
    ("obs/agentview_rgb", IMAGE_SHAPE, "image"),
    ("obs/eye_in_hand_rgb", IMAGE_SHAPE, "image"),
    ("obs/gripper_states", (2,), "number"),
    ("obs/joint_states", (7,), "number"),
    ("actions", (ACTION_DIM,), "number"),
    ("rewards", (), "number"),
    ("dones", (), "number"),
)
# The MuJoCo states, read only to replay absolute actions (-o control=absolute): (T, S).
_STATES: tuple[str, tuple[Any, ...], str] = ("states", ("S",), "number")
# Actions outside [-1, 1] by at most this much are rounding and are clipped.
_ACTION_SLACK = 1e-3
# HDF5's own filters and h5py's lzf, compiled in: any other filter id makes HDF5 load a plugin
# library found on the machine to decode the data, which a file cannot be trusted to choose.
_FILTERS = {1: "deflate", 2: "shuffle", 3: "fletcher32", 4: "szip", 5: "nbit",
            6: "scaleoffset", 32000: "lzf"}  # fmt: skip
_USE_PUBLISHED = "Use LIBERO's published file (ssilbench data download libero10)."


def _h5py() -> Any:
    try:
        import h5py
    except ImportError:
        raise PluginError("Importing LIBERO data needs h5py: pip install 'ssilbench[libero]'."
                          ) from None  # fmt: skip
    return h5py


@dataclass(frozen=True)
class TaskFile:
    """A checked task file: its demonstrations (name, frames) in order and its attributes."""

    task: LiberoTask
    path: Path
    demos: tuple[tuple[str, int], ...]
    language: str
    attributes: dict[str, Any]

    @property
    def frames(self) -> int:
        return sum(length for _, length in self.demos)


def locate_files(source: Path, tasks: list[LiberoTask], every: bool) -> dict[str, Path]:
    """Each task's file in ``source`` or ``source/libero_10``; a DatasetError naming the
    missing ones."""
    found, missing = {}, []
    for task in tasks:
        for folder in (source, source / SUITE):
            if (folder / task.demo_file).is_file():
                found[task.id] = folder / task.demo_file
                break
        else:
            missing.append(task)
    if missing:
        names = ", ".join(f"{t.demo_file} (libero10:{t.id})" for t in missing)
        subset = (" To import only some tasks, name them with --tasks, e.g. --tasks "
                  f"{tasks[0].id}." if every else "")  # fmt: skip
        raise DatasetError(
            f"--from {source}: missing {names}. The LIBERO-10 download has one file per task, "
            f"<bddl name>_demo.hdf5, in the folder (or its {SUITE}/ sub-folder).{subset}",
            source,
        )
    return found


def _normalise(text: str) -> str:
    return " ".join(text.lower().replace("_", " ").split()).rstrip(".")


def inspect_task_file(path: Path, task: LiberoTask, states: bool = False) -> TaskFile:
    """Check a task file's layout from its metadata (no image is read); with ``states`` also
    each demonstration's MuJoCo states (absolute actions are replayed from them)."""
    h5py = _h5py()
    try:
        handle = h5py.File(path, "r")
    except OSError as exc:
        raise DatasetError(f"{path} cannot be read as HDF5 ({exc}): the file is corrupt or "
                           "truncated. Download it again.", path) from None  # fmt: skip
    with handle:
        data = handle.get("data")
        if not isinstance(data, h5py.Group):
            raise DatasetError(f"{path}: no group 'data'; a LIBERO demonstration file holds "
                               "data/demo_<i>/...", path)  # fmt: skip
        raw_info = data.attrs.get("problem_info")
        if raw_info is None:
            raise DatasetError(f"{path}: attribute 'problem_info' of 'data' is missing; "
                               "expected JSON with 'language_instruction'.", path)  # fmt: skip
        try:
            info = json.loads(raw_info.decode() if isinstance(raw_info, bytes) else str(raw_info))
            language = str(info["language_instruction"])
        except (ValueError, KeyError, TypeError) as exc:
            raise DatasetError(f"{path}: attribute 'problem_info' of 'data' is not JSON with "
                               f"'language_instruction' ({exc!r}).", path) from None  # fmt: skip
        if _normalise(language) != _normalise(task.language):
            raise DatasetError(
                f"{path}: its language instruction is {language!r}, but libero10:{task.id} is "
                f"{task.language!r}: the file belongs to another task.",
                path,
            )
        numbered = []
        for name in data:
            match = _DEMO.match(name)
            if match:
                numbered.append((int(match.group(1)), name))
        if not numbered:
            raise DatasetError(f"{path}: 'data' holds no demo_<i> groups.", path)
        demos = []
        for _, name in sorted(numbered):
            demos.append((name, _check_demo(path, data[name], name, states)))
        attributes = {}
        for key in ("env_name", "bddl_file_name"):
            if key in data.attrs:
                value = data.attrs[key]
                attributes[key] = value.decode() if isinstance(value, bytes) else str(value)
    return TaskFile(task, Path(path), tuple(demos), language, attributes)


def _check_demo(path: Path, group: Any, name: str, states: bool = False) -> int:
    """The number of frames of one demonstration after checking every key's shape."""
    length = None
    for key, trailing, kind in _KEYS + ((_STATES,) if states else ()):
        where = f"data/{name}/{key}"
        item = group.get(key)
        if item is None or not hasattr(item, "shape"):
            raise DatasetError(f"{path}: key '{where}' is missing (expected an array of "
                               f"shape (T, {', '.join(map(str, trailing))})).", path)  # fmt: skip
        _check_storage(path, where, item)
        shape = tuple(item.shape)
        if kind == "image" and (shape[1:] != trailing or item.dtype != np.uint8):
            raise DatasetError(
                f"{path}: '{where}' holds {item.dtype} images of shape {shape[1:]}; expected "
                f"uint8 {trailing} (LIBERO's 128x128 RGB).",
                path,
            )
        if key == "states" and len(shape) != 2:
            raise DatasetError(f"{path}: '{where}' has shape {shape}; expected (T, S), one "
                               "flattened MuJoCo state per step (-o control=absolute replays "
                               "them).", path)  # fmt: skip
        if key != "states" and kind == "number" and key not in ("rewards", "dones") \
                and shape[1:] != trailing:  # fmt: skip
            width = "action width" if key == "actions" else "shape"
            raise DatasetError(f"{path}: '{where}' has shape {shape}; wrong {width}, expected "
                               f"(T, {', '.join(map(str, trailing))}).", path)  # fmt: skip
        if key in ("rewards", "dones") and len(shape) != 1 and shape[1:] != (1,):
            raise DatasetError(f"{path}: '{where}' has shape {shape}; expected (T,).", path)
        if kind == "number" and not (
            np.issubdtype(item.dtype, np.number) or np.issubdtype(item.dtype, np.bool_)
        ):
            raise DatasetError(f"{path}: '{where}' holds {item.dtype}; expected numbers.", path)
        if length is None:
            length = shape[0]
        elif shape[0] != length:
            raise DatasetError(
                f"{path}: '{where}' has {shape[0]} rows but data/{name}/{_KEYS[0][0]} has "
                f"{length}: every array of a demonstration needs one row per step.",
                path,
            )
    assert length is not None
    try:
        actions = np.asarray(group["actions"][()], dtype=np.float64)
    except (OSError, ValueError) as exc:
        raise DatasetError(f"{path}: 'data/{name}/actions' cannot be read ({exc}): the file is "
                           "corrupt or truncated. Download it again.", path) from None  # fmt: skip
    _check_actions(path, name, actions)
    if length < 2:
        raise DatasetError(f"{path}: data/{name} has {length} step(s); a demonstration needs "
                           "at least 2.", path)  # fmt: skip
    return int(length)


def _check_storage(path: Path, where: str, item: Any) -> None:
    """Refuse a dataset whose bytes would come from elsewhere than the file itself (a link to
    another file, external storage, a virtual dataset) or through a filter HDF5 would load
    as a plugin, or that holds Python objects (variable-length data): nothing is read."""
    if Path(item.file.filename).resolve() != Path(path).resolve():
        raise DatasetError(f"{path}: '{where}' is a link to another file "
                           f"({item.file.filename!r}); ssilbench reads only data stored in the "
                           f"file itself. {_USE_PUBLISHED}", path)  # fmt: skip
    if item.dtype.hasobject:
        raise DatasetError(f"{path}: '{where}' holds variable-length objects ({item.dtype}); "
                           f"expected numbers. {_USE_PUBLISHED}", path)  # fmt: skip
    if item.is_virtual:
        raise DatasetError(f"{path}: '{where}' is a virtual dataset, its data mapped from other "
                           "files; ssilbench reads only data stored in the file itself. "
                           f"{_USE_PUBLISHED}", path)  # fmt: skip
    plist = item.id.get_create_plist()
    if plist.get_external_count():
        other = plist.get_external(0)[0].decode(errors="replace")
        raise DatasetError(f"{path}: '{where}' keeps its data in another file ({other!r}, HDF5 "
                           "external storage); ssilbench reads only data stored in the file "
                           f"itself. {_USE_PUBLISHED}", path)  # fmt: skip
    for index in range(plist.get_nfilters()):
        code, _, _, name = plist.get_filter(index)
        if code not in _FILTERS:
            label = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
            raise DatasetError(
                f"{path}: '{where}' is stored with the HDF5 filter {label!r} (id {code}), which "
                f"ssilbench does not decode: only HDF5's built-in filters "
                f"({', '.join(sorted(_FILTERS.values()))}) are, since any other is a plugin "
                f"library HDF5 would load to read it. {_USE_PUBLISHED}",
                path,
            )


def _check_actions(path: Path, name: str, actions: np.ndarray) -> None:
    if not np.isfinite(actions).all():
        raise DatasetError(f"{path}: 'data/{name}/actions' holds NaN or infinite values.", path)
    worst = float(np.abs(actions).max())
    if worst > 1.0 + _ACTION_SLACK:
        raise DatasetError(f"{path}: 'data/{name}/actions' reaches {worst:g}; LIBERO's actions "
                           "lie in [-1, 1].", path)  # fmt: skip


def _read_demo(path: Path, group: Any, name: str) -> dict[str, np.ndarray]:
    """One demonstration's arrays, converted to the store's layout."""
    key = ""
    try:
        arrays = {}
        for key, _, _ in _KEYS:
            arrays[key] = np.asarray(group[key][()])
    except (OSError, KeyError, ValueError) as exc:
        raise DatasetError(f"{path}: 'data/{name}/{key}' cannot be read ({exc}): the file is "
                           "corrupt or truncated. Download it again.", path) from None  # fmt: skip
    actions = arrays["actions"].astype(np.float32)
    _check_actions(path, name, actions)
    proprio = np.concatenate(
        [arrays["obs/gripper_states"], arrays["obs/joint_states"]], axis=1
    ).astype(np.float32)
    assert proprio.shape[1] == PROPRIO_DIM
    return {
        "obs": np.ascontiguousarray(arrays["obs/agentview_rgb"][:, ::-1]),
        "wrist": np.ascontiguousarray(arrays["obs/eye_in_hand_rgb"][:, ::-1]),
        "proprio": proprio,
        "actions": np.clip(actions, -1.0, 1.0),
        "rewards": arrays["rewards"].reshape(-1).astype(np.float32),
    }


def import_task(
    layout: TaskFile, path: Path, log: Callable[[str], None] = print, control: str = "delta"
) -> TransitionStore:
    """Copy a checked task file into a store at ``path``, one demonstration at a time; with
    ``control="absolute"`` each demonstration's actions become the absolute goal poses its
    delta actions aimed at, replayed from its states in the task's simulator."""
    _h5py()  # before building a simulator: a missing h5py is said first
    replay = _Replay(layout) if control == "absolute" else None
    try:
        return _copy(layout, path, log, control, replay)
    finally:
        if replay is not None:
            replay.close()


def _copy(layout: TaskFile, path: Path, log: Callable[[str], None], control: str,
          replay: _Replay | None) -> TransitionStore:  # fmt: skip
    h5py = _h5py()
    task = layout.task
    producer = {
        "plugin": "ssilbench_libero",
        "source": "import",
        "env_id": f"libero10:{task.id}",
        "from": str(layout.path.resolve()),
        "file_bytes": layout.path.stat().st_size,
        "demos": [name for name, _ in layout.demos],
    }
    successes = 0
    lengths = []
    try:
        handle = h5py.File(layout.path, "r")
    except OSError as exc:
        raise DatasetError(f"{layout.path} cannot be read as HDF5 ({exc}).", layout.path) from None
    with handle, TransitionStoreWriter(
        path, IMAGE_SHAPE, np.uint8, producer,
        action_shape=(ACTION_DIM,), action_dtype=np.float32,
        extra_obs={"wrist": (IMAGE_SHAPE, np.uint8), "proprio": ((PROPRIO_DIM,), np.float32)},
    ) as writer:  # fmt: skip
        for number, (name, length) in enumerate(layout.demos, 1):
            demo = _read_demo(layout.path, handle["data"][name], name)
            if replay is not None:
                demo["actions"] = replay.convert(handle["data"][name], name)
            ends = np.zeros(length, dtype=bool)
            ends[-1] = True
            writer.append(demo["obs"], demo["actions"], demo["rewards"], ends,
                          extras={"wrist": demo["wrist"], "proprio": demo["proprio"]})  # fmt: skip
            successes += int(demo["rewards"].max() > 0)
            lengths.append(length)
            if number % 10 == 0 or number == len(layout.demos):
                log(f"  {layout.path.name}: {number}/{len(layout.demos)} demonstrations")
        writer.metadata = {
            "suite": SUITE,
            "task": task.id,
            "bddl": task.bddl,
            "language_instruction": layout.language,
            **layout.attributes,
            "image": "rows reversed from the file (upright), as the simulator's observations",
            "proprio": list(PROPRIO_LAYOUT),
            "demonstrations": len(layout.demos),
            "demo_length_mean": float(np.mean(lengths)),
            "demo_success_rate": successes / len(layout.demos),
        }
        if replay is not None:
            # Delta stores are written as before (their manifests, so dataset fingerprints,
            # unchanged); a store without "control" holds delta actions.
            writer.metadata["control"] = control
            writer.metadata["actions"] = (
                "absolute goal poses (position in metres, axis-angle in radians, world frame) "
                "and the gripper, converted from the file's delta actions by replaying each "
                "step from its recorded state in the delta-controlled simulator"
            )
            # Timed in the log, not the manifest: a manifest is the same for the same data.
            log(f"  {layout.path.name}: absolute actions replayed in {replay.seconds:.1f} s "
                f"({1000 * replay.seconds / max(sum(lengths), 1):.2f} ms a step, "
                "building the simulator included)")  # fmt: skip
        return writer.commit()


class _Replay:
    """The task's simulator (no cameras) that turns delta actions into absolute ones."""

    def __init__(self, layout: TaskFile) -> None:
        import time

        from ssilbench_libero.sim import make_replay_env, state_width, task_files

        self.path = layout.path
        start = time.perf_counter()
        bddl_file, _ = task_files(layout.task)
        self.env = make_replay_env(bddl_file)
        self.env.reset()
        self.width = state_width(self.env)
        self.seconds = time.perf_counter() - start

    def convert(self, group: Any, name: str) -> np.ndarray:
        import time

        from ssilbench_libero.sim import absolute_actions

        try:
            states = np.asarray(group["states"][()], dtype=np.float64)
            actions = np.asarray(group["actions"][()], dtype=np.float64)
        except (OSError, KeyError, ValueError) as exc:
            raise DatasetError(f"{self.path}: 'data/{name}/states' cannot be read ({exc}): the "
                               "file is corrupt or truncated. Download it again.",
                               self.path) from None  # fmt: skip
        if states.shape[1] != self.width:
            raise DatasetError(
                f"{self.path}: 'data/{name}/states' holds states of {states.shape[1]} numbers, "
                f"but the installed LIBERO's {self.path.name.removesuffix('_demo.hdf5')} scene "
                f"has {self.width} (time, joint positions, velocities): the file is not of "
                "this scene, so its actions cannot be replayed. Import it without -o "
                "control=absolute, or use LIBERO's own file.",
                self.path,
            )
        if not np.isfinite(states).all():
            raise DatasetError(f"{self.path}: 'data/{name}/states' holds NaN or infinite "
                               "values.", self.path)  # fmt: skip
        start = time.perf_counter()
        out = absolute_actions(self.env, states, np.clip(actions, -1.0, 1.0))
        self.seconds += time.perf_counter() - start
        return out.astype(np.float32)

    def close(self) -> None:
        self.env.close()
