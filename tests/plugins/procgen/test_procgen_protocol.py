"""Procgen at the reference code's protocol by default, each of today's choices an option:
transitions across episode ends, the 80-chunk cap, fresh levels per evaluation, and a run
identity that tells the protocols apart."""

from __future__ import annotations

import numpy as np
import pytest

from ssilbench.api import DatasetError, TransitionStore
from ssilbench_procgen.environment import ProcgenEnvironment, ProcgenOptions
from ssilbench_procgen.games import MAX_DATA_CHUNKS
from ssilbench_procgen.protocol import AcrossEpisodeEnds
from ssilbench_procgen.vec_env import procgen_problem

from .test_procgen_data import GAME, TEST_DONE, TEST_SIZES, TRAIN_DONE, TRAIN_SIZES, write_split

PROCGEN_PROBLEM = procgen_problem()

needs_procgen = pytest.mark.skipif(PROCGEN_PROBLEM is not None, reason=str(PROCGEN_PROBLEM))

LEGACY = {"eval_levels": "fixed", "eval_counting": "first_per_env",
          "transitions": "within_episodes", "max_chunks": 0}  # fmt: skip


@pytest.fixture
def source(tmp_path):
    src = tmp_path / "lapo"
    write_split(src / GAME / "train", TRAIN_SIZES, TRAIN_DONE, seed=1)
    write_split(src / GAME / "test", TEST_SIZES, TEST_DONE, seed=2)
    return src


def _import(source, root, **options):
    return ProcgenEnvironment().import_dataset(
        source, root, [GAME], ProcgenOptions(**options), log=lambda _: None
    )


def test_the_defaults_are_the_reference_codes():
    options = ProcgenOptions()
    assert (options.eval_levels, options.eval_counting) == ("fresh", "first_to_finish")
    assert (options.transitions, options.max_chunks) == ("across_episodes", MAX_DATA_CHUNKS)
    spec = ProcgenEnvironment().load(GAME, options).spec
    assert (spec.eval_starts, spec.eval_counting) == ("fresh", "first_to_finish")
    legacy = ProcgenEnvironment().load(GAME, ProcgenOptions(**LEGACY)).spec
    assert (legacy.eval_starts, legacy.eval_counting) == ("fixed", "first_per_env")


def test_every_protocol_choice_changes_the_run_identity():
    """The options are in a run's spec as dumped, the evaluation protocol in its protocol
    fingerprint: each choice names other runs, and runs recorded before the options existed
    (options without these keys) are not mixed in."""
    default = ProcgenOptions().model_dump(mode="json")
    assert set(LEGACY) <= set(default)
    dumps = {str(sorted(ProcgenOptions(**{key: value}).model_dump(mode="json").items()))
             for key, value in LEGACY.items()}  # fmt: skip
    assert len(dumps | {str(sorted(default.items()))}) == len(LEGACY) + 1
    # The evaluation protocol is the spec's (what the core's protocol fingerprint hashes).
    environment = ProcgenEnvironment()
    protocols = {
        str(sorted(environment.load(GAME, ProcgenOptions(**choice)).spec.model_dump(
            mode="json").items()))
        for choice in ({}, {"eval_levels": "fixed"}, {"eval_counting": "first_per_env"},
                       {"eval_levels": "fixed", "eval_counting": "first_per_env"})
    }  # fmt: skip
    assert len(protocols) == 4


def test_transitions_cross_episode_ends_by_default_as_a_view(source, tmp_path):
    root = tmp_path / "data"
    train, _ = _import(source, root)
    task = ProcgenEnvironment().load(GAME, ProcgenOptions())
    store = task.dataset(root)
    assert isinstance(store, AcrossEpisodeEnds)
    # Every consecutive pair, episode ends included (the reference pairs each frame with the
    # next); nothing copied: the same memory maps as the store.
    assert store.transition_indices().tolist() == list(range(train.num_frames - 1))
    assert store.num_transitions == train.num_frames - 1 > train.num_transitions
    assert isinstance(store.obs, np.memmap)
    opened = TransitionStore.open(train.root, verify=False)
    view = AcrossEpisodeEnds.view(opened)
    assert view.obs is opened.obs and view.actions is opened.actions
    assert store.num_episodes == train.num_episodes  # episodes stay the store's
    # The option keeps the store's own transitions, inside episodes.
    inside = ProcgenEnvironment().load(GAME, ProcgenOptions(transitions="within_episodes"))
    kept = inside.dataset(root)
    assert type(kept) is TransitionStore
    assert kept.transition_indices().tolist() == train.transition_indices().tolist()


