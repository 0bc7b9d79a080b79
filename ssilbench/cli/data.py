"""``ssilbench data``: build, import or collect expert datasets."""

from __future__ import annotations

from pathlib import Path

import click

from ssilbench.cli.app import State
from ssilbench.cli.options import (
    count_option,
    data_root_option,
    device_option,
    env_options_option,
)
from ssilbench.cli.tasks import configured_task, environment_options, expand_envs, parse_options
from ssilbench.errors import UsageError
from ssilbench.runner.run_options import comma_list


@click.group()
def data() -> None:
    """Build, verify or rebuild expert datasets."""


def _describe(store) -> str:
    return (f"{store.num_frames} frames, {store.num_episodes} episodes, "
            f"{store.num_transitions} transitions")  # fmt: skip


@data.command("build")
@click.argument("env_ids")
@env_options_option()
@data_root_option
@click.option("--rebuild", is_flag=True, help="Delete the cached dataset first and build it again.")
@click.pass_obj
def data_build(state: State, env_ids: str, options, data_root: str, rebuild: bool) -> None:
    """Build (or verify) the datasets of ENV_IDS, e.g. maze:all."""
    values = parse_options(options)
    root = Path(data_root).expanduser()
    for family, task_name in expand_envs(state.plugins, comma_list(env_ids, "environment",
                                                                   "maze:10x10")):  # fmt: skip
        environment = state.plugins.environments.create(family)
        task = environment.load(task_name, environment_options(environment, family, values))
        if rebuild:
            remove_dataset(task, root)
        store = task.dataset(root)
        click.echo(f"{family}:{task_name}: {_describe(store)} at {store.root}")


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
