"""Leases of the stage cache (ssilbench.train.leases): a stage key is trained once across
concurrent processes and machines. A lease left by a dead process or a silent host is taken
over, a live holder is waited for (its clock ahead of this one's included), `cache ls` and
`cache gc` show and remove stale leases, and a run says whom it waits for."""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
import subprocess
import sys
import threading
import time

import pytest
import torch
from click.testing import CliRunner
from torch import nn

from ssilbench.api import Stage
from ssilbench.cli import cli as ssilbench_cli
from ssilbench.stages import StagePlan
from ssilbench.train import leases
from ssilbench.train.memo import StageCache, reuse_or_train

KEY = "ab" * 32
STEPS = 25


def plain_stage(cache):
    """A stage that is not evaluated inside, so that its result may be reused."""
    plan = StagePlan([Stage("fit", STEPS)], 1000, evaluate=lambda p: None, cache=cache)
    return plan.stage("fit")


def ticking(budget, net, value: float, marks: list | None = None):
    """A train function: spends the stage's steps and sets the weights to ``value``."""

    def train() -> None:
        if marks is not None:
            marks.append(value)
        with torch.no_grad():
            net.weight.fill_(value)
        for _ in range(STEPS):
            budget.tick()

    return train


def fresh_net() -> nn.Linear:
    torch.manual_seed(0)
    return nn.Linear(3, 2)


def foreign_lease(cache, key=KEY, *, host="elsewhere", pid=4242, heartbeat_age=0.0, **extra):
    """A lease file as another process (here or on another machine) leaves it."""
    path = cache.root / key[:2] / f"{key}{leases.LEASE_SUFFIX}"
    path.parent.mkdir(parents=True, exist_ok=True)
    holder = {"host": host, "pid": pid, "started": time.time() - heartbeat_age,
              "token": "theirs", **extra}  # fmt: skip
    path.write_text(json.dumps(holder))
    beat = time.time() - heartbeat_age
    os.utime(path, (beat, beat))
    return path


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _race(root, marks, barrier, results, poll_s):
    """One of several processes that need the same stage at the same time."""
    leases.LEASE_POLL_S = poll_s
    budget = plain_stage(StageCache(root))
    net = fresh_net()
    messages: list[str] = []

    def train() -> None:
        time.sleep(0.6)  # long enough for every other process to find the key leased
        with open(marks, "a") as fh:
            fh.write(f"{os.getpid()}\n")
        ticking(budget, net, float(os.getpid()))()

    barrier.wait(timeout=60)
    reused = reuse_or_train("race", net, [], {"lr": 0.1}, budget, torch.device("cpu"), train,
                            log=messages.append)  # fmt: skip
    results.put((os.getpid(), reused, budget.used, budget.reused, net.weight[0, 0].item(),
                 messages))  # fmt: skip


