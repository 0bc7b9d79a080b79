"""Minibatches from the store (ssilbench.data.batches): the same numbers whether a view is
held on the device or read per minibatch, read ahead or not; fingerprints; labels computed
once (ssilbench.train.artifacts)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ssilbench.data import batches
from ssilbench.data.batches import (
    ArgmaxRows,
    ArrayRows,
    RowReader,
    TransitionFrames,
)
from ssilbench.data.datasets import TransitionStore
from ssilbench.data.split import split
from ssilbench.data.tensors import as_model_input, pair
from ssilbench.planning.plan import build_plan
from ssilbench.plugins import load_plugins
from ssilbench.runner.worker import RunStorage, execute
from ssilbench.runs.spec import Sweep
from ssilbench.train.loop import BatchSampler
from ssilbench.train.memo import StageCache
from ssilbench.train.supervised import label_rows

CPU = torch.device("cpu")


def store(tmp_path, name="s", frames=300, shape=(3, 8, 8), seed=0) -> TransitionStore:
    rng = np.random.Generator(np.random.PCG64(seed))
    obs = rng.integers(0, 256, size=(frames, *shape), dtype=np.uint8)
    ends = np.array([37, 120, 121 + 60, frames])
    return TransitionStore.write(tmp_path / name, obs, rng.integers(0, 5, size=frames),
                                 np.zeros(frames, np.float32), ends, {"test": True})  # fmt: skip


def test_positioned_reads_equal_indexing_the_array(tmp_path):
    s = store(tmp_path)
    reader = RowReader(s.obs)
    assert reader.path is not None, "a store's frames are read with positioned reads"
    starts = np.array([5, 6, 7, 8, 40, 2, 3, 298, 0])  # runs of consecutive rows and singles
    for span in (1, 2):
        got = reader.read(starts, span)
        want = np.asarray(s.obs)[starts[:, None] + np.arange(span)]
        assert np.array_equal(got, want[:, 0] if span == 1 else want)
    assert RowReader(np.asarray(s.obs)).path is None  # an in-memory array is indexed
    assert RowReader(s.obs[10:]).path is None  # a slice of a mapping is not its file
    with pytest.raises(IndexError):
        reader.read(np.array([299]), 2)


@pytest.mark.parametrize("kind", ["obs", "next_obs", "pair", "delta"])
def test_resident_and_streamed_views_give_the_same_inputs(tmp_path, kind):
    s = store(tmp_path)
    labeled, unlabeled = split(s, "50", seed=1)
    for view in (labeled, unlabeled):
        held = TransitionFrames(view, CPU, resident=True).inputs(kind)
        read = TransitionFrames(view, CPU, resident=False).inputs(kind)
        obs = as_model_input(np.asarray(s.obs)[view.index])
        nxt = as_model_input(np.asarray(s.obs)[view.index + 1])
        want = {"obs": obs, "next_obs": nxt, "pair": pair(obs, nxt), "delta": nxt - obs}[kind]
        rows = np.random.default_rng(0).permutation(len(view))[:17]
        assert torch.equal(held[rows], want[rows])
        assert torch.equal(read[rows], want[rows])
        assert torch.equal(read[slice(None)], want)
        assert held.fingerprint == read.fingerprint


def test_reading_ahead_gives_the_rows_asked_for(tmp_path):
    _, unlabeled = split(store(tmp_path), "all", seed=0)
    frames = TransitionFrames(unlabeled, CPU, resident=False)
    pairs = frames.inputs("pair")
    first, second = np.array([4, 9, 100]), np.array([7, 7, 2])
    pairs.prefetch(second)  # read ahead rows that are not the next ones asked for
    a = pairs[first]
    b = pairs[second]
    held = TransitionFrames(unlabeled, CPU, resident=True).inputs("pair")
    assert torch.equal(a, held[first]) and torch.equal(b, held[second])
    frames.close()


def test_a_peeking_sampler_draws_the_same_batches():
    plain, peeking = BatchSampler(10, 4, seed=3), BatchSampler(10, 4, seed=3)
    drawn, peeked = [], []
    for _ in range(12):
        drawn.append(plain.next())
        ahead = peeking.peek()
        got = peeking.next()
        assert np.array_equal(ahead, got)
        peeked.append(got)
    assert all(np.array_equal(a, b) for a, b in zip(drawn, peeked, strict=True))


def test_fingerprints_follow_content_when_small_and_the_store_when_large(tmp_path, monkeypatch):
    a = split(store(tmp_path, "a"), "all", 0)[1]
    b = split(store(tmp_path, "b"), "all", 0)[1]  # same frames in another store
    c = split(store(tmp_path, "c", seed=1), "all", 0)[1]
    fp = [TransitionFrames(v, CPU).fingerprint for v in (a, b, c)]
    assert fp[0] == fp[1] != fp[2]
    monkeypatch.setattr(batches, "HASH_BYTES", 0)
    big = [TransitionFrames(v, CPU, resident=False).fingerprint for v in (a, b, c)]
    assert big[0] == big[1] != big[2]  # the store's recorded sha256 of equal files is equal
    assert big[0] != fp[0]
    labeled = split(store(tmp_path, "a2"), "50", 0)[0]
    assert TransitionFrames(labeled, CPU, resident=False).fingerprint != big[0]


def test_large_views_are_streamed_and_small_ones_held(tmp_path, monkeypatch):
    _, unlabeled = split(store(tmp_path), "all", 0)
    assert TransitionFrames(unlabeled, CPU).resident
    monkeypatch.setattr(batches, "RESIDENT_BYTES", 1024)
    assert not TransitionFrames(unlabeled, CPU).resident


def test_labels_are_computed_once_per_network_and_data(tmp_path):
    _, unlabeled = split(store(tmp_path), "all", 0)
    inputs = TransitionFrames(unlabeled, CPU).inputs("pair")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(6 * 64, 5))
    calls = []
    net.register_forward_hook(lambda *a: calls.append(1))
    cache = StageCache(tmp_path / "cache")
    first = label_rows(cache, net, inputs, CPU)
    seen = len(calls)
    again = label_rows(cache, net, inputs, CPU)
    assert seen > 0 and len(calls) == seen  # the second call read the kept labels
    assert torch.equal(first[slice(None)], again[slice(None)])
    assert torch.allclose(first[slice(None)].sum(-1), torch.ones(len(inputs)))
    streamed = ArrayRows(np.asarray(first[slice(None)]), CPU, "x", resident=False)
    assert torch.equal(ArgmaxRows(streamed)[np.array([3, 1])], first[np.array([3, 1])].argmax(-1))
    uncached = label_rows(None, net, inputs, CPU)
    assert torch.equal(uncached[slice(None)], first[slice(None)])
    with torch.no_grad():
        net[1].weight.add_(1.0)  # another network: other labels, computed again
    label_rows(cache, net, inputs, CPU)
    assert len(calls) > seen


PLUGINS = load_plugins()


def _image_run(data_root, method, storage=None):
    sweep = Sweep(methods=[method], envs=["maze:10x10"], budgets=["64"], seeds=[2], steps=40,
                  options={"state": "image"}, config={"arch": "cnn1"}, eval_every=20)  # fmt: skip
    plan = build_plan(PLUGINS, sweep, data_root)
    [spec] = plan.runs
    return execute(spec, plan.method_of(spec), plan.task_of(spec), PLUGINS, CPU, storage)


@pytest.mark.parametrize("method", ["bc", "idm_labeling", "vm_idm"])
def test_a_run_gives_the_same_numbers_from_the_device_or_from_the_store(
    tmp_path, monkeypatch, method
):
    held = _image_run(tmp_path / "data", method)
    monkeypatch.setattr(batches, "RESIDENT_BYTES", 0)  # every view read per minibatch
    streamed = _image_run(tmp_path / "data", method)
    assert held.timeline == streamed.timeline
    assert held.metrics == streamed.metrics


def test_a_rerun_reads_its_idms_labels_instead_of_labelling_again(tmp_path, monkeypatch):
    from ssilbench.train import artifacts

    written = []
    real = artifacts._write
    monkeypatch.setattr(artifacts, "_write", lambda *a: (written.append(1), real(*a))[1])
    storage = RunStorage(cache_root=tmp_path / "cache")
    first = _image_run(tmp_path / "data", "idm_labeling", storage)
    assert written == [1]
    second = _image_run(tmp_path / "data", "idm_labeling", storage)
    assert written == [1]  # the IDM came from the cache, and so did its labels
    assert second.timeline == first.timeline


def test_views_held_on_the_device_keep_no_file_open(tmp_path):
    import os
    import pickle

    labeled, unlabeled = split(store(tmp_path), "50", 0)
    before = len(os.listdir("/proc/self/fd"))
    held = [TransitionFrames(labeled, CPU) for _ in range(50)]  # as in stacked training
    assert all(f.fingerprint for f in held)
    assert len(os.listdir("/proc/self/fd")) == before
    streamed = TransitionFrames(unlabeled, CPU, resident=False)
    rows = np.array([3, 4, 90])
    first = streamed.inputs("pair")[rows]
    copy = pickle.loads(pickle.dumps(streamed.reader))  # a reader crosses processes
    assert np.array_equal(copy.read(unlabeled.index[rows], 2), streamed.reader.read(
        unlabeled.index[rows], 2))  # fmt: skip
    assert torch.equal(first, streamed.inputs("pair")[rows])
