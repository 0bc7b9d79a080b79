"""Procgen data: importing the paper's chunks, collecting from a policy, training an expert.

Chunks are written by the tests in the exact published layout (tiny: a few frames each).
Every bad input goes through the CLI in a subprocess: exit code 2, one message naming the
file, and no store left behind that looks complete.
"""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import numpy as np
import pytest

from ssilbench.api import DatasetError, TransitionStore, UsageError
from ssilbench.testing import check_dataset, partial_path, usage_error
from ssilbench_procgen.environment import ProcgenEnvironment, ProcgenOptions, dataset_dir
from ssilbench_procgen.vec_env import procgen_problem

PROCGEN_PROBLEM = procgen_problem()

needs_procgen = pytest.mark.skipif(PROCGEN_PROBLEM is not None, reason=str(PROCGEN_PROBLEM))

GAME = "starpilot"
# Frames per chunk, and where episodes end (frame indices into the concatenation): one
# episode spans all three chunks' boundaries, one is a single frame (not stored).
TRAIN_SIZES = (7, 5, 9)
TRAIN_DONE = (2, 13, 14, 18)
TEST_SIZES = (6, 4)
TEST_DONE = (3, 7)


def write_split(folder: Path, sizes, done_at, seed: int, compressed: bool = False) -> dict:
    """Chunks ``0.npz ...`` with the paper's keys; returns the concatenated arrays."""
    rng = np.random.Generator(np.random.PCG64(seed))
    n = sum(sizes)
    full = {
        "obs": rng.integers(0, 256, size=(n, 64, 64, 3), dtype=np.uint8),
        "ta": rng.integers(0, 15, size=n).astype(np.int64),
        "done": np.isin(np.arange(n), done_at),
        "rewards": rng.integers(0, 3, size=n).astype(np.float32),
        "ep_returns": np.zeros(n, dtype=np.float32),
        "values": rng.random(n).astype(np.float32),
    }
    folder.mkdir(parents=True, exist_ok=True)
    save = np.savez_compressed if compressed else np.savez
    start = 0
    for i, size in enumerate(sizes):
        save(folder / f"{i}.npz", **{k: v[start : start + size] for k, v in full.items()})
        start += size
    return full


@pytest.fixture
def source(tmp_path: Path) -> Path:
    src = tmp_path / "lapo"
    write_split(src / GAME / "train", TRAIN_SIZES, TRAIN_DONE, seed=1)
    write_split(src / GAME / "test", TEST_SIZES, TEST_DONE, seed=2, compressed=True)
    return src


def _import(source: Path, root: Path, **kw):
    return ProcgenEnvironment().import_dataset(
        source, root, [GAME], ProcgenOptions(), log=lambda _: None, **kw
    )


def _episodes(n: int, done_at) -> list[list[int]]:
    """Frame indices of each episode of at least two frames."""
    out, start = [], 0
    for end in [*done_at, n - 1]:
        if end >= start:
            if end > start:
                out.append(list(range(start, end + 1)))
            start = end + 1
    return out


