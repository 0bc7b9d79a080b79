"""The guard of every command that writes files for the user (see :mod:`ssilbench.outputs`):
its ``--out`` may not land on the results store, the dataset cache or a file it reads."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any, TypeVar

from ssilbench.outputs import Kept, data_root, guard, inputs, results_store

F = TypeVar("F", bound=Callable[..., Any])

# Parameters that name files a command reads, and how a refusal names them.
READS = {
    "sweeps": "a sweep file this command reads",
    "sweep_file": "a sweep file this command reads",
    "exports": "a results export this command reads",
}


def guards_outputs(*params: str, data_allow: tuple[str, ...] = ()) -> Callable[[F], F]:
    """Check the command's output parameters ``params`` (e.g. ``"out"``) before it runs, and
    guard every file it writes while it runs: none may be the results store (``--results``,
    or its default), lie in the dataset cache (``--data-root``, or its default; except its
    ``data_allow`` subfolders), or be a file the command reads."""

    def decorate(command: F) -> F:
        @functools.wraps(command)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            with guard(kept_by(kwargs, data_allow),
                       [(f"--{p.replace('_', '-')}", kwargs.get(p)) for p in params]):  # fmt: skip
                return command(*args, **kwargs)

        return guarded  # type: ignore[return-value]

    return decorate


def kept_by(values: dict[str, Any], data_allow: tuple[str, ...] = ()) -> list[Kept]:
    """What a command with these parameter ``values`` must not overwrite."""
    # A command without --results or --data-root guards the folders those options default
    # to, as they are when it runs.
    results = values.get("results") or os.environ.get("SSILBENCH_RESULTS", "results")
    data = values.get("data_root") or os.environ.get("SSILBENCH_DATA", "~/.cache/ssilbench/data")
    kept = results_store(results)
    kept.append(data_root(data, data_allow))
    for param, what in READS.items():
        given = values.get(param)
        if given:
            kept += inputs([given] if isinstance(given, str) else given, what)
    return kept
