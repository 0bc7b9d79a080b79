"""The command-line kinds of the docs' checked examples (``synopsis``, ``flags``,
``commands``), for ``tests/repo/test_docs_examples.py``: ``ssilbench``'s click commands
introspected, and each documented command, flag and choice looked up in them."""

from __future__ import annotations

import re
import shlex

import click

from ssilbench.cli import cli


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
