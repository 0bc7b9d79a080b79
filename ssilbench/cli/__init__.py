"""The ``ssilbench`` command: one module per command or command group, each a thin click
layer over a library function (``ssilbench.runner.launch`` for ``run`` and ``plan``).

:data:`cli` is the click group and :func:`main` the console script's entry point.
"""

from __future__ import annotations

from ssilbench.cli.app import State, cli, main
from ssilbench.cli.cache import cache
from ssilbench.cli.curves import curves
from ssilbench.cli.data import data
from ssilbench.cli.eval import eval_cmd
from ssilbench.cli.expert import expert
from ssilbench.cli.leaderboard import leaderboard
from ssilbench.cli.listing import list_cmd
from ssilbench.cli.results import results
from ssilbench.cli.run import plan, run
from ssilbench.cli.status import status
from ssilbench.cli.studies import analyze, plot, report

for _command in (list_cmd, run, plan, leaderboard, plot, report, analyze, data, expert, cache,
                 results, status, curves, eval_cmd):  # fmt: skip
    cli.add_command(_command)

__all__ = ["State", "cli", "main"]
