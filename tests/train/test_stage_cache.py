"""Reuse of trained stages (ssilbench.train.memo): keys, restores, damaged entries, garbage
collection, and the CLI around them. The leases that train a key once across processes and
machines are tested in test_stage_cache_leases.py."""

from __future__ import annotations

import json
import os
import sqlite3
import time

import pytest
import torch
from torch import nn

from ssilbench.api import Stage
from ssilbench.stages import StagePlan
from ssilbench.train.memo import StageCache, reusable
from ssilbench.train.supervised import fit_classifier


def problem(seed: int = 0, n: int = 30):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=g)
    y = (x[:, 0] > 0).long()
    torch.manual_seed(7)
    return nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 2)), x, y


def stage(cache, steps=40, eval_every=1000, policy=None):
    evaluated: list[int] = []
    plan = StagePlan([Stage("fit", steps, policy=True)], eval_every, evaluate=lambda p: None,
                     cache=cache)  # fmt: skip
    plan.evaluate = lambda p: evaluated.append(plan.global_step)
    return plan.stage("fit", policy=policy), evaluated, plan


def test_a_second_identical_stage_is_restored_not_trained(tmp_path):
    cache = StageCache(tmp_path)
    net, x, y = problem()
    budget, _, _ = stage(cache, policy=net)
    fit_classifier(net, x, y, budget, lr=0.05, batch_size=8, seed=0)
    again, x2, y2 = problem()
    budget2, evaluated, plan = stage(cache, policy=again)
    calls = []
    again.register_forward_hook(lambda *a: calls.append(1))
    fit_classifier(again, x2, y2, budget2, lr=0.05, batch_size=8, seed=0)
    assert budget2.reused and budget2.used == 40 and plan.global_step == 40
    assert evaluated == [40]  # the one evaluation at the stage's end
    assert calls == []  # no forward pass: nothing was trained
    for a, b in zip(net.parameters(), again.parameters(), strict=True):
        assert torch.equal(a, b)
    assert plan.check_spent()["fit"]["reused"] == budget2.reused


@pytest.mark.parametrize("change", ["data", "labels", "lr", "seed", "batch", "steps", "weights"])
def test_any_input_of_the_stage_changes_the_key(tmp_path, change):
    cache = StageCache(tmp_path)
    net, x, y = problem()
    fit_classifier(net, x, y, stage(cache, policy=net)[0], lr=0.05, batch_size=8, seed=0)
    net2, x2, y2 = problem()
    kw = dict(lr=0.05, batch_size=8, seed=0)
    steps = 40
    if change == "data":
        x2 = x2 + 1e-6
    elif change == "labels":
        y2 = 1 - y2
    elif change in ("lr", "seed", "batch"):
        kw[{"lr": "lr", "seed": "seed", "batch": "batch_size"}[change]] = {
            "lr": 0.01,
            "seed": 1,
            "batch": 4,
        }[change]
    elif change == "steps":
        steps = 41
    else:
        with torch.no_grad():
            net2[0].weight[0, 0] += 1e-6
    budget2, _, _ = stage(cache, steps=steps, policy=net2)
    fit_classifier(net2, x2, y2, budget2, **kw)
    assert budget2.reused is None


def test_a_policy_stage_evaluated_inside_is_never_reused(tmp_path):
    cache = StageCache(tmp_path)
    net, _, _ = problem()
    assert reusable(stage(cache, steps=40, eval_every=10, policy=net)[0]) is None
    assert reusable(stage(cache, steps=40, eval_every=40, policy=net)[0]) is cache
    assert reusable(stage(None, steps=40, eval_every=40, policy=net)[0]) is None


def test_a_damaged_entry_is_a_miss_and_is_rewritten(tmp_path):
    cache = StageCache(tmp_path)
    net, x, y = problem()
    fit_classifier(net, x, y, stage(cache, policy=net)[0], lr=0.05, batch_size=8, seed=0)
    [entry] = cache.entries()
    entry.path.write_bytes(b"not a checkpoint")
    net2, x2, y2 = problem()
    budget2, _, _ = stage(cache, policy=net2)
    fit_classifier(net2, x2, y2, budget2, lr=0.05, batch_size=8, seed=0)
    assert budget2.reused is None and budget2.used == 40
    [entry] = cache.entries()
    assert entry.meta["stage"] == "fit"


