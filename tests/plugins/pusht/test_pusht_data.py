"""Push-T data: the replay-zarr writer and recorder, importing the diffusion-policy layout
into a TransitionStore, the coverage reward recomputed from states, and every bad input
(through the CLI: exit 2, a message naming the file and key, and no store left behind).

Replay files are written by the tests in the exact layout from real Push-T rollouts
(a few short episodes), with frames stored as float32 (as the published file) or uint8.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from ssilbench.api import DatasetError, TransitionStore
from ssilbench.testing import check_task, partial_path, usage_error
from ssilbench_pusht.environment import PushTEnvironment, PushTOptions, dataset_dir
from ssilbench_pusht.vec_env import pusht_available

pytestmark = pytest.mark.skipif(
    not pusht_available(), reason="gym-pusht is not importable: pip install 'ssilbench[pusht]'"
)

# Three short episodes: 20, 20 and 11 frames (the third stops early), one of one frame.
LENGTHS = (20, 20, 11)


@pytest.fixture(scope="module")
def episodes():
    from ssilbench_pusht.replay import ReplayEpisode, record_episodes

    recorded = list(record_episodes(3, seed=4, policy="push", max_steps=20))
    third = recorded[2]
    recorded[2] = ReplayEpisode(*(getattr(third, k)[:11] for k in
                                  ("img", "state", "keypoint", "action", "n_contacts")),
                                max_coverage=third.max_coverage)  # fmt: skip
    single = ReplayEpisode(*(getattr(third, k)[:1] for k in
                             ("img", "state", "keypoint", "action", "n_contacts")),
                           max_coverage=0.0)  # fmt: skip
    return [*recorded, single]


@pytest.fixture(scope="module")
def replays(episodes, tmp_path_factory) -> dict[str, Path]:
    from ssilbench_pusht.replay import write_replay_zarr

    folder = tmp_path_factory.mktemp("replays")
    out = {}
    for dtype in ("float32", "uint8"):
        out[dtype] = folder / f"pusht_{dtype}.zarr"
        # Small chunks so that an import copies several blocks and chunk boundaries fall
        # inside episodes.
        write_replay_zarr(out[dtype], episodes, img_dtype=dtype, chunk_frames=7)
    return out


@pytest.fixture
def replay(replays, tmp_path) -> Path:
    """A private copy of the float32 replay that a test may damage."""
    return Path(shutil.copytree(replays["float32"], tmp_path / "pusht_replay.zarr"))


def _import(source: Path, root: Path, **kw):
    return PushTEnvironment().import_dataset(
        source, root, [], PushTOptions(**kw.pop("options", {})), log=lambda _: None, **kw
    )


def test_writer_produces_the_diffusion_policy_layout(replays, episodes):
    import zarr

    group = zarr.open_group(str(replays["float32"]), mode="r")
    frames = sum(len(e) for e in episodes)
    expected = {
        "img": ((frames, 96, 96, 3), np.float32),
        "state": ((frames, 5), np.float32),
        "keypoint": ((frames, 9, 2), np.float32),
        "action": ((frames, 2), np.float32),
        "n_contacts": ((frames, 1), np.float32),
    }
    for key, (shape, dtype) in expected.items():
        assert group["data"][key].shape == shape and group["data"][key].dtype == dtype
    assert group["meta"]["episode_ends"][:].tolist() == [20, 40, 51, 52]
    assert group["meta"]["episode_ends"].dtype == np.int64
    # zarr v2 format with blosc-compressed chunks, whichever zarr wrote it.
    meta = json.loads((replays["float32"] / "data" / "img" / ".zarray").read_text())
    assert meta["zarr_format"] == 2 and meta["compressor"]["id"] == "blosc"
    assert (replays["float32"] / ".zgroup").is_file()
    img = group["data"]["img"][:]
    assert img.max() <= 255 and np.array_equal(img, np.rint(img))
    uint8 = zarr.open_group(str(replays["uint8"]), mode="r")["data"]["img"]
    assert uint8.dtype == np.uint8 and np.array_equal(uint8[:], img.astype(np.uint8))


def test_recording_is_seeded_and_keypoints_follow_the_block(episodes):
    from ssilbench_pusht.replay import record_episodes

    again = next(record_episodes(1, seed=4, policy="push", max_steps=20))
    assert np.array_equal(again.img, episodes[0].img)
    assert np.array_equal(again.action, episodes[0].action)
    other = next(record_episodes(1, seed=5, policy="push", max_steps=20))
    assert not np.array_equal(other.img[0], episodes[0].img[0])
    first = episodes[0]
    assert first.img.dtype == np.uint8 and first.img.shape == (20, 96, 96, 3)
    assert (first.action >= 0).all() and (first.action <= 512).all()
    # Keypoints: the last is the T's centre of gravity, the others its eight corners, all
    # moving rigidly with the block (distances between them never change).
    d0 = np.linalg.norm(first.keypoint[0, :, None] - first.keypoint[0, None], axis=-1)
    for t in range(len(first)):
        dt = np.linalg.norm(first.keypoint[t, :, None] - first.keypoint[t, None], axis=-1)
        np.testing.assert_allclose(dt, d0, atol=1e-2)
    assert first.n_contacts[0, 0] == 0 and first.n_contacts.max() > 0  # the agent hits the T


def test_reward_from_state_matches_the_environment():
    from ssilbench_pusht.geometry import coverage, reward
    from ssilbench_pusht.replay import push_policy
    from ssilbench_pusht.vec_env import make_pusht_env

    env = make_pusht_env()
    rng = np.random.Generator(np.random.PCG64(1))
    states, expected = [], []
    for seed in range(3):
        env.reset(seed=seed)
        action = np.array(env.agent.position)
        for _ in range(25):
            state = np.array([*env.agent.position, *env.block.position,
                              env.block.angle % (2 * np.pi)])  # fmt: skip
            action = push_policy(state, action, rng).astype(np.float32)
            _, r, _, _, info = env.step(action)
            states.append([*env.agent.position, *env.block.position, env.block.angle])
            expected.append((info["coverage"], r))
    env.close()
    states, expected = np.array(states), np.array(expected)
    assert expected[:, 0].max() > 0.05  # some coverage to compare
    np.testing.assert_allclose(coverage(states), expected[:, 0], atol=1e-9)
    # As stored in a replay file (float32, angle wrapped to [0, 2 pi)): close enough.
    stored = states.astype(np.float32)
    stored[:, 4] %= 2 * np.pi
    np.testing.assert_allclose(reward(stored), expected[:, 1], atol=1e-3)
    on_goal = np.array([[0.0, 0.0, 256.0, 256.0, np.pi / 4]])
    assert coverage(on_goal)[0] == pytest.approx(1.0) and reward(on_goal)[0] == 1.0


@pytest.mark.parametrize("dtype", ["float32", "uint8"])
def test_import_writes_frames_positions_actions_and_rewards(dtype, replays, episodes, tmp_path):
    from ssilbench_pusht.importer import episode_rewards

    root = tmp_path / "data"
    (store,) = _import(replays[dtype], root)
    assert store.root == dataset_dir(root, "demos")
    kept = episodes[:3]  # the one-frame episode holds no transition: not stored
    img = np.concatenate([e.img for e in kept])
    state = np.concatenate([e.state for e in kept])
    assert store.obs.dtype == np.uint8 and store.obs.shape == (51, 96, 96, 3)
    np.testing.assert_array_equal(store.obs, img)
    assert store.extras["agent_pos"].dtype == np.float32
    np.testing.assert_array_equal(store.extras["agent_pos"], state[:, :2])
    assert store.actions.dtype == np.float32 and store.actions.shape == (51, 2)
    np.testing.assert_array_equal(store.actions, np.concatenate([e.action for e in kept]))
    assert store.episode_ends.tolist() == [20, 40, 51]
    ends = np.array([20, 40, 51])
    np.testing.assert_allclose(store.rewards, episode_rewards(state.astype(np.float64), ends),
                               atol=1e-6)  # fmt: skip
    assert store.rewards.max() > 0  # the scripted pushes reach some coverage
    manifest = json.loads((store.root / "manifest.json").read_text())
    assert manifest["extra_obs"] == {"agent_pos": {"shape": [2], "dtype": "float32"}}
    assert manifest["producer"]["from"] == str(replays[dtype].resolve())
    meta = manifest["metadata"]
    assert meta["source_file"] == str(replays[dtype].resolve())
    assert meta["img_dtype"] == dtype
    assert meta["source_layout"]["data/img"]["shape"] == [52, 96, 96, 3]
    assert meta["source_layout"]["meta/episode_ends"]["dtype"] == "int64"
    assert len(meta["episode_max_reward"]) == 4
    again = TransitionStore.open(store.root, verify=True)
    assert isinstance(again.obs, np.memmap)


def test_imported_task_passes_conformance(replays, tmp_path):
    root = tmp_path / "data"
    _import(replays["uint8"], root)
    # A short time limit keeps the horizon-long conformance rollouts quick.
    task = PushTEnvironment().load("pusht", PushTOptions(max_steps=12))
    check_task(task, root, num_envs=2, seed=3)


def test_reimport_skips_and_replace_rebuilds(replays, tmp_path):
    root = tmp_path / "data"
    (first,) = _import(replays["float32"], root)
    assert _import(replays["uint8"], root) == []  # already there
    (replaced,) = _import(replays["uint8"], root, replace=True)
    # Same frames, actions and rewards from the uint8 file: equal data files.
    for name in ("obs.npy", "obs.agent_pos.npy", "actions.npy", "rewards.npy"):
        assert replaced.manifest["files"][name] == first.manifest["files"][name]
    (other,) = _import(replays["uint8"], root, options={"dataset": "mine"})
    assert other.root == dataset_dir(root, "mine")


def test_interrupted_import_leaves_nothing_and_can_be_rerun(replay, tmp_path, monkeypatch):
    from ssilbench_pusht import importer

    root = tmp_path / "data"
    calls = []
    real = importer.frames_as_uint8

    def interrupted(*args):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(importer, "_BLOCK_FRAMES", 7)  # one chunk per block: several blocks
    monkeypatch.setattr(importer, "frames_as_uint8", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _import(replay, root)
    target = dataset_dir(root, "demos")
    assert not target.exists() and not partial_path(target).exists()
    monkeypatch.setattr(importer, "frames_as_uint8", real)
    (store,) = _import(replay, root)
    assert store.num_frames == 51 and not partial_path(target).exists()


def test_missing_dataset_says_how_to_import(tmp_path):
    task = PushTEnvironment().load("pusht", PushTOptions(dataset="mine"))
    with pytest.raises(DatasetError) as err:
        task.dataset(tmp_path)
    message = str(err.value)
    assert "ssilbench data import pusht --from PATH -o dataset=mine" in message
    assert "ssilbench data download pusht -o dataset=mine" in message
    assert str(dataset_dir(tmp_path, "mine")) in message


def test_demo_dataset_imports(tmp_path):
    from ssilbench_pusht.replay import make_demo_dataset

    path = make_demo_dataset(tmp_path / "demo.zarr", num_episodes=2, seed=0, max_steps=15,
                             img_dtype="uint8")  # fmt: skip
    (store,) = _import(path, tmp_path / "data")
    assert store.num_episodes == 2 and store.num_frames == 30


# --- bad input through the CLI ----------------------------------------------------------


def _rewrite(path: Path, key: str, values: np.ndarray | None) -> None:
    """Replace (or with None, delete) one array of a replay file."""
    import zarr

    from ssilbench_pusht.replay import create_array

    parent, name = key.split("/")
    group = zarr.open_group(str(path), mode="r+")[parent]
    del group[name]
    if values is not None:
        array = create_array(group, name, values.shape[1:], str(values.dtype), 7)
        array.append(values)


def _read(path: Path, key: str) -> np.ndarray:
    import zarr

    return zarr.open_group(str(path), mode="r")[key][:]


def _missing_img(path):
    _rewrite(path, "data/img", None)
    return "the key 'data/img' is missing (the file has: data/action"


def _missing_ends(path):
    _rewrite(path, "meta/episode_ends", None)
    return "the key 'meta/episode_ends' is missing"


def _short_state(path):
    _rewrite(path, "data/state", _read(path, "data/state")[:-1])
    return "'data/state' has 51 rows but 'data/img' has 52"


def _ends_not_increasing(path):
    _rewrite(path, "meta/episode_ends", np.array([20, 15, 51, 52], dtype=np.int64))
    return "'meta/episode_ends' is not increasing: entry 1 is 15 after 20"


def _ends_short(path):
    _rewrite(path, "meta/episode_ends", np.array([20, 40, 51], dtype=np.int64))
    return "'meta/episode_ends' ends at 51 but the file has 52 frames"


def _wrong_image_size(path):
    img = _read(path, "data/img")
    _rewrite(path, "data/img", np.ascontiguousarray(img[:, :64, :64]))
    return "'data/img' has shape (52, 64, 64, 3); expected (T, 96, 96, 3)"


def _channels_first(path):
    img = _read(path, "data/img")
    _rewrite(path, "data/img", np.ascontiguousarray(img.transpose(0, 3, 1, 2)))
    return "'data/img' has shape (52, 3, 96, 96); expected (T, 96, 96, 3)"


def _wrong_action_shape(path):
    action = _read(path, "data/action")
    _rewrite(path, "data/action", np.concatenate([action, action[:, :1]], axis=1))
    return "'data/action' has shape (52, 3); expected (T, 2)"


def _pixel_range(path):
    img = _read(path, "data/img")
    img[45, 0, 0, 0] = 300.0
    _rewrite(path, "data/img", img)
    return "'data/img' frame 45 has values outside 0..255"


def _nan_action(path):
    action = _read(path, "data/action")
    action[33, 1] = np.nan
    _rewrite(path, "data/action", action)
    return "'data/action' holds NaN or infinite values (frame 33)"


def _damaged_chunk(path):
    chunk = path / "data" / "img" / "5.0.0.0"
    chunk.write_bytes(chunk.read_bytes()[:100])
    return "'data/img' rows 35..42 (one stored chunk) cannot be read"


def _not_zarr(path):
    shutil.rmtree(path)
    path.mkdir()
    (path / "episodes.npz").write_bytes(b"not zarr")
    return "is not a zarr directory store (no .zgroup or zarr.json in it)"


def _nowhere(path):
    shutil.rmtree(path)
    return "no such file or folder"


BAD_REPLAYS = {
    "missing-img": _missing_img,
    "missing-episode-ends": _missing_ends,
    "length-mismatch": _short_state,
    "ends-not-increasing": _ends_not_increasing,
    "ends-before-T": _ends_short,
    "image-size": _wrong_image_size,
    "channels-first": _channels_first,
    "action-shape": _wrong_action_shape,
    "pixel-range": _pixel_range,
    "nan-action": _nan_action,
    "damaged-chunk": _damaged_chunk,
    "not-zarr": _not_zarr,
    "no-such-path": _nowhere,
}


@pytest.mark.parametrize("case", list(BAD_REPLAYS))
def test_bad_replay_exits_2_naming_the_file_and_leaves_nothing(case, replay, cli):
    expected = BAD_REPLAYS[case](replay)
    result = cli("data", "import", "pusht", "--from", str(replay), "--data-root", str(cli.data))
    error = usage_error(result)
    assert expected in error and str(replay) in error, error
    folder = cli.data / "pusht"
    left = sorted(p.name for p in folder.iterdir()) if folder.exists() else []
    assert left == [], left  # neither the store nor a hidden partial folder


def test_cli_imports_and_names_the_store(replay, cli):
    result = cli("data", "import", "pusht", "--from", str(replay), "--data-root", str(cli.data))
    assert result.returncode == 0, result.stderr
    assert f"{dataset_dir(cli.data, 'demos')}: 51 frames, 3 episodes, 48 transitions" in (
        result.stdout
    )
    result = cli("data", "import", "pusht", "--from", str(replay), "--games", "pushT")
    assert result.returncode == 2 and "Did you mean 'pusht'?" in result.stderr
