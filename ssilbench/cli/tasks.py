"""Environment ids and ``-o`` options of the data, expert and analyze commands, resolved the
way a sweep resolves them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ssilbench.errors import UsageError


def expand_envs(plugins: Any, env_ids: list[str]) -> list[tuple[str, str]]:
    """``(family, task)`` of each id, ``family:all`` expanded, as a sweep expands them."""
    # The planner's own expansion, so that an id means the same in every command.
    from ssilbench.planning.plan import expand_envs

    return expand_envs(plugins, env_ids)


def parse_options(options: Iterable[str]) -> dict[str, Any]:
    """The values of ``-o KEY=VALUE`` flags."""
    from ssilbench.planning.values import parse_assignments

    return parse_assignments(options, "--option")


def environment_options(environment: Any, family: str, values: dict[str, Any]) -> Any:
    """The environment's Options model with ``values`` (from :func:`parse_options`), checked,
    and the family's run defaults where they leave a key unset, as a sweep's runs take them."""
    from ssilbench.planning.values import run_options, validate_model

    given = run_options(environment, family, values)
    return validate_model(environment.Options, given, f"options of environment '{family}'")


def configured_task(plugins: Any, env_id: str, options: Iterable[str]) -> tuple[str, str, Any]:
    """(family, task name, Task) of one ``family:task`` id with its ``-o`` options applied."""
    from ssilbench.registry import split_env_id

    family, task_name = split_env_id(env_id)
    if task_name == "all":
        raise UsageError(f"Give one task, e.g. '{family}:TASK', not '{env_id}'.")
    ((family, task_name),) = expand_envs(plugins, [env_id])
    environment = plugins.environments.create(family)
    opts = environment_options(environment, family, parse_options(options))
    return family, task_name, environment.load(task_name, opts)