def test_gc_deletes_only_entries_unused_for_long_enough(tmp_path):
    cache = StageCache(tmp_path)
    for seed in (0, 1):
        net, x, y = problem(seed)
        fit_classifier(net, x, y, stage(cache, policy=net)[0], lr=0.05, batch_size=8, seed=seed)
    old, new = cache.entries()
    past = time.time() - 3 * 86400
    os.utime(old.path, (past, past))
    assert [e.key for e in cache.gc(2 * 86400)] == [old.key]
    assert [e.key for e in cache.entries()] == [new.key]
    assert len(cache.gc(0)) == 1 and cache.entries() == []


def test_bc_is_trained_once_across_no_op_probabilities(cli):
    # BC reads (s, a) only: the no-op probability changes s' and nothing BC sees.
    common = ["--method", "bc,vm_idm", "--env", "maze:10x10", "-o", "state=position",
              "-o", "data=states", "-c", "arch=lc", "-c", "vm_idm.video_model=ground_truth",
              "--budgets", "0.5", "--seeds", "0", "--steps", "300", "--eval-every", "300",
              "--no-rollouts", "-q"]  # fmt: skip
    for noop in ("0.0", "0.5"):
        out = cli.run(*common, "-o", f"noop={noop}")
        assert out.returncode == 0, out.stderr
    with sqlite3.connect(cli.results / "results.sqlite") as db:
        rows = db.execute("select method, env_label, stages, metrics from runs").fetchall()
    by = {(m, "noop=0.5" in e): (json.loads(s), json.loads(x)) for m, e, s, x in rows}
    assert "reused" not in by[("bc", False)][0]["policy"]
    assert by[("bc", True)][0]["policy"]["reused"]
    assert by[("bc", True)][1]["test_accuracy"] == by[("bc", False)][1]["test_accuracy"]
    # The IDM sees s', which the no-op probability changes: trained again.
    assert "reused" not in by[("vm_idm", True)][0]["idm"]
    listed = cli("cache", "ls", "--results", str(cli.results))
    assert listed.returncode == 0 and "3 stage(s)" in listed.stdout, listed.stdout
    gone = cli("cache", "gc", "--results", str(cli.results))
    assert gone.returncode == 0 and "deleted 3 stage(s)" in gone.stdout
    # --no-cache trains again even where an entry exists.
    assert cli.run(*common, "-o", "noop=0.25").returncode == 0
    out = cli.run(*common, "-o", "noop=0.75", "--no-cache")
    assert out.returncode == 0, out.stderr
    with sqlite3.connect(cli.results / "results.sqlite") as db:
        rows = db.execute("select env_label, stages from runs where method='bc'").fetchall()
    stages = {env: json.loads(s)["policy"] for env, s in rows}
    assert "reused" not in stages["maze:10x10 (data=states, noop=0.75)"]


def test_a_scalar_tensor_has_a_digest_and_matrices_keep_theirs():
    import hashlib

    from ssilbench.train.memo import _digest_tensor

    def digest(t: torch.Tensor) -> str:
        h = hashlib.sha256()
        _digest_tensor(h, t)
        return h.hexdigest()

    assert digest(torch.tensor(3)) != digest(torch.tensor(4))
    m = torch.arange(6.0).view(2, 3)
    expected = hashlib.sha256(b"torch.float32|(2, 3)|" + m.numpy().tobytes()).hexdigest()
    assert digest(m) == expected


def test_a_stage_removed_by_a_concurrent_gc_after_it_was_read_serves_its_reader(
    tmp_path, monkeypatch
):
    from ssilbench.train import memo

    cache = StageCache(tmp_path)
    net, x, y = problem()
    fit_classifier(net, x, y, stage(cache, policy=net)[0], lr=0.05, batch_size=8, seed=0)
    [entry] = cache.entries()
    real = torch.load

    def load_then_gc(path, *args, **kwargs):
        loaded = real(path, *args, **kwargs)
        assert cache.gc(0)  # a `cache gc` beside the sweep removes it right after the read
        return loaded

    monkeypatch.setattr(memo.torch, "load", load_then_gc)
    net2 = problem()[0]
    budget = stage(cache, policy=net2)[0]
    assert cache.restore(entry.key, net2, budget)
    assert budget.reused == entry.key[:12] and cache.entries() == []
    assert all(torch.equal(a, b) for a, b in zip(net.parameters(), net2.parameters(),
                                                  strict=True))  # fmt: skip


def test_gc_spares_an_entry_whose_lease_is_held(tmp_path, fast_leases):
    cache = StageCache(tmp_path)
    net, x, y = problem()
    fit_classifier(net, x, y, stage(cache, policy=net)[0], lr=0.05, batch_size=8, seed=0)
    [entry] = cache.entries()
    with cache.lease(entry.key):  # being rewritten, or read under its lease, right now
        assert cache.gc(0) == []
    assert [e.key for e in cache.gc(0)] == [entry.key]
