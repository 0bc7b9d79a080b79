"""``ssilbench cache``: the trained stages a results store keeps for reuse."""

from __future__ import annotations

from pathlib import Path

import click

from ssilbench.cli.options import results_option


@click.group()
def cache() -> None:
    """List or delete the trained stages kept for reuse (RESULTS/cache)."""


@cache.command("ls")
@results_option
def cache_ls(results: str) -> None:
    """One line per kept stage (key, stage, size, last use), then one per stage being
    trained now (key, holder host and pid, age, last heartbeat)."""
    import datetime
    import time

    from ssilbench.train.memo import StageCache

    stages = StageCache(Path(results) / "cache")
    entries = stages.entries()
    for e in entries:
        when = datetime.datetime.fromtimestamp(e.last_used).isoformat(timespec="seconds")
        stage = "damaged" if e.meta.get("damaged") else e.meta.get("stage", "?")
        click.echo(f"{e.key[:12]}  {stage:<10} {e.size / 1024:9.1f} KiB  last used {when}")
    total = sum(e.size for e in entries)
    click.echo(f"{len(entries)} stage(s), {total / 2**20:.1f} MiB in {Path(results) / 'cache'}")
    leases = stages.leases()
    now = time.time()
    for info in leases:
        why = info.why_stale()
        state = f"stale: {why}" if why else f"heartbeat {now - info.heartbeat:.0f} s ago"
        age = now - (info.started or info.heartbeat)
        click.echo(f"{info.key[:12]}  training   by {info.holder} for {age / 60:.1f} min ({state})")
    if leases:
        stale = sum(info.stale() for info in leases)
        click.echo(f"{len(leases) - stale} stage(s) being trained, {stale} stale lease(s)"
                   + (" (`ssilbench cache gc` removes them)" if stale else ""))  # fmt: skip


@cache.command("gc")
@results_option
@click.option(
    "--older-than",
    "days",
    type=click.FloatRange(min=0),
    default=0,
    show_default=True,
    help="Delete only stages not used for this many days (0: delete all).",
)
@click.option(
    "--stale-leases",
    is_flag=True,
    help="Only remove the leases of stages whose trainer is gone (keep every stage), "
    "watching those whose heartbeat is ahead of this host's clock until they are judged.",
)
def cache_gc(results: str, days: float, stale_leases: bool) -> None:
    """Delete kept stages (results already recorded are untouched) and the leases of stages
    whose trainer is gone; stages being trained now keep their leases and entries."""
    from ssilbench.train import leases
    from ssilbench.train.memo import StageCache

    stages = StageCache(Path(results) / "cache")
    if stale_leases:
        ahead = leases.ahead_of_clock(stages.leases())
        if ahead:
            click.echo(f"watching {len(ahead)} lease(s) whose heartbeat is ahead of this "
                       f"host's clock for {leases.LEASE_STALE_S:.0f} s: a live trainer "
                       f"beats every {leases.LEASE_HEARTBEAT_S:.0f} s", err=True)  # fmt: skip
        removed = stages.remove_stale_leases(watch=True)
        for info in removed:
            click.echo(f"removed the lease on {info.key[:12]} of {info.holder}")
        click.echo(f"removed {len(removed)} stale lease(s); {len(stages.leases())} left")
        return
    stale = stages.remove_stale_leases()
    removed = stages.gc(days * 86400)
    click.echo(f"deleted {len(removed)} stage(s), {sum(e.size for e in removed) / 2**20:.1f} MiB"
               + (f", and {len(stale)} stale lease(s)" if stale else ""))  # fmt: skip
    ahead = leases.ahead_of_clock(stages.leases())
    if ahead:
        click.echo(f"{len(ahead)} lease(s) have a heartbeat ahead of this host's clock; "
                   "'ssilbench cache gc --stale-leases' watches them and removes the dead "
                   "ones.", err=True)  # fmt: skip
