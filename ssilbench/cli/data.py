"""``ssilbench data``: build, import or collect expert datasets."""

from __future__ import annotations

from pathlib import Path

import click

from ssilbench.cli.app import State
from ssilbench.cli.options import (
    DEFAULT_DATA,
    blocks_option,
    count_option,
    data_root_option,
    device_option,
    env_options_option,
    quick_option,
    sweep_file_option,
)
from ssilbench.cli.tasks import configured_task, environment_options, expand_envs, parse_options
from ssilbench.errors import UsageError
from ssilbench.planning.values import comma_list


@click.group()
def data() -> None:
    """Build, verify, import, download or collect expert datasets."""


def _describe(store) -> str:
    return (f"{store.num_frames} frames, {store.num_episodes} episodes, "
            f"{store.num_transitions} transitions")  # fmt: skip


@data.command("build")
@click.argument("env_ids", required=False)
@env_options_option()
@sweep_file_option("Build every dataset the runs of this sweep file need, instead of ENV_IDS "
                   "(then 'plan' prices its runs at their datasets' sizes).",
                   required=False)  # fmt: skip
@quick_option("With --sweep: the file's [quick] runs.")
@blocks_option()
@data_root_option
@click.option("--rebuild", is_flag=True, help="Delete the cached dataset first and build it again.")
@click.pass_obj
def data_build(state: State, env_ids: str | None, options, sweep_file: str | None, quick: bool,
               blocks: str | None, data_root: str, rebuild: bool) -> None:  # fmt: skip
    """Build (or verify) the datasets of ENV_IDS, e.g. maze:all, or of a sweep file's runs."""
    from ssilbench.data.datasets import task_dataset

    values = parse_options(options)
    root = Path(data_root).expanduser()
    if sweep_file is not None:
        if env_ids or options or rebuild:
            raise UsageError("Give either ENV_IDS (with -o and --rebuild) or --sweep FILE: a "
                             "sweep file's blocks say their environments and options.")  # fmt: skip
        return _build_sweep(state, Path(sweep_file), quick, blocks, root)
    if env_ids is None or quick or blocks:
        raise UsageError("Give the environments to build (e.g. 'ssilbench data build maze:all') "
                         "or a sweep file (--sweep FILE, with --quick and --blocks).")  # fmt: skip
    for family, task_name in expand_envs(state.plugins, comma_list(env_ids, "environment",
                                                                   "maze:10x10")):  # fmt: skip
        environment = state.plugins.environments.create(family)
        task = environment.load(task_name, environment_options(environment, family, values))
        if rebuild:
            remove_dataset(task, root)
        store = task_dataset(task, root)
        click.echo(f"{family}:{task_name}: {_describe(store)} at {store.root}")


def _build_sweep(state: State, path: Path, quick: bool, blocks: str | None, root: Path) -> None:
    """Build every dataset the runs of a sweep file need, as its run would before training
    (one message lists those that must be imported or downloaded first)."""
    from collections import Counter

    from ssilbench.planning.sweepfile import load_blocks, plan_blocks, prepare_blocks

    resolved, _ = plan_blocks(state.plugins, load_blocks(path, blocks), path, None, quick)
    plan = prepare_blocks(resolved, path, root)
    ready = Counter(task.env for task in plan.tasks.values() if task.dataset is not None)
    for env, count in sorted(ready.items()):
        click.echo(f"{env}: {count} dataset{'s' if count > 1 else ''} ready under {root}")


def remove_dataset(task, root: Path) -> None:
    """Delete the task's cached dataset, a damaged one included."""
    import shutil

    from ssilbench.errors import DatasetError

    try:
        stale = task.dataset(root).root
    except DatasetError as exc:
        if exc.root is None:
            raise
        stale = exc.root
    shutil.rmtree(stale, ignore_errors=True)


