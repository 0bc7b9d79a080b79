"""The examples of docs/guide.md, docs/plugin-authors.md, docs/howto.md and README.md are
checked against what the code does.

A block is checked when the line before it (blank lines aside) is a marker
``<!-- checked: KIND ARGS -->``; the block is the fenced code block or the Markdown table that
follows. Blocks without a marker are not checked, so a section may show output that no test
can produce (a long sweep, a GPU). The kinds:

- ``synopsis CMD``: a usage line of ``ssilbench CMD``; its flags are exactly the command's
  options and each ``--flag a|b|c`` lists exactly the choices.
- ``flags CMD [complete]``: a table whose first column names flags; each is an option of
  ``ssilbench CMD`` (with ``complete``: every option is there), and a flag with choices has
  all of them in its row.
- ``commands``: every ``ssilbench ...`` line names existing commands and options (placeholders
  in capitals and ``[...]`` are fine), and a literal value of a flag with choices is one of
  them.
- ``output``: ``$ ssilbench ARGS`` lines, each followed by the output it prints; the command
  runs (in a temporary folder) and its output must match, ``…`` matching anything and a
  leading ``error:``/``Error:`` ignored (the message is checked, not the prefix's case).
- ``leaderboard``: a leaderboard in Markdown with two seeds per cell. For two seeds the
  interval is the seeds' range, so the seeds' values are read back from each cell (as
  multiples of 1 / the environment's evaluation episodes where they are), the runs are
  rebuilt with the environment's own normaliser, and the leaderboard they give must be the
  block, byte for byte (means, bold, AUC, footnotes).
- ``errors``: the table of mistakes and messages: each row this file knows a command for is
  run, and its message must be one of the row's quoted messages.
- ``plugins``: a table of plugin, methods, environments and architectures: exactly what
  ``ssilbench list --json`` reports; and ``ssilbench list`` prints its sections in the order
  of the table's columns.
- ``file PATH``: a Python block that is the file PATH of a plugin a walk-through builds; it
  must compile, and the ``example-output`` blocks of its page run with it.
- ``notebook``: a Python session (``>>>`` lines and what they print) run as a doctest in a
  temporary folder whose ``results`` store holds the guide's example runs
  (``docs_notebook.py``); skipped without pandas when it makes DataFrames.
- ``example-output``: ``output``, with the example plugin of ``docs/plugin-example``
  installed (its package and a ``.dist-info`` made from its ``pyproject.toml``, as pip lays
  them out) and the page's ``file`` blocks importable: a walk-through's commands run (in a
  temporary folder: give them ``--data-root``) and print what the page shows.

The checks of most kinds are in modules beside this one: ``docs_commands.py`` (synopsis,
flags, commands), ``docs_outputs.py`` (output, errors, plugins), ``docs_leaderboard.py`` and
``docs_notebook.py``. Those of the walk-throughs (file, example-output) are here, as they read
the other blocks of their page; ``docs_walkthroughs.py`` installs the example plugin.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .docs_commands import check_commands, check_flags, check_synopsis
from .docs_leaderboard import check_leaderboard
from .docs_notebook import check_notebook
from .docs_outputs import check_errors, check_output, check_plugins, matches
from .docs_walkthroughs import walkthrough_installed

ROOT = Path(__file__).resolve().parents[2]
DOCS = [
    ROOT / "docs" / "guide.md",
    ROOT / "docs" / "plugin-authors.md",
    ROOT / "README.md",
    ROOT / "docs" / "howto.md",
]
MARKER = re.compile(r"^<!-- checked: (\w[\w-]*)((?: [^ ]+)*) -->$")
# Every kind must be used somewhere, so that a marker cannot vanish unnoticed.
REQUIRED = {"synopsis", "flags", "commands", "output", "leaderboard", "errors", "plugins",
            "file", "example-output", "notebook"}  # fmt: skip


def marked_blocks() -> list[tuple[str, int, str, list[str], str]]:
    """(file name, line number, kind, arguments, block text) of every marked block."""
    found = []
    for path in DOCS:
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            m = MARKER.match(line.strip())
            if not m:
                continue
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            assert j < len(lines), f"{path.name}:{i + 1}: a marker with no block after it"
            if lines[j].startswith("```"):
                end = next(k for k in range(j + 1, len(lines)) if lines[k].startswith("```"))
                block = lines[j + 1 : end]
            else:
                assert lines[j].startswith("|"), f"{path.name}:{i + 1}: no block or table"
                end = next((k for k in range(j, len(lines)) if not lines[k].startswith("|")),
                           len(lines))  # fmt: skip
                block = lines[j:end]
            found.append((path.name, i + 1, m.group(1), m.group(2).split(), "\n".join(block)))
    return found


BLOCKS = marked_blocks()


def test_every_kind_of_check_is_used():
    assert {kind for _, _, kind, _, _ in BLOCKS} >= REQUIRED
    unknown = {kind for _, _, kind, _, _ in BLOCKS} - set(CHECKS)
    assert not unknown, f"unknown marker kinds: {unknown}"


# --- walk-throughs: plugin files and the example plugin --------------------------------


def check_file(block: str, args: list[str], where: str) -> None:
    assert len(args) == 1 and args[0].endswith(".py"), f"{where}: name the file: 'file PATH.py'"
    compile(block, f"{where} ({args[0]})", "exec")


def page_files(name: str) -> list[tuple[str, str]]:
    """(path, text) of every ``file`` block of the page ``name``."""
    return [(args[0], text) for page, _, kind, args, text in BLOCKS
            if page == name and kind == "file"]  # fmt: skip


def check_example_output(block: str, args: list[str], where: str, capsys, tmp: Path) -> None:
    page = where.split(":")[0]
    with walkthrough_installed(tmp / "site", page_files(page)):
        check_output(block, args, where, capsys, tmp)


CHECKS = {
    "synopsis": check_synopsis,
    "flags": check_flags,
    "commands": check_commands,
    "output": check_output,
    "leaderboard": check_leaderboard,
    "errors": check_errors,
    "plugins": check_plugins,
    "file": check_file,
    "example-output": check_example_output,
    "notebook": check_notebook,
}
NEEDS_CLI = {"output", "errors", "plugins", "example-output", "notebook"}


@pytest.mark.parametrize(
    ("name", "line", "kind", "args", "block"), BLOCKS, ids=[f"{b[0]}:{b[1]}:{b[2]}" for b in BLOCKS]
)
def test_a_marked_block_agrees_with_the_code(
    name, line, kind, args, block, capsys, tmp_path, monkeypatch
):
    where = f"{name}:{line}"
    if kind in NEEDS_CLI:
        monkeypatch.chdir(tmp_path)
        # The installed plugins only, whatever the calling shell names.
        monkeypatch.delenv("SSILBENCH_PLUGINS", raising=False)
        monkeypatch.delenv("SSILBENCH_DISABLE_PLUGIN_AUTOLOAD", raising=False)
        monkeypatch.setenv("COLUMNS", "120")
        CHECKS[kind](block, args, where, capsys, tmp_path)
    else:
        CHECKS[kind](block, args, where)


def test_the_checks_catch_a_wrong_example(capsys, tmp_path, monkeypatch):
    """Each kind refuses an example that is wrong in the way docs drift."""
    with pytest.raises(AssertionError, match="not options"):
        check_synopsis("ssilbench leaderboard [--results DIR] [--colour]", ["leaderboard"], "x")
    with pytest.raises(AssertionError, match="missing from the synopsis"):
        check_synopsis("ssilbench leaderboard [--export md|csv]", ["leaderboard"], "x")
    with pytest.raises(AssertionError, match="choices"):
        check_synopsis(
            "ssilbench leaderboard [--results DIR] [--export md|csv|json] [--out FILE] "
            "[--metric NAME] [--compare A B] [--latest]",
            ["leaderboard"],
            "x",
        )
    with pytest.raises(AssertionError, match="no option --colour"):
        check_commands("ssilbench run --method bc --colour red", [], "x")
    with pytest.raises(AssertionError, match="not one of"):
        check_commands("ssilbench leaderboard --export xlsx", [], "x")
    with pytest.raises(AssertionError, match="no command"):
        check_commands("ssilbench leaderbord --export md", [], "x")
    assert matches("error: Unknown method 'bcc'. … Available: …", "Error: Unknown method "
                   "'bcc'. Did you mean 'bc'? Available: bc, vm_idm.")  # fmt: skip
    assert not matches("Unknown method 'bcc'. Available: bc.", "Unknown method 'bcc'. "
                       "Available: bc, uva.")  # fmt: skip
    good = "\n".join([
        "| method | N_L=16 | N_L=64 | AUC |", "|---|---:|---:|---:|",
        "| bc | **0.500 [0.400, 0.600] (n=2)** | **0.750 [0.500, 1.000] (n=2)** | **0.625** |",
    ])  # fmt: skip
    check_leaderboard(good, ["maze:10x10"], "x")
    with pytest.raises(AssertionError, match="the code gives"):  # a mean that is not the seeds'
        check_leaderboard(good.replace("0.750", "0.760"), ["maze:10x10"], "x")
    with pytest.raises(SyntaxError):
        check_file("def broken(:\n", ["reach_plugin/broken.py"], "x")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(AssertionError, match="expected"):  # the example is installed, listed
        check_example_output("$ ssilbench list --json\n{}", [], "x.md:1", capsys, tmp_path)
    with pytest.raises(AssertionError, match="list says"):
        check_plugins("| plugin | methods |\n|---|---|\n| `baselines` | `bc` |", [], "x",
                      capsys, tmp_path)  # fmt: skip
    session = (">>> from ssilbench.leaderboard.notebook import open_results\n"
               '>>> len(open_results("results"))\n')  # fmt: skip
    for folder, count in (("right", "9"), ("wrong", "8")):  # a count the store does not give
        (tmp_path / folder).mkdir()
        monkeypatch.chdir(tmp_path / folder)
        if count == "9":
            check_notebook(session + count, [], "x", capsys, tmp_path / folder)
            continue
        with pytest.raises(AssertionError, match="Expected"):
            check_notebook(session + count, [], "x", capsys, tmp_path / folder)
