"""Measure the step times shipped with ssilbench (``ssilbench/runner/step_times.json``).

    python benchmarks/step_times.py benchmarks/paper/procgen.toml [--quick]
    python benchmarks/step_times.py --run "--method bc --env maze:10x10 --budgets 16,256"

For each sweep file given (and each ``--run``'s arguments of ``ssilbench run``),
``ssilbench run --dry-run --measure`` measures (4 steps of each stage, on this machine, one
torch thread, in a private
results folder) every step time the runs need, and the measurements enter the shipped table
under their portable keys (device kind, no torch version; ``ssilbench.runner.step_table``).
A dry run or ``plan`` of those sweeps then prices itself at once on any machine of that
device kind, and says where and at what load its step times were measured. Run it on a
quiet machine; ``uptime`` before and after says how quiet.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from ssilbench.runner.step_table import StepTable
from ssilbench.runner.timings import FILE, Timings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweeps", nargs="*", type=Path)
    parser.add_argument("--run", action="append", default=[], metavar="ARGS",
                        help="arguments of 'ssilbench run' (quoted), repeatable")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="the files' [quick] blocks")
    parser.add_argument("--table", type=Path, default=None, help="[default: the shipped one]")
    args = parser.parse_args(argv)
    table = StepTable(args.table) if args.table else StepTable()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "SSILBENCH_STEP_TABLE": "none"}
    sweeps = [["--sweep", str(s), *(["--quick"] if args.quick else [])] for s in args.sweeps]
    for what in [*sweeps, *map(shlex.split, args.run)]:
        with tempfile.TemporaryDirectory(prefix="ssilbench-step-times-") as tmp:
            command = [sys.executable, "-m", "ssilbench", "run", *what, "--dry-run", "--measure",
                       "--threads", "1", "--results", tmp, "--data-root",
                       str(Path(tmp) / "data")]  # fmt: skip
            subprocess.run(command, check=True, env=env)
            taken = table.add(Timings(Path(tmp) / FILE))
        print(f"{' '.join(what)}: {taken} measurement(s) into {table.path}", file=sys.stderr)
        table.save()  # after each: an interrupted refresh keeps what it measured


if __name__ == "__main__":
    main()