@data.command("import")
@click.argument("family")
@click.option(
    "--from",
    "source",
    required=True,
    type=click.Path(file_okay=False),
    help="Folder holding the data in the environment's published layout.",
)
@click.option(
    "--games",
    "--tasks",
    "tasks",
    default=None,
    help="Comma-separated tasks to import [default: every one found].",
)
@env_options_option("Environment option, e.g. -o dataset=NAME.")
@data_root_option
@click.option("--replace", is_flag=True, help="Import again over datasets already imported.")
@click.pass_obj
def data_import(state: State, family: str, source: str, tasks, options, data_root: str,
                replace: bool) -> None:  # fmt: skip
    """Import the expert data of FAMILY (e.g. procgen) from a local folder (a download)."""
    from ssilbench.api import provides

    if ":" in family:
        raise UsageError(f"'data import' takes a family, e.g. 'procgen'; pick tasks with "
                         f"--games, not {family!r}.")  # fmt: skip
    environment = state.plugins.environments.create(family)
    if not provides(environment, "import_dataset"):
        raise UsageError(f"Environment '{family}' has no importer: its datasets are built "
                         f"with 'ssilbench data build {family}:all'.")  # fmt: skip
    chosen: list[str] = []
    if tasks is not None:
        ids = [f"{family}:{t}" for t in comma_list(tasks, "task", "--games bigfish,coinrun")]
        chosen = [t for _, t in expand_envs(state.plugins, ids)]
    opts = environment_options(environment, family, parse_options(options))
    stores = environment.import_dataset(Path(source), Path(data_root).expanduser(), chosen, opts,
                                        replace=replace, log=state.log())  # fmt: skip
    for store in stores:
        click.echo(f"{store.root}: {_describe(store)}")


@data.command("demo")
@click.argument("family")
@click.option(
    "--tasks",
    default=None,
    help="Comma-separated tasks to make a demo of [default: every task of the family].",
)
@count_option("--episodes", minimum=1, help="Scripted episodes per task [default: the family's].")
@count_option(
    "--episode-length", minimum=1, help="Most steps an episode takes [default: the family's]."
)
@count_option("--seed", minimum=0, default=0, help="Seed of the scripted episodes.")
@data_root_option
@click.option("--replace", is_flag=True, help="Make the demo again over an existing one.")
@click.pass_obj
def data_demo(state: State, family: str, tasks, episodes, episode_length, seed: int,
              data_root: str, replace: bool) -> None:  # fmt: skip
    """Try FAMILY (pusht, libero10) without its download: write a small scripted dataset in
    the download's layout and import it as the dataset 'demo' (runs take -o dataset=demo).

    The episodes come from a scripted policy in the real simulator, not from an expert:
    they exercise the whole pipeline, not the paper's numbers.
    """
    from ssilbench.api import DEMO_DATASET

    environment = _demo_environment(state, family)
    chosen: list[str] = []
    if tasks is not None:
        ids = [f"{family}:{t}" for t in comma_list(tasks, "task", "--tasks TASK1,TASK2")]
        chosen = [t for _, t in expand_envs(state.plugins, ids)]
    opts = environment_options(environment, family, {"dataset": DEMO_DATASET})
    root = Path(data_root).expanduser()
    present = _imported(environment, chosen, opts, root)
    if present and not replace:
        raise UsageError(f"A {family} demo is already imported at {', '.join(present)}; add "
                         "--replace to make it again.")  # fmt: skip
    import shutil

    folder = root / "demo-source" / family
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    source = environment.write_demo(folder, chosen, episodes, seed, episode_length, state.log())
    stores = environment.import_dataset(source, root, chosen, opts, replace=replace,
                                        log=state.log())  # fmt: skip
    if len(stores) < len(_demo_tasks(environment, chosen)):
        # A store that did not open (damaged) is still there: the importer left it alone.
        raise UsageError(f"A {family} demo dataset is already at {root / family}; add --replace "
                         "to make it again.")  # fmt: skip
    for store in stores:
        click.echo(f"{store.root}: {_describe(store)}")
    envs = ",".join(f"{family}:{t}" for t in chosen) if chosen else family
    where = "" if data_root == DEFAULT_DATA else f"--data-root {data_root}"
    command = ["ssilbench run --method bc --env", envs, f"-o dataset={DEMO_DATASET}",
               environment.demo_run, where]  # fmt: skip
    click.echo("Run on it with: " + " ".join(part for part in command if part))


