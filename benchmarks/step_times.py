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

    python benchmarks/step_times.py benchmarks/paper/procgen.toml --flops

``--flops`` measures nothing: a dry run of each sweep counts the FLOPs of every step time it
uses (``ssilbench.runner.step_flops``: shipped, or scaled from shipped ones) into
``ssilbench/runner/step_flops.json``, and the shipped entries' ``flops_per_step`` are filled
from them. Step times missing from the table are then scaled by FLOPs at once.

    python benchmarks/step_times.py --check

``--check`` says how good scaling is: each measured entry with counts is predicted from the
others, leaving out every entry of its own method config (all its label counts), and the
predicted and measured step times are printed with their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from ssilbench.runner.dryrun_report import key_words
from ssilbench.runner.step_flops import COUNT_ALL
from ssilbench.runner.step_table import StepTable
from ssilbench.runner.timings import FILE, Timings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweeps", nargs="*", type=Path)
    parser.add_argument("--run", action="append", default=[], metavar="ARGS",
                        help="arguments of 'ssilbench run' (quoted), repeatable")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="the files' [quick] blocks")
    parser.add_argument("--table", type=Path, default=None, help="[default: the shipped one]")
    parser.add_argument("--flops", action="store_true",
                        help="count FLOPs (no measuring) into step_flops.json")  # fmt: skip
    parser.add_argument("--check", action="store_true",
                        help="predict each entry from the others by FLOPs")  # fmt: skip
    args = parser.parse_args(argv)
    table = StepTable(args.table) if args.table else StepTable()
    if args.check:
        return check_scaling(table)
    if args.flops:
        return count_flops(args, table)
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


def count_flops(args: argparse.Namespace, table: StepTable) -> None:
    """Count the FLOPs of the sweeps' step times (a dry run each, with the table), then fill
    the table's ``flops_per_step`` from the counts."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "SSILBENCH_STEP_TABLE": str(table.path),
           "SSILBENCH_STEP_FLOPS": str(table.flops.path), COUNT_ALL: "1"}  # fmt: skip
    sweeps = [["--sweep", str(s), *(["--quick"] if args.quick else [])] for s in args.sweeps]
    for what in [*sweeps, *map(shlex.split, args.run)]:
        with tempfile.TemporaryDirectory(prefix="ssilbench-step-flops-") as tmp:
            command = [sys.executable, "-m", "ssilbench", "run", *what, "--dry-run",
                       "--threads", "1", "--results", tmp, "--data-root",
                       str(Path(tmp) / "data")]  # fmt: skip
            subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
        print(f"{' '.join(what)}: FLOPs counted into {table.flops.path}", file=sys.stderr)
    filled = StepTable(table.path)
    for key, m in filled.items.items():
        counted = filled.flops.get(key)
        for name, stage in m.stages.items():
            stage.flops_per_step = counted.stages.get(name) if counted else None
    filled.save()


def check_scaling(table: StepTable) -> None:
    """Print each measured entry's step times next to those scaled from the entries of other
    method configs (see the module docstring)."""
    print("entry | stage | measured s | scaled s | scaled / measured | scaled from")
    for key, m in sorted(table.items.items()):
        counted = table.flops.get(key)
        if counted is None:
            continue
        others = StepTable(table.path)
        others.items = {k: v for k, v in table.items.items() if _config(k) != _config(key)}
        scaled = others.scaled(key, counted)
        if scaled is None:
            continue
        sources = ", ".join(key_words(k) for k in scaled.scaled_from or ())
        rows = [(name, t.seconds_per_step, scaled.stages[name].seconds_per_step)
                for name, t in m.stages.items()]  # fmt: skip
        rows.append(("labelling per transition", m.other_seconds_per_transition,
                     scaled.other_seconds_per_transition))  # fmt: skip
        rows.append(("policy call", m.eval_forward_seconds, scaled.eval_forward_seconds))
        for name, measured, predicted in rows:
            print(
                f"{key_words(key)} | {name} | {measured:.4g} | {predicted:.4g} | "
                f"{predicted / measured:.2f} | {sources}"
            )


def _config(key: str) -> str:
    fields = json.loads(key)
    fields.pop("labeled", None)
    return json.dumps(fields, sort_keys=True)


if __name__ == "__main__":
    main()
