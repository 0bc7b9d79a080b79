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
"""

from __future__ import annotations

import json
import re
import shlex
import tempfile
from pathlib import Path

import click
import pytest

from ssilbench.cli import cli
from ssilbench.testing import cli_exit_code

from .docs_notebook import check_notebook
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


# --- the command line, introspected -------------------------------------------------------


def command(path: list[str]) -> click.Command:
    """The click command ``ssilbench PATH...``."""
    cmd: click.Command = cli
    for name in path:
        assert isinstance(cmd, click.Group), f"'{' '.join(path)}': {cmd.name} has no commands"
        sub = cmd.commands.get(name)
        assert sub is not None, f"'ssilbench {' '.join(path)}': no command '{name}'"
        cmd = sub
    return cmd


def options(cmd: click.Command) -> dict[str, click.Parameter]:
    """Every spelling of every option of ``cmd`` (help excluded) -> its parameter."""
    return {o: p for p in cmd.params if isinstance(p, click.Option)
            for o in (*p.opts, *p.secondary_opts) if o not in ("-h", "--help")}  # fmt: skip


def choices(param: click.Parameter) -> list[str] | None:
    return list(param.type.choices) if isinstance(param.type, click.Choice) else None


FLAG = re.compile(r"(?<![\w-])(--?[a-zA-Z][\w-]*)")


def _split(line: str) -> list[list[str]]:
    """The arguments of each ``ssilbench`` invocation of one line: shell words, comments
    dropped, a command ending at ``;`` or ``&&``, brackets and alternatives (``a|b``,
    ``[--x]``) kept as words."""
    words = shlex.split(line.replace(";", " ; ").replace("&&", " ; "), comments=True)
    out: list[list[str]] = []
    current: list[str] | None = None
    for word in words:
        if word == ";":
            current = None
        elif word == "ssilbench":
            current = []
            out.append(current)
        elif current is not None:
            current.append(word)
    return out


def check_invocation(words: list[str], where: str) -> None:
    """The command of ``ssilbench WORDS`` exists and every option it names is one of its
    own (or, before the command, a global one); literal values of a choice are choices."""
    path: list[str] = []
    cmd: click.Command = cli
    given: dict[str, click.Parameter] = options(cli)
    for i, raw in enumerate(words):
        word = raw.strip("[]()")
        if word in ("...", "|", "\\", "") or "…" in word:
            continue
        if word.startswith("-"):
            name = word.split("=")[0]
            if name in ("-h", "--help", "--version"):
                continue
            assert name in given, f"{where}: 'ssilbench {' '.join(path)}' has no option {name}"
            allowed = choices(given[name])
            value = words[i + 1].strip("[]") if i + 1 < len(words) else ""
            if allowed and value and not value.isupper() and value != "...":
                for v in value.split("|"):
                    assert v in allowed, f"{where}: {name} {v}: not one of {allowed}"
        elif isinstance(cmd, click.Group) and word in cmd.commands:
            path.append(word)
            cmd = cmd.commands[word]
            given = options(cmd) | (given if path == [word] else {})
        elif isinstance(cmd, click.Group) and re.fullmatch(r"[a-z][a-z-]*", word):
            raise AssertionError(f"{where}: 'ssilbench {' '.join(path)}' has no command {word!r}")


def check_commands(block: str, args: list[str], where: str) -> None:
    # Continuation lines (ending in a backslash) are one command.
    text = re.sub(r"\\\n\s*", " ", block)
    invocations = [w for line in text.splitlines() for w in _split(line)]
    assert invocations, f"{where}: no ssilbench command in the block"
    for words in invocations:
        check_invocation(words, where)


def check_synopsis(block: str, args: list[str], where: str) -> None:
    cmd = command(args)
    real = {p.opts[0]: p for p in options(cmd).values()}
    text = " ".join(block.split())
    documented = set(FLAG.findall(text.replace(f"ssilbench {' '.join(args)}", "")))
    spelled = {o for p in real.values() for o in (*p.opts, *p.secondary_opts)}
    assert documented <= spelled, f"{where}: not options: {sorted(documented - spelled)}"
    missing = {p.opts[-1] for p in real.values()
               if not set(p.opts + p.secondary_opts) & documented}  # fmt: skip
    assert not missing, f"{where}: options missing from the synopsis: {sorted(missing)}"
    for p in real.values():
        listed = re.search(rf"{re.escape(p.opts[-1])} ([\w-]+(?:\|[\w-]+)+)", text)
        if choices(p) and listed:
            assert listed.group(1).split("|") == choices(p), f"{where}: {p.opts[-1]} choices"


def check_flags(block: str, args: list[str], where: str) -> None:
    complete = "complete" in args
    cmd = command([a for a in args if a != "complete"])
    real = options(cmd)
    rows = [r for r in block.splitlines()[2:] if r.startswith("|")]
    documented: dict[str, str] = {}
    for row in rows:
        first = row.split("|")[1]
        for flag in FLAG.findall(first):
            documented[flag] = row
    assert documented, f"{where}: no flag in the table's first column"
    wrong = sorted(set(documented) - set(real))
    assert not wrong, f"{where}: not options of 'ssilbench {cmd.name}': {wrong}"
    for flag, row in documented.items():
        for choice in choices(real[flag]) or []:
            assert f"`{choice}`" in row, f"{where}: {flag}'s choice {choice!r} is not in its row"
    if complete:
        missing = sorted({p.opts[-1] for p in set(real.values())
                          if not set(p.opts + p.secondary_opts) & set(documented)})  # fmt: skip
        assert not missing, f"{where}: options missing from the table: {missing}"


# --- running commands ---------------------------------------------------------------------


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


# --- the leaderboard ----------------------------------------------------------------------

CELL = re.compile(r"^(\*\*)?(\d+\.\d{3}) \[(\d+\.\d{3}), (\d+\.\d{3})\] \(n=2\)(\*\*)?$")


def check_leaderboard(block: str, args: list[str], where: str) -> None:
    from ssilbench.cli.tasks import environment_options
    from ssilbench.data.datasets import task_dataset
    from ssilbench.leaderboard.render import to_markdown
    from ssilbench.leaderboard.table import build_table
    from ssilbench.planning.plan import TaskInfo
    from ssilbench.plugins import load_plugins
    from ssilbench.runner.worker import setup_provenance
    from ssilbench.runs.records import RunRecord
    from ssilbench.runs.spec import RunSpec

    lines = block.splitlines()
    env = next((line[3:] for line in lines if line.startswith("## ")), args[0] if args else "")
    assert env, f"{where}: name the environment (a '## ENV' heading, or the marker's argument)"
    family, task = env.split(":")
    environment = load_plugins().environments.create(family)
    options = environment_options(environment, family, {})  # what a run with no -o takes
    loaded = environment.load(task, options)
    spec = loaded.spec
    normaliser, episodes = spec.normaliser, spec.eval_episodes
    # What a run of the block's command records beside its versions: the task's dataset,
    # built here as a run builds it, and its family's paper protocol; its default steps.
    with tempfile.TemporaryDirectory() as root:
        info = TaskInfo(env, options, loaded, task_dataset(loaded, Path(root)),
                        environment=environment)  # fmt: skip
        setup = setup_provenance(info, Path(root))

    def exact(shown: str) -> float:
        """The score behind a 3-decimal value: a success rate over the protocol's episodes
        is a multiple of 1 / episodes (0.547 is 35/64), so the mean of two of them is
        rebuilt exactly; any other value is taken as shown."""
        k = round(float(shown) * episodes)
        return k / episodes if f"{k / episodes:.3f}" == shown else float(shown)

    table = [line for line in lines if line.startswith("|")]
    header = [c.strip() for c in table[0].strip("|").split("|")]
    budgets = [h.removeprefix("N_L=") for h in header[1:] if h.startswith("N_L=")]
    records = []
    for row in table[2:]:
        method, *cells = [c.strip() for c in row.strip("|").split("|")]
        for budget, cell in zip(budgets, cells, strict=False):
            m = CELL.match(cell)
            assert m, f"{where}: {cell!r} is not a two-seed cell"
            for seed, value in enumerate((exact(m.group(3)), exact(m.group(4)))):
                run = RunSpec(method=method, config={}, env=env, budget=budget,
                               options=options.model_dump(mode="json"),
                               seed=seed, steps=spec.default_steps, eval_every=50)  # fmt: skip
                records.append(RunRecord.of(run, score=value, metrics={}, report="final",
                                            normaliser=normaliser.model_dump(),
                                            n_labeled=int(budget), versions=setup))  # fmt: skip
    real = to_markdown(build_table(records)).rstrip("\n")
    if block.startswith("# ssilbench leaderboard"):
        assert block == real, f"{where}:\n{block}\n---- the code gives ----\n{real}"
    else:  # the table alone
        shown = "\n".join(line for line in real.splitlines() if line.startswith("|"))
        assert "\n".join(table) == shown, f"{where}:\n{block}\n---- the code gives ----\n{shown}"


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