def _demo_environment(state: State, family: str):  # noqa: ANN202
    """FAMILY's environment, when it offers a demo; else a UsageError naming those that do."""
    from ssilbench.api import provides

    registry = state.plugins.environments
    offering = [n for n in registry.names() if provides(registry.create(n), "write_demo")]
    if family not in registry.names() or not provides(registry.create(family), "write_demo"):
        what = "is not an environment" if family not in registry.names() else "offers no demo"
        raise UsageError(f"'{family}' {what}; the families with a demo are: "
                         f"{', '.join(offering) or 'none'}.")  # fmt: skip
    return registry.create(family)


def _demo_tasks(environment, tasks: list[str]) -> list[str]:  # noqa: ANN001
    """The tasks a demo of ``tasks`` (none, or ``all``: every task) is imported for."""
    return [t for t in tasks if t != "all"] or environment.tasks()


def _imported(environment, tasks: list[str], opts, root: Path) -> list[str]:  # noqa: ANN001
    """Where the tasks' demo datasets already lie (a store that opens) under ``root``."""
    import contextlib

    from ssilbench.errors import DatasetError

    present = []
    for name in _demo_tasks(environment, tasks):
        with contextlib.suppress(DatasetError):
            present.append(str(environment.load(name, opts).dataset(root).root))
    return present


@data.command("collect")
@click.argument("env_id")
@click.option(
    "--policy",
    required=True,
    type=click.Path(dir_okay=False),
    help="Checkpoint of the policy to roll out (from 'ssilbench expert train').",
)
@count_option("--frames", minimum=2, required=True, help="Frames to store.")
@count_option(
    "--test-frames",
    minimum=0,
    default=0,
    help="Frames of other episodes stored as the test split (offline diagnostics).",
)
@count_option("--seed", minimum=0, default=0)
@env_options_option("Environment option, e.g. -o dataset=NAME.")
@data_root_option
@click.option("--replace", is_flag=True, help="Overwrite a dataset of the same name.")
@device_option("cpu")
@click.pass_obj
def data_collect(state: State, env_id: str, policy: str, frames: int, test_frames: int,
                 seed: int, options, data_root: str, replace: bool,
                 device: str) -> None:  # fmt: skip
    """Roll out a policy checkpoint in ENV_ID and store the frames as its dataset."""
    from ssilbench.api import provides

    family, task_name, task = configured_task(state.plugins, env_id, options)
    if not provides(task, "collect_dataset"):
        raise UsageError(f"Environment '{family}' cannot collect datasets from a policy: "
                         f"use 'ssilbench data build {env_id}'.")  # fmt: skip
    from ssilbench.runner.worker import resolve_device

    store = task.collect_dataset(Path(policy), frames, Path(data_root).expanduser(), seed=seed,
                                 replace=replace, device=resolve_device(device),
                                 log=state.log(), test_frames=test_frames)  # fmt: skip
    click.echo(f"{family}:{task_name}: {_describe(store)} at {store.root}")


