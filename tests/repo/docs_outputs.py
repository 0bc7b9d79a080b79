"""The kinds of the docs' checked examples that run commands and compare what they print
(``output``, ``errors``, ``plugins``), for ``tests/repo/test_docs_examples.py``: each command
runs in this process, in a temporary folder, and ``…`` in an example matches any text."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from ssilbench.testing import cli_exit_code


def run_cli(args: list[str], capsys, tmp: Path) -> tuple[int, str]:
    """``ssilbench ARGS`` in this process, in ``tmp`` (results and data go there); its exit
    code and its output (stdout and stderr)."""
    capsys.readouterr()
    code = cli_exit_code(*args)
    out = capsys.readouterr()
    return code, out.out + out.err


_PREFIX = re.compile(r"^(?:error|Error): ", flags=re.M)


def matches(expected: str, actual: str) -> bool:
    """``actual`` is ``expected`` where each ``…`` stands for any text; the prefix of an
    error line (``error:`` or click's ``Error:``) is ignored on both sides."""
    expected, actual = _PREFIX.sub("", expected.strip()), _PREFIX.sub("", actual.strip())
    pattern = ".*".join(re.escape(part) for part in expected.split("…"))
    return re.fullmatch(pattern, actual, flags=re.S) is not None


def check_output(block: str, args: list[str], where: str, capsys, tmp: Path) -> None:
    examples = re.split(r"^\$ ", block, flags=re.M)[1:]
    assert examples, f"{where}: no '$ ssilbench ...' line"
    for example in examples:
        line, _, expected = example.partition("\n")
        words = shlex.split(line)
        assert words[0] == "ssilbench", f"{where}: {line}"
        _, actual = run_cli(words[1:], capsys, tmp)
        assert matches(expected, actual), (
            f"{where}: $ {line}\nexpected:\n{expected}\ngot:\n{actual}"
        )


# --- the table of mistakes ----------------------------------------------------------------

R = ["--results", "results", "--data-root", "data"]
RUN = ["run", "--env", "maze:10x10", "--budgets", "16", *R]
# The table's first column -> the commands whose messages its row quotes.
ERRORS: dict[str, list[list[str]]] = {
    "unknown method": [["run", "--method", "bcc", "--env", "maze:10x10", "--budgets", "16", *R]],
    "unknown environment family": [
        ["run", "--method", "bc", "--env", "mazes:10x10", "--budgets", "16", *R]
    ],
    "unknown task": [["run", "--method", "bc", "--env", "maze:10x1", "--budgets", "16", *R]],
    "malformed environment id": [
        ["run", "--method", "bc", "--env", "maze:", "--budgets", "16", *R]
    ],
    "empty list": [["run", "--method", ",", "--env", "maze:10x10", "--budgets", "16", *R]],
    "malformed budget": [["run", "--method", "bc", "--env", "maze:10x10", "--budgets", "x", *R]],
    "zero budget": [["run", "--method", "bc", "--env", "maze:10x10", "--budgets", "0", *R]],
    "non-integer seed": [[*RUN, "--method", "bc", "--seeds", "a"]],
    "seed out of range": [[*RUN, "--method", "bc", "--seeds", "-1"]],
    "empty list item": [
        ["run", "--method", "bc", "--env", "maze:10x10", "--budgets", "16,,64", *R]
    ],
    "`--steps` below 1": [[*RUN, "--method", "bc", "--steps", "0"]],
    "`--steps` above 10^9": [[*RUN, "--method", "bc", "--steps", "99999999999999999999"]],
    "`--steps-scale` not above 0": [[*RUN, "--method", "bc", "--steps-scale", "0"]],
    "`--steps-scale` too large": [[*RUN, "--method", "bc", "--steps-scale", "inf"]],
    "`--steps` and `--steps-scale` together": [
        [*RUN, "--method", "bc", "--steps", "5", "--steps-scale", "0.5"]
    ],
    "`-o`/`-c` without `=`": [[*RUN, "--method", "bc", "-o", "state"]],
    "unknown option": [[*RUN, "--method", "bc", "-o", "stat=image"]],
    "invalid option value": [[*RUN, "--method", "bc", "-o", "state=img"]],
    "config key no method has": [[*RUN, "--method", "bc", "-c", "ar=lc"]],
    "config key scoped to a method not in the sweep": [
        [*RUN, "--method", "bc", "-c", "vm_idm.arch=lc"]
    ],
    "scoped key the method lacks": [[*RUN, "--method", "bc", "-c", "bc.foo=1"]],
    "invalid config value": [[*RUN, "--method", "bc", "-c", "lr=-1"]],
    "unknown architecture": [[*RUN, "--method", "bc", "-c", "arch=foo"]],
    "`-p` module not importable": [["-p", "nosuchmod", "list"]],
    "`-p no:` without a name": [["-p", "no:", "list"]],
    "`--quick` without `--sweep`": [[*RUN, "--method", "bc", "--quick"]],
    "`--method` or `--env` missing": [["run", "--method", "bc", *R]],
    "`--budgets` missing for a family without a paper protocol": [
        ["run", "--method", "bc", "--env", "maze:10x10", *R]
    ],
    "malformed flag": [
        ["leaderboard", "--export", "xlsx"],
        [*RUN, "--method", "bc", "--workers", "0"],
    ],
}


def check_errors(block: str, args: list[str], where: str, capsys, tmp: Path) -> None:
    rows = {}
    for row in block.splitlines()[2:]:
        # Cells split at '|' outside backticks (messages may quote a '|').
        cells = re.findall(r"((?:`[^`]*`|[^|`])+)", row)
        rows[cells[0].strip()] = "|".join(cells[1:])
    assert set(ERRORS) <= set(rows), f"{where}: rows gone: {sorted(set(ERRORS) - set(rows))}"
    wrong = []  # every row that disagrees, in one failure
    for mistake, commands in ERRORS.items():
        quoted = re.findall(r"`([^`]+)`", rows[mistake])
        for args_ in commands:
            code, out = run_cli(args_, capsys, tmp)
            last = out.strip().splitlines()[-1] if out.strip() else ""
            if code != 2 or not any(matches(q, last) for q in quoted):
                wrong.append(f"{mistake}: 'ssilbench {shlex.join(args_)}' (exit {code}) says\n"
                             f"  {last}\n  which is none of {quoted}")  # fmt: skip
    assert not wrong, f"{where}:\n" + "\n".join(wrong)


# --- plugins ------------------------------------------------------------------------------


def check_plugins(block: str, args: list[str], where: str, capsys, tmp: Path) -> None:
    code, out = run_cli(["list", "--json"], capsys, tmp)
    assert code == 0, out
    real: dict[tuple[str, str], set[str]] = {}
    for e in json.loads(out)["entries"]:
        real.setdefault((e["plugin"], e["kind"]), set()).add(e["name"])
    lines = block.splitlines()
    kinds = [c.strip().rstrip("s") for c in lines[0].strip("|").split("|")[1:]]
    documented: dict[tuple[str, str], set[str]] = {}
    for row in lines[2:]:
        plugin, *cells = [c.strip() for c in row.strip("|").split("|")]
        for kind, cell in zip(kinds, cells, strict=True):
            names = set(re.findall(r"`([^`]+)`", cell))
            if names:
                documented[(plugin.strip("`"), kind)] = names
    assert documented == real, f"{where}: the table says {documented}, list says {real}"
    # The human listing: one section per kind, in the table's order.
    code, out = run_cli(["list"], capsys, tmp)
    found = [
        out.lower().find(f"\n{kind}s") if i else out.lower().find(f"{kind}s")
        for i, kind in enumerate(kinds)
    ]
    assert -1 not in found and found == sorted(found), f"{where}: sections {kinds} in\n{out}"