def test_import_streams_chunks_into_train_and_test_stores(source, tmp_path):
    root = tmp_path / "data"
    train, test = _import(source, root)
    assert train.root == dataset_dir(root, "expert", GAME) / "train"
    assert test.root == dataset_dir(root, "expert", GAME) / "test"

    full = np.load  # the reference: every chunk concatenated
    ref = {k: [] for k in ("obs", "ta", "done")}
    for i in range(len(TRAIN_SIZES)):
        with full(source / GAME / "train" / f"{i}.npz") as chunk:
            for k in ref:
                ref[k].append(chunk[k])
    obs, ta = np.concatenate(ref["obs"]), np.concatenate(ref["ta"])
    episodes = _episodes(len(obs), TRAIN_DONE)
    kept = [i for ep in episodes for i in ep]
    assert train.obs.dtype == np.uint8 and train.obs.shape[1:] == (3, 64, 64)
    np.testing.assert_array_equal(train.obs, obs[kept].transpose(0, 3, 1, 2))
    np.testing.assert_array_equal(train.actions, ta[kept])
    assert train.episode_ends.tolist() == np.cumsum([len(e) for e in episodes]).tolist()
    # The episode spanning chunks 0, 1 and 2 (frames 3..13) is one episode.
    assert list(range(3, 14)) in episodes

    # No transition crosses an episode end: each (i, i+1) is consecutive inside one episode.
    position = {frame: (e, j) for e, ep in enumerate(episodes) for j, frame in enumerate(ep)}
    stored = np.array(kept)
    for i in train.transition_indices():
        (e0, j0), (e1, j1) = position[stored[i]], position[stored[i + 1]]
        assert e0 == e1 and j1 == j0 + 1
    assert train.num_transitions == len(kept) - len(episodes)

    # Manifest with sha256 per file; a reopen verifies it; memory-mapped arrays.
    manifest = json.loads((train.root / "manifest.json").read_text())
    assert set(manifest["files"]) == {"obs.npy", "actions.npy", "rewards.npy", "episode_ends.npy"}
    assert all(len(f["sha256"]) == 64 for f in manifest["files"].values())
    assert manifest["producer"]["chunks"] == ["0.npz", "1.npz", "2.npz"]
    again = TransitionStore.open(train.root, verify=True)
    assert isinstance(again.obs, np.memmap)
    assert test.num_frames == sum(TEST_SIZES) and test.num_episodes == 3

    # The task opens the train split (and passes the core's dataset conformance check), and
    # samples its test set from the test split (here its transitions inside episodes; those
    # across episode ends are tests/plugins/procgen/test_procgen_protocol.py's).
    options = ProcgenOptions(test_transitions=3, transitions="within_episodes")
    task = ProcgenEnvironment().load(GAME, options)
    assert task.test_set() is None  # before the dataset is opened
    check_dataset(task, root)
    assert task.dataset(root).num_frames == train.num_frames
    test_set = task.test_set()
    assert test_set.obs.shape == (3, 3, 64, 64) and test_set.next_obs.shape == (3, 3, 64, 64)
    index = test.transition_indices()
    match = [np.flatnonzero((test.obs[index] == o).all(axis=(1, 2, 3))) for o in test_set.obs]
    for rows, a, nxt in zip(match, test_set.actions, test_set.next_obs, strict=True):
        assert len(rows) == 1
        i = index[rows[0]]
        assert a == test.actions[i] and np.array_equal(nxt, test.obs[i + 1])


def test_reimport_skips_and_replace_rebuilds(source, tmp_path):
    root = tmp_path / "data"
    first = _import(source, root)
    assert _import(source, root) == []  # already there
    replaced = _import(source, root, replace=True)
    assert [s.manifest["files"] for s in replaced] == [s.manifest["files"] for s in first]