@data.command("download")
@click.argument("family")
@click.option(
    "--games",
    "--tasks",
    "tasks",
    default=None,
    help="Comma-separated tasks to download [default: every task of the manifest].",
)
@click.option(
    "--from-url",
    "base_url",
    default=None,
    metavar="BASE",
    help="Download from this mirror instead of the publisher: BASE/NAME for each file NAME "
    "of the manifest.",
)
@click.option(
    "--dest",
    default=None,
    type=click.Path(file_okay=False),
    help="Folder for the downloaded files [default: DATA_ROOT/downloads/FAMILY].",
)
@click.option(
    "--manifest",
    "manifest_file",
    default=None,
    type=click.Path(dir_okay=False),
    help="A download manifest (TOML) to use instead of the one the plugin ships.",
)
@click.option(
    "--sha256",
    "pins",
    multiple=True,
    metavar="NAME=HEX",
    help="Require this sha256 of the file NAME (repeatable); overrides the manifest.",
)
@click.option(
    "--refresh",
    is_flag=True,
    help="Forget the sha256s recorded on first use (downloads.lock.json) of these files, and "
    "trust the copies downloaded now instead.",
)
@click.option("-y", "--yes", is_flag=True, help="Start without asking (a terminal asks).")
@click.option("--no-import", is_flag=True, help="Download only; do not import.")
@click.option(
    "--remove-downloads",
    is_flag=True,
    help="Delete the downloaded files once the import succeeded (the lock file stays).",
)
@count_option("--retries", minimum=0, default=5, help="Retries of a broken connection per file.")
@click.option(
    "--max-unpacked",
    default="100GB",
    show_default=True,
    metavar="SIZE",
    help="Refuse an archive that would unpack to more than this (e.g. 500MB, 200GB, 1TB).",
)
@click.option(
    "--max-ratio",
    type=click.FloatRange(min=1),
    default=200.0,
    show_default=True,
    help="Refuse an archive that unpacks to more than this many times its size (a zip bomb).",
)
@env_options_option("Environment option for the import, e.g. -o dataset=NAME.")
@data_root_option
@click.option("--replace", is_flag=True, help="Import again over datasets already imported.")
@click.pass_obj
def data_download(state: State, family: str, tasks, base_url, dest, manifest_file, pins,
                  refresh: bool, yes: bool, no_import: bool, remove_downloads: bool,
                  retries: int, max_unpacked: str, max_ratio: float, options, data_root: str,
                  replace: bool) -> None:  # fmt: skip
    """Download FAMILY's published expert data (procgen, pusht, libero10), check it, import it.

    The total size is shown first; in a terminal the command asks before it starts (--yes
    skips the question), elsewhere it starts. Interrupted files resume; every file is
    checked against its sha256 (or, where the publisher gives none, against the hash its
    first download had: downloads.lock.json). Concurrent commands download a file once.
    See docs/guide.md, "Getting the data".
    """
    import sys

    from ssilbench.api import provides
    from ssilbench.data import download as dl

    if ":" in family:
        raise UsageError(f"'data download' takes a family, e.g. 'procgen'; pick tasks with "
                         f"--games, not {family!r}.")  # fmt: skip
    environment = state.plugins.environments.create(family)
    manifest = _download_manifest(environment, family, manifest_file)
    if not no_import and not provides(environment, "import_dataset"):
        raise UsageError(f"Environment '{family}' has no importer; use --no-import to only "
                         "download the files.")  # fmt: skip
    chosen = _download_tasks(state, family, manifest, tasks)
    opts = environment_options(environment, family, parse_options(options))
    root = Path(data_root).expanduser()
    folder = _download_folder(root, family, dest)
    limits = dl.UnpackLimits(dl.parse_size(max_unpacked, "--max-unpacked"), max_ratio)
    planned = dl.plan_downloads(manifest, manifest.select(chosen), folder,
                                dl.check_base_url(base_url) if base_url else None,
                                dl.parse_pins(pins, manifest))  # fmt: skip
    _announce(manifest, planned, base_url, folder)
    if not yes and sys.stdin.isatty() and any(not p.present for p in planned):
        click.confirm("Start the download?", default=True, abort=True)
    from ssilbench.cli.download_progress import reporter_for

    reporter = reporter_for(state.quiet, lambda line: click.echo(line, err=True))
    transfer = dl.Transfer(retries=retries)
    with dl.Download(manifest, planned, folder, reporter, transfer, limits, refresh) as download:
        fetched = download.fetch_all()
        got = sum(f.size for f in fetched if f.downloaded)
        click.echo(f"{len(fetched)} file(s) in place and checked "
                   f"({dl.human_size(got)} downloaded).")  # fmt: skip
        if no_import:
            download.trust()
            click.echo(f"Import them with: ssilbench data import {family} --from "
                       f"{folder / manifest.import_from}")  # fmt: skip
            return
        targets = chosen or manifest.tasks()
        stores = _import_download(download, environment, folder / manifest.import_from, root,
                                  targets, opts, replace, state.log())  # fmt: skip
        download.trust()
        for store in stores:
            click.echo(f"{store.root}: {_describe(store)}")
        if remove_downloads:
            dl.remove_downloads(download.planned, folder)
            click.echo(f"Deleted the downloaded files from {folder} (kept {dl.LOCK_NAME}).")
        else:
            click.echo(f"The downloaded files stay in {folder}; delete them (or rerun with "
                       "--remove-downloads) once you no longer need them.")  # fmt: skip


