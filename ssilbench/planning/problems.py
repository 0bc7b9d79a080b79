"""What a sweep lacks before it can start (datasets, simulators, extras), gathered into one
message that lists every problem with the command that fixes it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel

from ssilbench.errors import SsilbenchError
from ssilbench.planning.values import flag_value, non_default


class ProblemTask(Protocol):
    """What a problem's message reads of its task (a plan's ``TaskInfo``)."""

    environment: Any  # the family (what it publishes for download), or None
    options: BaseModel


@dataclass
class Problem:
    """One thing a sweep needs that is missing or wrong, found by :func:`prepare`."""

    kind: str  # "simulator" (an extra or a simulator), "dataset" or "budget"
    env: str  # family:task
    error: SsilbenchError
    task: ProblemTask | None = None


_HEADINGS = {
    "simulator": "Simulators and extras (needed for the rollouts; --no-rollouts runs without)",
    "dataset": "Datasets (under {root})",
    "budget": "Label budgets",
}


def describe_problems(problems: list[Problem], data_root: Path) -> str:
    """One message for every problem :func:`prepare` found: grouped by kind, the tasks that
    share a message listed once, and the datasets of one family that all miss for the same
    reason shown by the first one's message (which names the commands that fix it)."""
    counts = {kind: sum(p.kind == kind for p in problems) for kind in _HEADINGS}
    # Tasks that miss the same simulator (one message) miss one thing.
    counts["simulator"] = len({str(p.error) for p in problems if p.kind == "simulator"})
    found = ", ".join(
        f"{n} {what}{'s' * (n > 1)}"
        for n, what in (
            (counts["simulator"], "simulator or extra"),
            (counts["dataset"], "dataset"),
            (counts["budget"], "label budget"),
        )
        if n
    )
    lines = [
        f"The sweep cannot start; everything it lacks is listed here ({found}). Nothing was "
        "run or recorded."
    ]
    for kind, heading in _HEADINGS.items():
        mine = [p for p in problems if p.kind == kind]
        if not mine:
            continue
        lines += ["", heading.format(root=data_root) + ":"]
        if kind == "dataset":
            lines += dataset_problem_lines(mine, data_root)
            continue
        by_message: dict[str, list[str]] = {}
        for p in mine:
            by_message.setdefault(str(p.error), []).append(p.env)
        for message, envs in by_message.items():
            lines.append(f"  {_task_list(envs)}: {message}")
    lines += ["", "Fix these and run the same command again ('ssilbench list' shows which "
              "extras and datasets are present)."]  # fmt: skip
    return "\n".join(lines)


def _task_list(envs: list[str], shown: int = 4) -> str:
    if len(envs) <= shown:
        return ", ".join(envs)
    return f"{', '.join(envs[:shown])}, … ({len(envs)} tasks)"


def dataset_problem_lines(problems: list[Problem], root: Path) -> list[str]:
    """Per family: its tasks without data, then what to do. Where every task's message is
    the same but for the task's name, it is shown once (for the first task)."""
    families: dict[str, list[Problem]] = {}
    for p in problems:
        families.setdefault(p.env.split(":", 1)[0], []).append(p)
    lines = []
    for family, mine in families.items():
        tasks = [p.env.split(":", 1)[1] for p in mine]
        lines.append(f"  {family}: {len(tasks)} task{'s' * (len(tasks) > 1)} ({', '.join(tasks)})")
        lines += _download_lines(family, tasks, mine[0].task, root)
        templates = {str(p.error).replace(task, "\0") for p, task in zip(mine, tasks, strict=True)}
        if len(mine) > 1 and len(templates) == 1:
            others = len(mine) - 1
            alike = "the other one alike" if others == 1 else f"the other {others} alike"
            lines.append(f"    {mine[0].env} ({alike}): {mine[0].error}")
        else:
            lines += [f"    {p.env}: {p.error}" for p in mine]
    return lines


def _download_lines(
    family: str, tasks: list[str], info: ProblemTask | None, root: Path
) -> list[str]:
    """The ``ssilbench data download`` command that fetches and imports the tasks' data,
    with its size where the family's download manifest gives it; none where the family
    publishes nothing to download (``Environment.downloads``)."""
    if info is None or not getattr(info.environment, "downloads", None):
        return []
    try:
        from ssilbench.data.download import human_size, packaged_manifest

        manifest = packaged_manifest(info.environment)
    except (ImportError, SsilbenchError):  # no manifest to read: the plugin's own hint stays
        return []
    files = manifest.select(tasks) if manifest is not None else []
    if manifest is None or not files:
        return []
    every = set(manifest.tasks()) <= set(tasks)
    command = f"ssilbench data download {family}" + ("" if every else f" --games {','.join(tasks)}")
    given = non_default(info.options, info.environment.run_defaults(info.options))
    command += "".join(f" -o {k}={flag_value(v)}" for k, v in given.items())
    sizes = [f.size for f in files if f.size is not None]
    size = f"{len(files)} file{'s' * (len(files) > 1)}, "
    if not sizes:
        size += "sizes not published"
    else:
        size += human_size(sum(sizes))
        if len(sizes) < len(files):
            size += f" + {len(files) - len(sizes)} of unpublished size"
    return [f"    download them: {command} --data-root {root}", f"      ({manifest.title}: {size})"]