def test_interrupted_import_leaves_nothing_and_can_be_rerun(source, tmp_path, monkeypatch):
    from ssilbench_procgen import importer

    root = tmp_path / "data"
    calls = []
    real = importer.read_chunk

    def interrupted(chunk):
        calls.append(chunk)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(chunk)

    monkeypatch.setattr(importer, "read_chunk", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _import(source, root)
    target = dataset_dir(root, "expert", GAME) / "train"
    assert not target.exists() and not partial_path(target).exists()
    monkeypatch.setattr(importer, "read_chunk", real)
    # A writer killed outright leaves its hidden folder: the next import replaces it.
    partial_path(target).mkdir(parents=True)
    (partial_path(target) / "obs.npy").write_bytes(b"junk")
    train, _ = _import(source, root)
    assert train.num_frames > 0 and not partial_path(target).exists()


def test_missing_dataset_says_how_to_import_or_collect(tmp_path):
    task = ProcgenEnvironment().load(GAME, ProcgenOptions(dataset="mine"))
    with pytest.raises(DatasetError) as err:
        task.dataset(tmp_path)
    message = str(err.value)
    assert "ssilbench data import procgen --from DIR --games starpilot -o dataset=mine" in message
    assert "ssilbench data download procgen --games starpilot -o dataset=mine" in message
    assert "ssilbench data collect procgen:starpilot --policy CHECKPOINT" in message


# --- bad input through the CLI ----------------------------------------------------------


def _gap(split: Path) -> str:
    (split / "1.npz").unlink()
    return "are missing (1.npz)"


def _extra_file(split: Path) -> str:
    (split / "notes.txt").write_text("hello")
    return "Unexpected file"


def _wrong_keys(split: Path) -> str:
    with np.load(split / "2.npz") as chunk:
        arrays = {k: chunk[k] for k in chunk.files if k != "ta"}
    np.savez(split / "2.npz", **arrays, actions=np.zeros(len(arrays["obs"]), dtype=np.int64))
    return "lacks the key(s) ta"


def _wrong_shape(split: Path) -> str:
    with np.load(split / "1.npz") as chunk:
        arrays = {k: chunk[k] for k in chunk.files}
    arrays["obs"] = np.ascontiguousarray(arrays["obs"].transpose(0, 3, 1, 2))  # CHW
    np.savez(split / "1.npz", **arrays)
    return "expected uint8 of shape (N, 64, 64, 3)"


def _wrong_dtype(split: Path) -> str:
    with np.load(split / "1.npz") as chunk:
        arrays = {k: chunk[k] for k in chunk.files}
    arrays["done"] = arrays["done"].astype(np.float32)
    np.savez(split / "1.npz", **arrays)
    return "'done' is float32"


def _truncated(split: Path) -> str:
    data = (split / "1.npz").read_bytes()
    (split / "1.npz").write_bytes(data[: len(data) // 2])
    return "is truncated or corrupt"


def _corrupt_last(split: Path) -> str:
    # A flipped byte inside the frames: the headers read fine, the CRC fails on copying,
    # after two chunks were already written.
    path = split / "2.npz"
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("obs.npy")
    data[info.header_offset + 200 + info.file_size // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    return "is truncated or corrupt"


def _action_out_of_range(split: Path) -> str:
    with np.load(split / "2.npz") as chunk:
        arrays = {k: chunk[k] for k in chunk.files}
    arrays["ta"][4] = 15
    np.savez(split / "2.npz", **arrays)
    return "action 15 at frame 4 is outside 0..14"


BAD_CHUNKS = {
    "gap": (_gap, ""),
    "extra-file": (_extra_file, "notes.txt"),
    "wrong-keys": (_wrong_keys, "2.npz"),
    "wrong-shape": (_wrong_shape, "1.npz"),
    "wrong-dtype": (_wrong_dtype, "1.npz"),
    "truncated": (_truncated, "1.npz"),
    "corrupt": (_corrupt_last, "2.npz"),
    "action-range": (_action_out_of_range, "2.npz"),
}


@pytest.mark.parametrize("case", list(BAD_CHUNKS))
def test_bad_chunks_exit_2_naming_the_file_and_leave_nothing(case, source, cli):
    damage, filename = BAD_CHUNKS[case]
    split = source / GAME / "train"
    expected = damage(split)
    result = cli("data", "import", "procgen", "--from", str(source), "--data-root", str(cli.data))
    error = usage_error(result)
    assert expected in error
    assert str(split / filename) in error
    game_dir = dataset_dir(cli.data, "expert", GAME)
    left = sorted(p.name for p in game_dir.iterdir()) if game_dir.exists() else []
    assert left == [], left  # neither train nor test, nor a hidden partial folder


def test_unknown_game_exit_2_with_did_you_mean(source, cli):
    result = cli("data", "import", "procgen", "--from", str(source), "--games", "starpliot")
    assert result.returncode == 2
    assert "Did you mean 'starpilot'?" in result.stderr
    (source / "coinrn").mkdir()
    result = cli("data", "import", "procgen", "--from", str(source), "--data-root", str(cli.data))
    assert result.returncode == 2
    assert "Unknown procgen game folder 'coinrn'. Did you mean 'coinrun'?" in result.stderr
    result = cli("data", "collect", "procgen:bigfsh", "--policy", "x.pt", "--frames", "10")
    assert result.returncode == 2 and "Did you mean 'bigfish'?" in result.stderr
    result = cli("data", "import", "procgen", "--from", str(source / "nowhere"))
    assert result.returncode == 2 and "no such folder" in result.stderr


def test_commands_on_the_wrong_environment_or_config_exit_2(cli, tmp_path):
    cases = [
        (("expert", "train", f"procgen:{GAME}", "-c", "scal=1"), "Did you mean 'scale'?"),
        (("expert", "train", "maze:10x10"), "Environment 'maze' has no expert trainer"),
        (("data", "import", "maze", "--from", str(tmp_path)), "Environment 'maze' has no importer"),
        (("data", "import", "procgen:bigfish", "--from", str(tmp_path)), "pick tasks with --games"),
        (("data", "collect", "procgen:all", "--policy", "x.pt", "--frames", "9"), "Give one task"),
        (("data", "collect", "maze:10x10", "--policy", "x.pt", "--frames", "9"), "cannot collect"),
    ]  # fmt: skip
    for args, expected in cases:
        result = cli(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert expected in result.stderr and "Traceback" not in result.stderr, result.stderr


# --- experts and collected data ---------------------------------------------------------

TINY_PPO = dict(num_envs=2, num_steps=8, epochs=1, minibatches=2, scale=1, checkpoint_every=1)


@needs_procgen
def test_ppo_writes_and_resumes_a_checkpoint(tmp_path):
    import torch

    from ssilbench_procgen.expert_config import ExpertConfig
    from ssilbench_procgen.ppo import read_checkpoint

    torch.set_num_threads(1)
    task = ProcgenEnvironment().load(GAME, ProcgenOptions())
    out = tmp_path / "expert.pt"
    lines: list[str] = []
    task.train_expert(ExpertConfig(steps=16, **TINY_PPO), out, log=lines.append)
    first = read_checkpoint(out)
    assert first["updates"] == 1 and first["frames"] == 16
    assert first["architecture"]["name"] == "impala-actor-critic"
    task.train_expert(ExpertConfig(steps=32, **TINY_PPO), out, log=lines.append)
    second = read_checkpoint(out)
    assert second["updates"] == 2 and len(second["history"]) == 2
    assert any("resuming" in line and "update 1" in line for line in lines)
    assert not torch.equal(first["model"]["policy.weight"], second["model"]["policy.weight"])
    with pytest.raises(UsageError, match="scale=1 there, 2 now"):
        task.train_expert(ExpertConfig(steps=48, **{**TINY_PPO, "scale": 2}), out)


@needs_procgen
def test_collect_from_an_untrained_policy(tmp_path):
    import torch

    from ssilbench_procgen.expert_config import ExpertConfig

    torch.set_num_threads(1)
    task = ProcgenEnvironment().load(GAME, ProcgenOptions(dataset="collected"))
    policy = tmp_path / "expert.pt"
    task.train_expert(ExpertConfig(steps=16, **TINY_PPO), policy, log=lambda _: None)
    store = task.collect_dataset(policy, 120, tmp_path, seed=3, log=lambda _: None)
    assert store.num_frames == 120 and store.obs.shape == (120, 3, 64, 64)
    assert store.root == dataset_dir(tmp_path, "collected", GAME) / "train"
    assert store.actions.min() >= 0 and store.actions.max() < 15
    assert store.manifest["producer"]["source"] == "collect"
    # The collecting expert's return and a random policy's, counted alike, for normalising.
    recorded = store.manifest["metadata"]
    assert recorded["complete_episodes"] >= 1 and recorded["episode_return_mean"] is not None
    assert recorded["random_episodes"] == 64 and recorded["random_return_mean"] > 0
    # An untrained expert scores below a random policy: a run normalised by it is refused.
    weak = ProcgenEnvironment().load(GAME, ProcgenOptions(dataset="collected"))
    random = f"{recorded['random_return_mean']:.2f} (64 episodes measured at collection"
    with pytest.raises(
        DatasetError, match=re.escape(f"not above a uniform-random policy's {random}")
    ):
        weak.dataset(tmp_path)
    options = ProcgenOptions(dataset="collected", normaliser="lapo_table")
    again = ProcgenEnvironment().load(GAME, options)
    assert again.dataset(tmp_path).manifest["files"] == store.manifest["files"]
    assert again.spec.normaliser.name == "lapo"
    with pytest.raises(UsageError, match="already holds a dataset"):
        task.collect_dataset(policy, 120, tmp_path, seed=3)
    twin = task.collect_dataset(policy, 120, tmp_path, seed=3, replace=True, log=lambda _: None)
    assert twin.manifest["files"] == store.manifest["files"]  # same seed, same data
    assert task.test_set() is None  # no test split collected
    task.collect_dataset(policy, 120, tmp_path, seed=3, replace=True, log=lambda _: None,
                         test_frames=80)  # fmt: skip
    test = task.test_set()
    assert test is not None and 0 < len(test.actions) < 80
    assert test.obs.shape[1:] == (3, 64, 64) and test.next_obs.shape == test.obs.shape
    train = np.asarray(store.obs[:8])
    assert not any(np.array_equal(train[0], frame) for frame in test.obs)  # other episodes


def test_collect_refuses_a_checkpoint_of_another_architecture(cli, tmp_path):
    import torch

    from ssilbench_procgen.ppo import CHECKPOINT_FORMAT, CHECKPOINT_VERSION, load_expert

    wrong = tmp_path / "cnn.pt"
    torch.save(
        {
            "format": CHECKPOINT_FORMAT,
            "format_version": CHECKPOINT_VERSION,
            "architecture": {"name": "cnn5", "in_channels": 3, "num_actions": 15},
            "env_id": f"procgen:{GAME}",
            "model": {"w": torch.zeros(2)},
        },
        wrong,
    )
    result = cli("data", "collect", f"procgen:{GAME}", "--policy", str(wrong), "--frames", "50",
                 "--data-root", str(cli.data))  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "has the architecture 'cnn5'" in result.stderr and str(wrong) in result.stderr
    assert "Traceback" not in result.stderr
    assert not (cli.data / "procgen").exists()

    not_a_checkpoint = tmp_path / "notes.pt"
    not_a_checkpoint.write_text("not a checkpoint")
    with pytest.raises(UsageError, match="notes.pt is not a readable checkpoint"):
        load_expert(not_a_checkpoint, f"procgen:{GAME}")
    with pytest.raises(UsageError, match="No checkpoint at"):
        load_expert(tmp_path / "missing.pt", f"procgen:{GAME}")
