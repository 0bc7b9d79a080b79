"""``ssilbench expert``: train the policies whose rollouts become datasets."""

from __future__ import annotations

from pathlib import Path

import click

from ssilbench.cli.app import State
from ssilbench.cli.options import (
    config_option,
    count_option,
    data_root_option,
    device_option,
    env_options_option,
)
from ssilbench.cli.outputs import guards_outputs
from ssilbench.cli.tasks import configured_task
from ssilbench.errors import UsageError


@click.group()
def expert() -> None:
    """Train the experts whose rollouts 'ssilbench data collect' stores."""


@expert.command("train")
@click.argument("env_id")
@count_option("--steps", help="Environment steps in total [default: the expert config's].")
@click.option("--out", default=None, type=click.Path(dir_okay=False),
              help="Checkpoint file; an existing one is resumed "
              "[default: DATA_ROOT/experts/FAMILY/TASK.pt].")  # fmt: skip
@config_option("Expert setting, e.g. -c scale=1 -c num_envs=16.")
@env_options_option()
@data_root_option
@device_option()
@count_option("--threads", help="Torch threads.")
@click.pass_obj
@guards_outputs("out", data_allow=("experts",))
def expert_train(state: State, env_id: str, steps, out, config, options, data_root: str,
                 device: str, threads) -> None:  # fmt: skip
    """Train (or resume) an expert policy for ENV_ID, checkpointing as it goes."""
    from ssilbench.api import provides
    from ssilbench.planning.values import parse_assignments, validate_model

    family, task_name, task = configured_task(state.plugins, env_id, options)
    if not provides(task, "train_expert") or task.ExpertConfig is None:
        raise UsageError(f"Environment '{family}' has no expert trainer.")
    values = parse_assignments(config, "--config")
    if steps is not None:
        values["steps"] = steps
    cfg = validate_model(task.ExpertConfig, values, f"expert config of {family}:{task_name}")
    target = Path(out) if out else (
        Path(data_root).expanduser() / "experts" / family / f"{task_name}.pt")  # fmt: skip
    import torch

    from ssilbench.runner.worker import resolve_device

    if threads is not None:
        torch.set_num_threads(threads)
    task.train_expert(cfg, target, device=resolve_device(device), log=state.log())
    click.echo(f"{family}:{task_name}: expert checkpoint at {target}")
