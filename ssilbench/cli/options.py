"""Options that several commands share, each declared once here.

``SSILBENCH_RESULTS`` and ``SSILBENCH_DATA`` set the defaults of ``--results`` and
``--data-root``. Options whose help differs between commands (``--sweep``, ``--quick``,
``--device``, ``-o``, ``-c``) are made by a function that takes what differs, as are the
whole-number options (``--workers``, ``--frames``, ...), ``--threads`` (a count, ``auto``
or ``torch``) and ``-y/--yes``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from ssilbench.runs.settings import STOPPING_RULES, extra, settings

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_RESULTS = os.environ.get("SSILBENCH_RESULTS", "results")
DEFAULT_DATA = os.environ.get("SSILBENCH_DATA", str(Path("~/.cache/ssilbench/data").expanduser()))

results_option = click.option(
    "--results", default=DEFAULT_RESULTS, show_default=True, help="Results directory."
)
data_root_option = click.option(
    "--data-root", default=DEFAULT_DATA, show_default=True, help="Dataset cache directory."
)


def sweep_file_option(help: str, several: bool = False, required: bool = True) -> Callable[[F], F]:
    """``--sweep FILE``: one optional sweep file (``sweep_file``), or with ``several`` one or
    more (``sweeps``), required unless ``required`` is False."""
    name, given = ("sweeps", {"multiple": True, "required": required}) if several else (
        "sweep_file", {"default": None})  # fmt: skip
    return click.option("--sweep", name, type=click.Path(dir_okay=False), help=help, **given)


def blocks_option() -> Callable[[F], F]:
    """``--blocks``: with ``--sweep``, only the blocks with these names or panels."""
    return click.option(
        "--blocks",
        default=None,
        help="With --sweep: only the blocks with these names or panels (comma-separated).",
    )


def quick_option(help: str) -> Callable[[F], F]:
    """``--quick``: the sweep files' CI-sized ``[quick]`` variants."""
    return click.option("--quick", is_flag=True, help=help)


def env_options_option(help: str | None = None) -> Callable[[F], F]:
    """``-o KEY=VALUE``, repeatable: environment options (``options``)."""
    return click.option("-o", "--option", "options", multiple=True, metavar="KEY=VALUE",
                        help=help)  # fmt: skip


def device_option(default: str = "auto") -> Callable[[F], F]:
    """``--device``: where torch computes."""
    return click.option("--device", default=default, show_default=True,
                        help="auto, cpu, cuda or cuda:N.")  # fmt: skip


def config_option(help: str) -> Callable[[F], F]:
    """``-c KEY=VALUE``, repeatable: settings of what the command trains (``config``)."""
    return click.option("-c", "--config", "config", multiple=True, metavar="KEY=VALUE",
                        help=help)  # fmt: skip


def count_option(
    *decls: str, minimum: int = 1, default: int | None = None, **more: Any
) -> Callable[[F], F]:
    """A whole-number option of at least ``minimum``; its default, where it has one, is shown
    in the help."""
    return click.option(*decls, type=click.IntRange(min=minimum), default=default,
                        show_default=default is not None, **more)  # fmt: skip


class ThreadsType(click.ParamType):
    """``--threads``: a whole number from 1, ``auto`` or ``torch``."""

    name = "N|auto|torch"

    def convert(self, value: Any, param: Any, ctx: Any) -> int | str:
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            text = str(value).strip().lower()
            if text in ("auto", "torch"):
                return text
            if not text.isdigit():
                self.fail(f"{value!r} is not a whole number, 'auto' or 'torch'.", param, ctx)
            number = int(text)
        if number < 1:
            self.fail(f"{number} is not a positive number of threads.", param, ctx)
        return number


def threads_option(help: str, default: str | None = "auto") -> Callable[[F], F]:
    """``--threads N|auto|torch``: torch intra-op threads of each training process."""
    return click.option("--threads", type=ThreadsType(), default=default,
                        show_default=default is not None, help=help)  # fmt: skip


def yes_option(help: str) -> Callable[[F], F]:
    """``-y/--yes``: start without the question a terminal would be asked."""
    return click.option("-y", "--yes", is_flag=True, help=help)


class StoppingRuleType(click.ParamType):
    """``--stop-early [converged|paper]``: alone, the suite's rule (recorded as ``true``, as
    it always was); with a value, that rule."""

    name = "rule"

    def convert(self, value: Any, param: Any, ctx: Any) -> bool | str:
        if value is True or value in STOPPING_RULES:
            return value
        self.fail(f"{value!r} is not a stopping rule: give 'converged' or 'paper', or "
                  "--stop-early alone.", param, ctx)  # fmt: skip


def run_setting_options(command: F) -> F:
    """The run settings (:mod:`ssilbench.runs.settings`) as the flags of ``run`` and
    ``plan``, each made from its declaration; a setting not given is None (or an empty
    tuple), and takes its default in the sweep."""
    for name in reversed(list(settings())):
        command = _setting_option(name)(command)
    return command


def _setting_option(name: str) -> Callable[[F], F]:
    info, spelled = settings()[name], extra(name)
    flags, kind, metavar = spelled["flags"], spelled["kind"], spelled["metavar"]
    given: dict[str, Any] = {"help": info.description, "default": None}
    if kind == "assignments":
        given.update(multiple=True, default=(), metavar=metavar)
    elif kind == "count":
        given.update(type=int)
    elif kind == "fraction":
        given.update(type=float)
    elif kind == "rule":
        given.update(type=StoppingRuleType(), is_flag=False, flag_value=True, metavar=metavar)
    return click.option(*flags, name, **given)
