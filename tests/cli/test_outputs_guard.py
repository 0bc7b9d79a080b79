"""An output never overwrites an input: every command with ``--out`` refuses the results
store, its SQLite companions, the dataset cache and the files it reads (exit 2, every byte
left as it was), and every write goes through a temporary file of its own."""

from __future__ import annotations

import errno
import shutil
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import click
import pytest

from ssilbench.testing import cli_exit_code

SWEEP = Path(__file__).resolve().parents[2] / "benchmarks" / "paper" / "goal-complexity.toml"
RUN = ["run", "--method", "bc", "--env", "maze:10x10", "--budgets", "16", "--seeds", "0",
       "--steps", "20", "-q"]  # fmt: skip

# Each command with --out, with the arguments that take it to its writing.
COMMANDS = {
    "leaderboard": ["leaderboard", "--results", "{R}"],
    "results export": ["results", "export", "--results", "{R}"],
    "report": ["report", "--sweep", "{SWEEP}", "--results", "{R}"],
    "plot": ["plot", "--sweep", "{SWEEP}", "--results", "{R}"],
    "curves": ["curves", "--results", "{R}"],
    "analyze": ["analyze", "--env", "maze:10x10", "--results", "{R}"],
    "expert train": ["expert", "train", "maze:10x10", "--data-root", "{D}"],
}


def commands_with_out(group: click.Group, prefix: str = "") -> set[str]:
    found = set()
    for name, command in group.commands.items():
        path = f"{prefix}{name}"
        if isinstance(command, click.Group):
            found |= commands_with_out(command, path + " ")
        elif any("--out" in p.opts for p in command.params):
            found.add(path)
    return found


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    """A folder with a results store holding one finished run and a data root."""
    root = tmp_path_factory.mktemp("recorded")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        assert cli_exit_code(*RUN, "--results", "results", "--data-root", "data") == 0
    return root


@pytest.fixture
def place(recorded, tmp_path, monkeypatch) -> Path:
    """A private copy of ``recorded``, as the current folder (where the default --results
    of a command without the option, ``results``, is this store)."""
    shutil.copytree(recorded, tmp_path / "w")
    (tmp_path / "w" / "results" / "results.sqlite-wal").write_bytes(b"")
    shutil.copy(SWEEP, tmp_path / "w" / "sweep.toml")
    monkeypatch.chdir(tmp_path / "w")
    monkeypatch.setenv("SSILBENCH_DATA", str(tmp_path / "w" / "data"))
    monkeypatch.delenv("SSILBENCH_RESULTS", raising=False)
    return tmp_path / "w"


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}  # fmt: skip


def args_of(command: str, place: Path) -> list[str]:
    values = {"{R}": "results", "{D}": "data", "{SWEEP}": str(place / "sweep.toml")}
    return [values.get(a, a) for a in COMMANDS[command]]


def test_the_table_names_every_command_with_out():
    from ssilbench.cli import cli

    assert commands_with_out(cli) == set(COMMANDS)


TARGETS = {
    "the store": ("results/results.sqlite", "it is the results store"),
    "its write-ahead log": ("results/results.sqlite-wal", "SQLite wal file"),
    "its stage cache": ("results/cache/x.out", "results store's cache folder"),
    "the data root": ("data/board.out", "the dataset cache"),
    "a file it reads": ("sweep.toml", "sweep file this command reads"),
}


CASES = [(command, target) for command in sorted(COMMANDS) for target in sorted(TARGETS)
         if target != "a file it reads" or "{SWEEP}" in COMMANDS[command]]  # fmt: skip


@pytest.mark.parametrize("command, target", CASES)
def test_an_out_onto_what_ssilbench_keeps_is_refused_untouched(capsys, place, command, target):
    path, words = TARGETS[target]
    before = snapshot(place)
    code = cli_exit_code(*args_of(command, place), "--out", path)
    out = capsys.readouterr()
    assert code == 2, out
    assert "Refusing to write --out" in out.err and words in out.err, out.err
    assert "Traceback" not in out.err
    assert snapshot(place) == before


def test_a_symbolic_or_hard_link_to_the_store_is_refused(capsys, place):
    (place / "soft.md").symlink_to(place / "results" / "results.sqlite")
    (place / "hard.md").hardlink_to(place / "results" / "results.sqlite")
    before = snapshot(place / "results")
    for name in ("soft.md", "hard.md"):
        assert cli_exit_code("leaderboard", "--results", "results", "--out", name) == 2
        assert "it is the results store" in capsys.readouterr().err
    assert snapshot(place / "results") == before


def test_report_refuses_to_write_over_the_export_it_reads(capsys, place):
    assert cli_exit_code("results", "export", "--results", "results", "--out", "runs.jsonl") == 0
    before = (place / "runs.jsonl").read_bytes()
    code = cli_exit_code("report", "--sweep", str(place / "sweep.toml"), "--from", "runs.jsonl",
                         "--out", "runs.jsonl")  # fmt: skip
    assert code == 2 and "a results export this command reads" in capsys.readouterr().err
    assert (place / "runs.jsonl").read_bytes() == before


def test_outputs_beside_the_store_are_written(capsys, place):
    assert cli_exit_code("leaderboard", "--results", "results", "--out", "results/board.md") == 0
    assert (place / "results" / "board.md").read_text().startswith("# ssilbench leaderboard")


def test_the_library_export_refuses_its_own_store(place):
    from ssilbench.errors import OutputError
    from ssilbench.runs.exchange import export_results
    from ssilbench.runs.store import ResultsStore

    before = snapshot(place / "results")
    with ResultsStore.open_read_only(place / "results") as store, pytest.raises(OutputError):
        export_results(store, place / "results" / "results.sqlite")
    assert snapshot(place / "results") == before


def _export(args: tuple[str, str]) -> int:
    from ssilbench.runs.exchange import export_results
    from ssilbench.runs.store import ResultsStore

    results, out = args
    with ResultsStore.open_read_only(Path(results)) as store:
        return export_results(store, Path(out))


def test_eight_concurrent_exports_to_one_path_all_succeed(place):
    out = place / "runs.jsonl"
    with ProcessPoolExecutor(8) as pool:
        counts = list(pool.map(_export, [(str(place / "results"), str(out))] * 8))
    assert counts == [1] * 8
    assert out.read_text().count("\n") == 2  # the header and the run, whole
    assert [p.name for p in place.iterdir() if ".tmp" in p.name] == []


def test_writers_that_rename_at_the_same_moment_each_use_their_own_temporary(tmp_path, monkeypatch):
    import os
    import threading

    from ssilbench.outputs import write_atomic

    # Every writer has written its temporary file before any renames it: with one shared
    # temporary name, all but the first rename would find nothing to rename.
    together = threading.Barrier(8, timeout=10)
    real = os.replace

    def replace(src, dst):
        together.wait()
        real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    target, errors = tmp_path / "runs.jsonl", []

    def write(i: int) -> None:
        try:
            write_atomic(target, f"writer {i}\n")
        except Exception as exc:  # collected for the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert target.read_text().startswith("writer ")
    assert [p.name for p in tmp_path.iterdir()] == ["runs.jsonl"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    from ssilbench.errors import OutputError
    from ssilbench.outputs import write_atomic

    target = tmp_path / "board.md"
    target.write_text("old")
    real = Path.write_bytes

    def full(self, data):
        real(self, data[:3])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_bytes", full)
    with pytest.raises(OutputError, match="disk full"):
        write_atomic(target, "new text")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["board.md"]
