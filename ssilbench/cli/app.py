"""The ``ssilbench`` group, the state its commands share, and :func:`main`.

Every error a user can cause is an :class:`~ssilbench.errors.SsilbenchError`: it is printed as
one message without a traceback (``--debug`` shows it) and the command exits with 2. Every
refusal, click's usage errors included, starts with ``error: `` (:data:`ERROR_PREFIX`). Heavy
imports (torch, simulators) happen only inside the commands that train or evaluate, so
``ssilbench --help`` and ``ssilbench list`` stay fast.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable

import click

from ssilbench import __version__
from ssilbench.errors import SsilbenchError


class State:
    """The group's flags, and the plugins they select (loaded on first use)."""

    def __init__(self, plugin_flags: tuple[str, ...], debug: bool, quiet: bool) -> None:
        self.plugin_flags = plugin_flags
        self.debug = debug
        self.quiet = quiet
        self._plugins = None

    @property
    def plugins(self):
        if self._plugins is None:
            from ssilbench.plugins import load_plugins

            self._plugins = load_plugins(self.plugin_flags)
        return self._plugins

    def log(self) -> Callable[[str], None]:
        """Progress lines on stderr, or nothing with --quiet."""
        return (lambda line: None) if self.quiet else (lambda line: click.echo(line, err=True))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ssilbench")
@click.option(
    "-p",
    "--plugin",
    "plugin_flags",
    multiple=True,
    metavar="NAME",
    help="Load plugin NAME (entry-point name or module), or block it with 'no:NAME'. Repeatable.",
)
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
@click.option(
    "--data-root",
    "group_data_root",
    default=None,
    metavar="DIR",
    help="Dataset cache directory for every command that reads datasets (as each command's "
    "own --data-root, which wins where both are given).",
)
@click.pass_context
def cli(
    ctx: click.Context,
    plugin_flags: tuple[str, ...],
    debug: bool,
    quiet: bool,
    group_data_root: str | None,
) -> None:
    """ssilbench: benchmark semi-supervised imitation learning methods.

    \b
    Quick start:
      ssilbench list
      ssilbench run --method bc,idm_labeling,vm_idm --env maze:10x10 --budgets 16,64,256 --seeds 0,1
      ssilbench leaderboard --export md
    """
    ctx.obj = State(plugin_flags, debug, quiet)
    if group_data_root is not None:
        ctx.default_map = data_root_defaults(ctx.command, group_data_root)


def data_root_defaults(group: click.Group, root: str) -> dict[str, object]:
    """A ``default_map`` giving ``root`` as the default ``--data-root`` of every command
    under ``group`` that takes one, so that ``ssilbench --data-root DIR list`` reads DIR as
    ``ssilbench list --data-root DIR`` does."""
    found: dict[str, object] = {}
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            if inner := data_root_defaults(command, root):
                found[name] = inner
        elif any(param.name == "data_root" for param in command.params):
            found[name] = {"data_root": root}
    return found


ERROR_PREFIX = "error: "
"""How every refused input starts its message on stderr, whoever found it: ssilbench
(:class:`SsilbenchError`) or click (a malformed flag), so that scripts and readers see one
style."""


def show_click_error(exc: click.ClickException) -> None:
    """Click's message for a malformed command line, in ssilbench's style: for a usage
    error the usage line and where to find help, then ``error: MESSAGE``."""
    ctx = getattr(exc, "ctx", None)
    if isinstance(exc, click.UsageError) and ctx is not None:
        hint = f"Try '{ctx.command_path} {ctx.help_option_names[0]}' for help."
        click.echo(f"{ctx.get_usage()}\n{hint}\n", err=True)
    click.echo(f"{ERROR_PREFIX}{exc.format_message()}", err=True)


def main(argv: list[str] | None = None) -> None:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``); user errors exit with 2."""
    args = sys.argv[1:] if argv is None else argv
    debug = "--debug" in args
    try:
        code = cli.main(args=args, prog_name="ssilbench", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        show_click_error(exc)
        sys.exit(2)
    except SsilbenchError as exc:
        if debug:
            traceback.print_exc()
        click.echo(f"{ERROR_PREFIX}{exc}", err=True)
        sys.exit(exc.exit_code)
    if isinstance(code, int) and code:
        sys.exit(code)