def _download_manifest(environment, family: str, manifest_file: str | None):  # noqa: ANN001, ANN202
    """The manifest of ``--manifest FILE``, or the one the environment ships."""
    from ssilbench.api import provides
    from ssilbench.data import download as dl

    if manifest_file:
        manifest = dl.read_manifest(Path(manifest_file))
        if manifest.family != family:
            raise UsageError(f"--manifest {manifest_file} describes '{manifest.family}', not "
                             f"'{family}'.")  # fmt: skip
        return manifest
    manifest = dl.packaged_manifest(environment)
    if manifest is None:
        if provides(environment, "import_dataset"):
            hint = f"import data you have with 'ssilbench data import {family} --from DIR'"
        else:
            hint = f"its datasets are built with 'ssilbench data build {family}:all'"
        raise UsageError(f"Environment '{family}' publishes no downloads: {hint}.")
    return manifest


def _download_tasks(state: State, family: str, manifest, tasks: str | None) -> list[str]:  # noqa: ANN001
    """The tasks ``--games`` names (none: every task), each one the manifest has a file for."""
    if tasks is None:
        return []
    ids = [f"{family}:{t}" for t in comma_list(tasks, "task", "--games bigfish,coinrun")]
    chosen = [t for _, t in expand_envs(state.plugins, ids)]
    missing = [t for t in chosen if not any(t in f.tasks or not f.tasks for f in manifest.files)]
    if missing:
        raise UsageError(f"The {family} download manifest has no file for "
                         f"{', '.join(missing)}.")  # fmt: skip
    return chosen


def _download_folder(root: Path, family: str, dest: str | None) -> Path:
    """``--dest`` (default ``DATA_ROOT/downloads/FAMILY``), which must not hold the data root:
    an unpacked archive replaces the folders it names there, datasets included."""
    folder = Path(dest).expanduser() if dest else root / "downloads" / family
    resolved, data = folder.resolve(), root.resolve()
    if data == resolved or data.is_relative_to(resolved):
        raise UsageError(f"--dest {dest} holds the data root {root}: archives unpacked there "
                         "would replace the folders they name, datasets included. Give the "
                         f"downloads a folder of their own, e.g. --dest "
                         f"{root / 'downloads' / family} (the default).")  # fmt: skip
    return folder


def _announce(manifest, planned, base_url: str | None, folder: Path) -> None:  # noqa: ANN001
    """What will be downloaded, from where, checked against what."""
    from ssilbench.data import download as dl

    click.echo(f"{manifest.title}" + (f" ({manifest.homepage})" if manifest.homepage else ""))
    source = f"mirror {base_url}" if base_url else "the publisher"
    click.echo(f"From {source} into {folder}:")
    for line in dl.summary(planned):
        click.echo(line)
    if not any(p.expected for p in planned):
        click.echo(
            "No sha256 is published for these files: the hash of each first download is "
            f"recorded in {folder / dl.LOCK_NAME} once the command succeeds (the file in "
            "place, unpacked and imported), and later copies must match it."
        )


def _import_download(download, environment, source: Path, root: Path, tasks: list[str],  # noqa: ANN001
                     opts, replace: bool, log) -> list:  # noqa: ANN001  # fmt: skip
    """The import of what was downloaded; when it fails, the files no hash vouches for are
    moved aside (the download may be at fault), so that running the command again fetches
    them afresh."""
    from ssilbench.errors import DatasetError

    try:
        return environment.import_dataset(source, root, tasks, opts, replace=replace, log=log)
    except DatasetError as exc:
        moved = download.reject_untrusted()
        if not moved:
            raise
        listed = ", ".join(f"{name} to {path}" for name, path in moved)
        raise DatasetError(
            f"{exc} No sha256 vouches for the downloaded file(s), so they were moved aside "
            f"({listed}): run the command again to download them afresh.",
            exc.root,
        ) from None