def test_concurrent_processes_train_a_stage_once(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(3), ctx.Queue()
    marks = tmp_path / "trained.txt"
    procs = [ctx.Process(target=_race, args=(tmp_path / "cache", marks, barrier, results, 0.05))
             for _ in range(3)]  # fmt: skip
    for p in procs:
        p.start()
    out = {pid: rest for pid, *rest in (results.get(timeout=120) for _ in procs)}
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    [trainer] = [int(line) for line in marks.read_text().split()]  # exactly one trained
    reused, used, reused_key, weight, messages = out[trainer]
    assert (reused, used, reused_key, weight, messages) == (False, STEPS, None, trainer, [])
    waiters = [pid for pid in out if pid != trainer]
    assert len(waiters) == 2
    for pid in waiters:
        reused, used, reused_key, weight, messages = out[pid]
        assert reused is True and reused_key  # restored, with the trainer's step accounting
        assert used == STEPS and weight == float(trainer)
        [said] = messages  # a waiting worker says once whom it waits for
        assert "waiting" in said and f"{socket.gethostname()} pid {trainer}" in said
    cache = StageCache(tmp_path / "cache")
    assert len(cache.entries()) == 1 and cache.leases() == []


def test_a_lease_left_by_a_dead_process_on_this_host_is_taken_over(
    tmp_path, fast_leases, monkeypatch
):
    monkeypatch.setattr(leases, "LEASE_STALE_S", 60.0)  # its heartbeat is fresh
    cache = StageCache(tmp_path)
    foreign_lease(cache, host=socket.gethostname(), pid=dead_pid(), pidns=leases._pidns())
    budget, net, messages, marks = plain_stage(cache), fresh_net(), [], []
    started = time.monotonic()
    reused = cache.once(KEY, net, budget, ticking(budget, net, 1.0, marks), log=messages.append)
    assert time.monotonic() - started < 10  # at once: a dead pid needs no timeout
    assert reused is False and marks == [1.0] and budget.used == STEPS
    assert any("stale lease" in m and "process is gone" in m for m in messages), messages
    assert cache.leases() == [] and len(cache.entries()) == 1


def test_a_lease_of_another_host_is_broken_only_when_its_heartbeat_is_old(
    tmp_path, fast_leases, monkeypatch
):
    monkeypatch.setattr(leases, "LEASE_STALE_S", 2.0)
    cache, messages = StageCache(tmp_path), []
    foreign_lease(cache, heartbeat_age=5.0)
    with cache.lease(KEY, wait=False, log=messages.append) as held:
        assert held is not None and held.owned()
    assert any("elsewhere pid 4242" in m and "no heartbeat" in m for m in messages), messages

    path, messages = foreign_lease(cache), []
    assert cache.acquire(KEY, wait=False, log=messages.append) is None
    done = threading.Event()

    def other_host() -> None:  # beats for longer than the timeout, then releases
        until = time.monotonic() + 2.5
        while time.monotonic() < until:
            os.utime(path)
            time.sleep(0.05)
        path.unlink()
        done.set()

    threading.Thread(target=other_host, daemon=True).start()
    with cache.lease(KEY, log=messages.append) as held:
        assert done.is_set()  # waited for the release, not broken on a timeout
        assert held.owned()
    [said] = messages
    assert "waiting" in said and "elsewhere pid 4242" in said


def test_a_holder_that_raises_releases_its_lease_and_a_waiter_trains(tmp_path, fast_leases):
    cache = StageCache(tmp_path)
    holding, errors = threading.Event(), []

    def failing() -> None:
        holding.set()
        time.sleep(0.3)
        raise RuntimeError("out of memory")

    def holder() -> None:
        try:
            cache.once(KEY, fresh_net(), plain_stage(cache), failing)
        except RuntimeError as exc:
            errors.append(exc)

    thread = threading.Thread(target=holder)
    thread.start()
    assert holding.wait(10)
    budget, net, messages, marks = plain_stage(cache), fresh_net(), [], []
    reused = cache.once(KEY, net, budget, ticking(budget, net, 2.0, marks), log=messages.append)
    thread.join()
    assert len(errors) == 1 and reused is False and marks == [2.0]
    assert [m for m in messages if "waiting" in m]  # it did wait for the failing holder
    assert cache.leases() == [] and len(cache.entries()) == 1


def test_a_held_lease_is_refused_without_waiting_and_is_not_an_entry(tmp_path, fast_leases):
    cache = StageCache(tmp_path)
    net = fresh_net()
    budget = plain_stage(cache)
    ticking(budget, net, 3.0)()
    cache.save("cd" * 32, net, budget)
    with cache.lease(KEY) as held:
        assert held is not None
        assert cache.acquire(KEY, wait=False) is None
        with pytest.raises(RuntimeError, match="wait for itself"):
            cache.acquire(KEY)
        [info] = cache.leases()
        assert (info.key, info.host, info.pid) == (KEY, socket.gethostname(), os.getpid())
        assert not info.stale()
        assert [e.key for e in cache.entries()] == ["cd" * 32]
    assert cache.leases() == []
    again = cache.acquire(KEY, wait=False)
    assert again is not None
    again.release()


def test_the_heartbeat_keeps_a_held_lease_fresh(tmp_path, fast_leases):
    cache = StageCache(tmp_path)
    with cache.lease(KEY) as held:
        past = time.time() - 100
        os.utime(held.path, (past, past))
        deadline = time.monotonic() + 5
        while held.path.stat().st_mtime < past + 50 and time.monotonic() < deadline:
            time.sleep(0.02)
        [info] = cache.leases()
        assert not info.stale()


def test_release_spares_a_lease_another_process_took_over(tmp_path, fast_leases):
    cache = StageCache(tmp_path)
    held = cache.acquire(KEY)
    path = held.path
    foreign_lease(cache)  # this one looked stale to another process, which took over
    held.release()
    [info] = cache.leases()
    assert info.token == "theirs" and path.exists()


def test_waiters_breaking_one_stale_lease_get_one_lease(tmp_path, fast_leases):
    # Many rounds: the race it guards against (one breaker's check leaving the key free
    # for a third) shows in a few percent of rounds only.
    cache = StageCache(tmp_path)
    for _ in range(25):
        foreign_lease(cache, heartbeat_age=5.0)
        barrier, got = threading.Barrier(6), []

        def waiter(barrier: threading.Barrier = barrier, got: list = got) -> None:
            barrier.wait()
            got.append(cache.acquire(KEY, wait=False, log=lambda m: None))

        threads = [threading.Thread(target=waiter) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        [lease] = [g for g in got if g is not None]
        assert lease.owned()
        lease.release()
        assert cache.leases() == []


def test_breaking_a_stale_lease_spares_one_created_since(tmp_path, fast_leases, monkeypatch):
    cache = StageCache(tmp_path)
    foreign_lease(cache, heartbeat_age=5.0)
    [seen] = cache.leases()
    assert seen.stale()
    # Between reading it and removing it, another process broke it and took the key.
    seen.path.unlink()
    with cache.lease(KEY) as held:
        monkeypatch.setattr(cache, "leases", lambda: [seen])
        assert cache.remove_stale_leases() == []
        assert held.owned()


def test_gc_removes_stale_leases_and_keeps_live_ones(tmp_path, fast_leases):
    cache = StageCache(tmp_path)
    stale_key = "ef" * 32
    foreign_lease(cache, stale_key, heartbeat_age=5.0)
    with cache.lease(KEY):
        assert [info.key for info in cache.leases()] == [KEY, stale_key]
        assert cache.gc(10**9) == []
        assert [info.key for info in cache.leases()] == [KEY]
    assert cache.leases() == []


def test_cache_ls_shows_stages_being_trained_and_gc_removes_stale_leases(tmp_path, fast_leases):
    cache, runner = StageCache(tmp_path / "cache"), CliRunner()
    stale_key = "ef" * 32
    foreign_lease(cache, stale_key, heartbeat_age=5.0)
    with cache.lease(KEY):
        listed = runner.invoke(ssilbench_cli, ["cache", "ls", "--results", str(tmp_path)])
        assert listed.exit_code == 0, listed.output
        lines = listed.output.splitlines()
        assert lines[0].startswith("0 stage(s)")
        [live] = [line for line in lines if line.startswith(KEY[:12])]
        assert f"{socket.gethostname()} pid {os.getpid()}" in live and "stale" not in live
        [stale] = [line for line in lines if line.startswith(stale_key[:12])]
        assert "elsewhere pid 4242" in stale and "stale: no heartbeat" in stale
        assert "1 stage(s) being trained, 1 stale lease(s)" in listed.output
        gone = runner.invoke(ssilbench_cli, ["cache", "gc", "--results", str(tmp_path)])
        assert gone.exit_code == 0 and "and 1 stale lease(s)" in gone.output, gone.output
        assert [info.key for info in cache.leases()] == [KEY]


def test_leases_work_on_a_file_system_without_hard_links(tmp_path, fast_leases, monkeypatch):
    def no_links(*args, **kwargs):
        raise PermissionError("hard links are not supported here")

    monkeypatch.setattr(os, "link", no_links)
    cache = StageCache(tmp_path)
    with cache.lease(KEY) as held:
        assert held is not None and held.owned()
        assert cache.acquire(KEY, wait=False) is None
    assert cache.leases() == []
    foreign_lease(cache, heartbeat_age=5.0)
    with cache.lease(KEY, wait=False, log=lambda m: None) as held:
        assert held is not None and held.owned()
    assert cache.leases() == []


def test_a_lease_whose_heartbeat_is_ahead_of_this_clock_is_taken_over_once_watched_still(
    tmp_path, fast_leases
):
    cache, messages = StageCache(tmp_path), []
    foreign_lease(cache, heartbeat_age=-86400.0)  # its host's clock is a day ahead
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(cache.acquire(KEY, log=messages.append)))
    waiter.start()
    waiter.join(timeout=20)
    assert not waiter.is_alive(), "a heartbeat a day ahead blocked the waiter"
    [lease] = got
    assert lease.owned()
    lease.release()
    [broke] = [m for m in messages if "stale lease" in m]
    assert "has not moved" in broke and "ahead of this host's clock" in broke, messages


def test_a_live_holder_whose_clock_is_ahead_is_waited_for(tmp_path, fast_leases):
    cache, messages = StageCache(tmp_path), []
    path = foreign_lease(cache, heartbeat_age=-86400.0)
    done = threading.Event()

    def other_host() -> None:  # beats, a day ahead, for longer than the limit; then releases
        until = time.monotonic() + 1.5
        while time.monotonic() < until:
            beat = time.time() + 86400
            os.utime(path, (beat, beat))
            time.sleep(0.05)
        path.unlink()
        done.set()

    threading.Thread(target=other_host, daemon=True).start()
    with cache.lease(KEY, log=messages.append) as held:
        assert done.is_set() and held.owned()  # waited for the release, not broken
    assert not [m for m in messages if "stale lease" in m], messages


def test_cache_gc_stale_leases_removes_dead_leases_ahead_of_the_clock_and_keeps_live_ones(
    tmp_path, fast_leases
):
    cache, runner = StageCache(tmp_path / "cache"), CliRunner()
    dead, live = "ef" * 32, KEY
    foreign_lease(cache, dead, heartbeat_age=-86400.0)
    path = foreign_lease(cache, live, heartbeat_age=-86400.0)
    beating = threading.Event()

    def holder() -> None:
        while not beating.is_set():
            beat = time.time() + 86400
            os.utime(path, (beat, beat))
            time.sleep(0.05)

    threading.Thread(target=holder, daemon=True).start()
    try:
        plain = runner.invoke(ssilbench_cli, ["cache", "gc", "--results", str(tmp_path)])
        assert plain.exit_code == 0 and "--stale-leases" in plain.output, plain.output
        assert len(cache.leases()) == 2  # age says nothing of these two: kept
        out = runner.invoke(ssilbench_cli, ["cache", "gc", "--stale-leases", "--results",
                                            str(tmp_path)])  # fmt: skip
    finally:
        beating.set()
    assert out.exit_code == 0, out.output
    assert "removed 1 stale lease(s); 1 left" in out.output, out.output
    assert [info.key for info in cache.leases()] == [live]


def test_a_run_says_whom_it_waits_for_and_what_it_labels(tmp_path, fast_leases):
    """What the progress display shows between a run's steps: waiting for a stage another
    process trains (with that holder), and labelling rows (only when they are computed)."""
    from ssilbench.train.supervised import label_rows

    cache, said = StageCache(tmp_path), []
    cache.on_phase = lambda *phase: said.append(phase)
    budget, net = plain_stage(cache), fresh_net()
    key = cache.key("fit", net, [], {"steps": STEPS}, torch.device("cpu"))
    path = foreign_lease(cache, key)
    threading.Timer(0.3, path.unlink).start()  # the holder gives up; this run trains it
    assert cache.once(key, net, budget, ticking(budget, net, 0.5)) is False
    assert said == [("waiting", "fit", {"host": "elsewhere", "pid": 4242})]

    said.clear()
    rows = torch.randn(10, 3)
    first = label_rows(cache, net, rows, torch.device("cpu"))
    assert said == [("labelling", "10 rows", None)]
    again = label_rows(cache, net, rows, torch.device("cpu"))  # read from the cache: silent
    assert len(said) == 1 and torch.equal(first[0:10], again[0:10])
