"""libero10:all as one multitask task: the ten (here two) imported stores joined without a
copy, D_L counted per task and nested across budgets, the conditioning table (one-hot
fallback, a local CLIP encoder's embeddings cached in the dataset), and the evaluation's
episodes over several tasks, played in waves."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ssilbench.api import ConfigError, DatasetError, UsageError
from ssilbench.testing import split
from ssilbench_libero.environment import Libero10Environment, Libero10Options
from ssilbench_libero.episodes import EpisodeEnv
from ssilbench_libero.language import one_hot, task_embeddings
from ssilbench_libero.multitask import ConcatRows, task_of_frames
from ssilbench_libero.tasks import BY_ID, TASK_IDS, TASKS

from .test_libero_data import write_task_file

FIRST, FOURTH = TASKS[0], TASKS[3]
TWO = f"{FIRST.id},{FOURTH.id}"  # suite order: soup-sauce-basket, bowl-drawer


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """A data root with two tasks imported: 4 and 5 demonstrations of 3-6 frames."""
    tmp = tmp_path_factory.mktemp("multitask")
    src = tmp / "hdf5"
    write_task_file(src, FIRST, demos={f"demo_{i}": 3 + i for i in range(4)}, seed=1)
    write_task_file(src, FOURTH, demos={f"demo_{i}": 6 - i % 3 for i in range(5)}, seed=2)
    data = tmp / "data"
    Libero10Environment().import_dataset(src, data, [FIRST.id, FOURTH.id], Libero10Options(),
                                          log=lambda _: None)  # fmt: skip
    return data


def _task(**options):
    return Libero10Environment().load("all", Libero10Options(tasks=TWO, **options))


def test_all_is_one_multitask_task_by_default_and_ten_runs_on_request():
    env = Libero10Environment()
    assert env.expand_all(Libero10Options()) == ["all"]
    assert env.expand_all(Libero10Options(multitask=False)) == list(TASK_IDS)
    assert env.expand_all(Libero10Options(multitask=False, tasks=TWO)) == [FIRST.id, FOURTH.id]
    full = env.load("all", Libero10Options())
    assert full.spec.env_id == "libero10:all"
    assert full.spec.eval_episodes == 10 * 10  # the paper's 100 rollouts: 10 per task
    assert full.spec.extra_obs["language"] == ((10,), "float32")  # one-hot fallback
    assert full.spec.metadata["conditioning"]["kind"] == "task_index"
    paper = env.load("all", Libero10Options(protocol="paper"))
    assert paper.spec.eval_episodes == 100  # the paper's 100 rollouts
    clip = env.load("all", Libero10Options(text_encoder="/models/clip", text_dim=768))
    assert clip.spec.extra_obs["language"] == ((768,), "float32")
    assert clip.spec.metadata["conditioning"]["kind"] == "clip"


def test_tasks_option_is_checked_and_kept_in_suite_order():
    assert Libero10Options(tasks=f"{FOURTH.id},{FIRST.id}").tasks == (FIRST.id, FOURTH.id)
    with pytest.raises(ValueError, match="did you mean 'bowl-drawer'"):
        Libero10Options(tasks="bowl-drawr")


def test_multitask_store_joins_the_task_stores_without_copying_frames(root):
    task = _task()
    store = task.dataset(root)
    parts = [Libero10Environment().load(t, Libero10Options()).dataset(root)
             for t in (FIRST.id, FOURTH.id)]  # fmt: skip
    assert isinstance(store.obs, ConcatRows) and isinstance(store.extras["wrist"], ConcatRows)
    assert store.num_episodes == 9 and store.num_frames == sum(p.num_frames for p in parts)
    offset = parts[0].num_frames
    rows = np.array([0, offset - 1, offset, store.num_frames - 1])
    expected = np.stack([parts[0].obs[0], parts[0].obs[offset - 1], parts[1].obs[0],
                         parts[1].obs[-1]])  # fmt: skip
    assert np.array_equal(store.obs[rows], expected)
    assert np.array_equal(store.obs[offset - 2 : offset + 2],
                          np.concatenate([parts[0].obs[-2:], parts[1].obs[:2]]))  # fmt: skip
    assert np.array_equal(store.actions, np.concatenate([p.actions for p in parts]))
    assert np.array_equal(store.extras["proprio"],
                          np.concatenate([p.extras["proprio"] for p in parts]))  # fmt: skip
    tasks = task_of_frames(store)
    assert tasks.dtype == np.uint8 and (tasks[:offset] == 0).all() and (tasks[offset:] == 1).all()
    language = store.extras["language"][np.arange(store.num_frames)]
    assert np.array_equal(language, one_hot(2)[tasks])
    assert store.manifest["metadata"]["episode_groups"] == [0] * 4 + [1] * 5


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_labeled_demonstrations_are_n_l_per_task_and_nested_across_budgets(root, seed):
    store = _task().dataset(root)
    groups = np.array(store.manifest["metadata"]["episode_groups"])
    previous: set[int] = set()
    for budget in ("1", "2", "3", "4"):
        labeled, unlabeled = split(store, budget, seed, "demonstrations")
        episodes = set(np.unique(store.episode_of_transitions(labeled.index)).tolist())
        per_task = np.bincount(groups[sorted(episodes)], minlength=2)
        assert per_task.tolist() == [int(budget), int(budget)]
        assert previous <= episodes  # nested: a larger budget keeps the smaller one's
        previous = episodes
        assert len(unlabeled) == store.num_transitions  # D_U: every demonstration
        assert np.array_equal(labeled.actions, store.actions[labeled.index])
    with pytest.raises(UsageError, match="smallest task"):
        split(store, "5", seed, "demonstrations")  # the first task has only 4
    labeled, _ = split(store, "all", seed, "demonstrations")
    assert len(labeled) == store.num_transitions


def test_seeds_draw_other_demonstrations_per_task(root):
    store = _task().dataset(root)
    chosen = {
        tuple(
            np.unique(
                store.episode_of_transitions(split(store, "1", s, "demonstrations")[0].index)
            ).tolist()
        )  # fmt: skip
        for s in range(8)
    }
    assert len(chosen) > 1


def test_ungrouped_stores_split_as_before(root):
    # A per-task store has no groups: the seeded permutation over its demonstrations.
    store = Libero10Environment().load(FIRST.id, Libero10Options()).dataset(root)
    labeled, _ = split(store, "2", 3, "demonstrations")
    order = np.random.Generator(np.random.PCG64(3)).permutation(store.num_episodes)
    episodes = np.unique(store.episode_of_transitions(labeled.index))
    assert episodes.tolist() == sorted(order[:2].tolist())


def test_a_missing_task_store_names_it_and_how_to_import(tmp_path):
    task = Libero10Environment().load("all", Libero10Options())
    with pytest.raises(DatasetError, match="10 of them are not imported") as info:
        task.dataset(tmp_path)
    assert "ssilbench data import libero10" in str(info.value)
    assert "multitask=false" in str(info.value)


def test_fallback_conditioning_is_the_task_index_and_enters_the_fingerprint(root):
    store = _task().dataset(root)
    cond = store.manifest["metadata"]["conditioning"]
    assert cond["kind"] == "task_index" and cond["dim"] == 2
    # Another table (e.g. CLIP embeddings) gives another recorded sha256 of 'language'.
    from ssilbench_libero.multitask import open_multitask

    parts = [Libero10Environment().load(t, Libero10Options()).dataset(root)
             for t in (FIRST.id, FOURTH.id)]  # fmt: skip
    other = open_multitask(parts, [FIRST.id, FOURTH.id], np.full((2, 3), 0.5, np.float32),
                           {"kind": "clip"}, root)  # fmt: skip
    assert other.content_id("obs.language") != store.content_id("obs.language")
    assert other.content_id("obs") == store.content_id("obs")


def test_text_encoder_that_is_not_a_checkpoint_folder_is_refused(tmp_path):
    with pytest.raises(UsageError, match="not a folder holding a CLIP checkpoint"):
        task_embeddings(["a task"], str(tmp_path / "nowhere"), 512)


def _tiny_clip(folder: Path) -> None:
    """A CLIP text encoder of a few hundred parameters with a tokenizer of a tiny
    vocabulary, saved as transformers saves one (nothing downloaded)."""
    transformers = pytest.importorskip(
        "transformers", reason="transformers is not installed: pip install 'ssilbench[clip]'"
    )
    import torch

    words = sorted({w for t in TASKS for w in t.language.split()})
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for w in words:
        vocab.setdefault(w + "</w>", len(vocab))
    for ch in sorted({c for w in words for c in w}):
        vocab.setdefault(ch, len(vocab))
        vocab.setdefault(ch + "</w>", len(vocab))
    folder.mkdir(parents=True)
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    tokenizer = transformers.CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"))
    config = transformers.CLIPTextConfig(vocab_size=len(vocab), hidden_size=8,
                                         intermediate_size=16, num_hidden_layers=1,
                                         num_attention_heads=2, max_position_embeddings=77,
                                         projection_dim=6, bos_token_id=0, eos_token_id=1,
                                         pad_token_id=1)  # fmt: skip
    torch.manual_seed(0)
    transformers.CLIPTextModelWithProjection(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def test_local_clip_embeddings_are_computed_once_and_cached(tmp_path, monkeypatch):
    encoder = tmp_path / "clip"
    _tiny_clip(encoder)
    instructions = [FIRST.language, FOURTH.language]
    with pytest.raises(ConfigError, match="text_dim=6"):
        task_embeddings(instructions, str(encoder), 512)
    table = task_embeddings(instructions, str(encoder), 6, tmp_path / "data")
    assert table.shape == (2, 6) and not np.allclose(table[0], table[1])
    [cached] = (tmp_path / "data" / "language").glob("*.npy")
    assert np.array_equal(np.load(cached), table)
    import ssilbench_libero.language as language

    def no_encoder(*args):
        raise AssertionError("the encoder was loaded again")

    monkeypatch.setattr(language, "clip_embeddings", no_encoder)
    assert np.array_equal(task_embeddings(instructions, str(encoder), 6, tmp_path / "data"), table)


def test_evaluation_episodes_interleave_tasks_and_play_in_waves():
    tasks = [BY_ID[FIRST.id], BY_ID[FOURTH.id]]
    table = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)
    env = EpisodeEnv(tasks, 6, 0, first_init_state=4, language=table, max_alive=4)
    assert env.task_index.tolist() == [0, 1, 0, 1, 0, 1]
    assert {k: v.tolist() for k, v in env.episode_groups.items()} == {
        FIRST.id: [0, 2, 4], FOURTH.id: [1, 3, 5]}  # fmt: skip
    # Task 0's episodes 0..2 start from its fixed initial states 4, 5, 6 (first_init_state).
    assert [(p.task.id, p.num_envs, p.first_init_state, p.env_offset) for p in env._parts] == [
        (FIRST.id, 3, 4, 0), (FOURTH.id, 3, 4, 0)]  # fmt: skip
    waves = []
    for wave in env.waves():  # simulators are built at a wave's first reset only
        waves.append([(p.task.id, p.num_envs, p.first_init_state, p.env_offset)
                      for p in wave._parts])  # fmt: skip
    # Episodes 0-3, then 4-5: the second wave's episodes are each task's third (index 2).
    assert waves == [
        [(FIRST.id, 2, 4, 0), (FOURTH.id, 2, 4, 0)],
        [(FIRST.id, 1, 6, 2), (FOURTH.id, 1, 6, 2)],
    ]
    single = EpisodeEnv(tasks, 3, 0, max_alive=8)
    assert list(single.waves()) == [single]  # all at once when they fit