def test_the_test_set_is_drawn_from_the_transitions_the_option_names(source, tmp_path):
    root = tmp_path / "data"
    _, test = _import(source, root)
    task = ProcgenEnvironment().load(GAME, ProcgenOptions(test_transitions=test.num_frames - 1))
    task.dataset(root)
    test_set = task.test_set()
    assert len(test_set.obs) == test.num_frames - 1 > test.num_transitions


def test_import_copies_at_most_max_chunks_in_numbered_order(source, tmp_path):
    capped, _ = _import(source, tmp_path / "capped", max_chunks=2)
    producer = capped.manifest["producer"]
    assert producer["chunks"] == ["0.npz", "1.npz"]
    assert (producer["chunks_found"], producer["max_chunks"]) == (3, 2)
    assert capped.num_frames <= sum(TRAIN_SIZES[:2])
    whole, _ = _import(source, tmp_path / "whole")  # the default cap, 80, above 3 chunks
    assert whole.manifest["producer"]["chunks"] == ["0.npz", "1.npz", "2.npz"]
    assert whole.manifest["producer"]["max_chunks"] == MAX_DATA_CHUNKS


def test_a_dataset_holding_other_chunks_than_the_cap_reads_is_refused(source, tmp_path):
    root = tmp_path / "data"
    _import(source, root, max_chunks=2)
    with pytest.raises(DatasetError) as refused:
        ProcgenEnvironment().load(GAME, ProcgenOptions()).dataset(root)
    message = str(refused.value)
    assert "holds the first 2 of the 3 chunks" in message and "reads 3" in message
    assert "-o max_chunks=80 --replace" in message and "-o max_chunks=2" in message
    # Run on what it holds, as the message says; or with every chunk after a full import.
    assert ProcgenEnvironment().load(GAME, ProcgenOptions(max_chunks=2)).dataset(root)
    whole = tmp_path / "whole"
    _import(source, whole, max_chunks=0)
    assert ProcgenEnvironment().load(GAME, ProcgenOptions(max_chunks=0)).dataset(whole)
    with pytest.raises(DatasetError, match="reads 1"):
        ProcgenEnvironment().load(GAME, ProcgenOptions(max_chunks=1)).dataset(whole)


class _Seen(Exception):
    """Raised by the recording policy once it has the evaluation's first frames."""


def _first_frames(evaluator, step: int):
    """The first observations an evaluation at ``step`` shows its policy (the rest of the
    evaluation is not played: the frames tell the levels apart)."""
    import torch

    from ssilbench.api import Policy

    class Recording(Policy):
        def probs(self, obs):
            raise _Seen(obs.clone())

    with pytest.raises(_Seen) as seen:
        evaluator(Recording(), step)
    frames = seen.value.args[0]
    assert isinstance(frames, torch.Tensor)
    return frames


@needs_procgen
def test_fresh_levels_at_every_evaluation_drawn_from_the_run_seed_and_step():
    import torch

    from ssilbench.testing import Evaluator

    task = ProcgenEnvironment().load("bigfish", ProcgenOptions())
    task.spec = task.spec.model_copy(update={"eval_episodes": 4})
    first = {}
    for run_seed, steps in ((11, (500, 1000, 500)), (22, (500,))):
        evaluator = Evaluator(task, torch.device("cpu"), run_seed=run_seed)
        try:
            for step in steps:
                frames = _first_frames(evaluator, step)
                if (run_seed, step) in first:  # the same evaluation replays exactly
                    assert torch.equal(first[run_seed, step], frames)
                first[run_seed, step] = frames
        finally:
            evaluator.close()
    assert not torch.equal(first[11, 500], first[11, 1000])  # new levels per evaluation
    assert not torch.equal(first[11, 500], first[22, 500])  # and per run seed
    fixed = ProcgenEnvironment().load("bigfish", ProcgenOptions(eval_levels="fixed"))
    fixed.spec = fixed.spec.model_copy(update={"eval_episodes": 4})
    evaluator = Evaluator(fixed, torch.device("cpu"), run_seed=11)
    try:
        assert torch.equal(_first_frames(evaluator, 500), _first_frames(evaluator, 1000))
    finally:
        evaluator.close()
