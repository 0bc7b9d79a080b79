"""OS errors on user paths become one clear message (exit 2, no traceback, no temp file
left, nothing claimed), and output file names built from user names cannot escape."""

from __future__ import annotations

import errno
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ssilbench.testing import cli_exit_code

TINY = ["--method", "bc", "--env", "maze:10x10", "--budgets", "16", "--seeds", "0"]
TINY += ["--steps", "20", "-q"]


def cli(capsys, *args: str) -> tuple[int, str]:
    """Run the CLI in-process: (exit code, stdout + stderr)."""
    code = cli_exit_code(*args)
    out = capsys.readouterr()
    return code, out.out + out.err


def run(capsys, results: Path, data: Path, *extra: str) -> tuple[int, str]:
    return cli(capsys, "run", *TINY, "--results", str(results), "--data-root", str(data), *extra)


def rows(results: Path) -> list[tuple]:
    if not (results / "results.sqlite").exists():
        return []
    db = sqlite3.connect(results / "results.sqlite")
    try:
        return db.execute("SELECT run_id, status FROM runs").fetchall()
    finally:
        db.close()


def leftovers(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if "tmp" in p.name.lower()] if folder.exists() else []


MISSING = [("ray", []), ("submitit", ["--slurm-cluster", "local"])]


@pytest.mark.parametrize("package, flags", MISSING)
def test_a_missing_executor_package_is_refused_before_any_run_is_claimed(
    capsys, tmp_path, monkeypatch, package, flags
):
    monkeypatch.setitem(sys.modules, package, None)
    kind = "ray" if package == "ray" else "slurm"
    code, out = run(capsys, tmp_path / "R", tmp_path / "D", "--executor", kind, *flags)
    assert code == 2, out
    assert f"needs the package '{package}'" in out and "Traceback" not in out
    assert rows(tmp_path / "R") == []


def _file_in_the_way(tmp: Path) -> Path:
    (tmp / "afile").write_text("x")
    return tmp / "afile" / "data"


@pytest.mark.parametrize(
    "where, cause",
    [(_file_in_the_way, "not a folder"), (lambda tmp: Path("/proc/self/ssilbench"), "/proc")],
)
def test_an_unwritable_data_root_is_one_message(capsys, tmp_path, where, cause):
    data = where(tmp_path)
    code, out = run(capsys, tmp_path / "R", data)
    assert code == 2, out
    assert "Cannot write the dataset" in out and cause in out and "Traceback" not in out
    assert rows(tmp_path / "R") == []


def test_a_read_only_data_root_is_one_message(capsys, tmp_path, monkeypatch):
    mkdir = Path.mkdir

    def refuse(self, *args, **kwargs):
        if str(self).startswith(str(tmp_path / "D")):
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        return mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", refuse)
    code, out = run(capsys, tmp_path / "R", tmp_path / "D")
    assert code == 2, out
    assert "read-only file system" in out and str(tmp_path / "D") in out
    assert rows(tmp_path / "R") == []


def test_a_full_disk_while_building_a_dataset_leaves_no_half_store(capsys, tmp_path, monkeypatch):
    import numpy as np

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(np, "save", full)
    code, out = run(capsys, tmp_path / "R", tmp_path / "D")
    assert code == 2, out
    assert "disk full" in out and str(tmp_path / "D") in out and "Traceback" not in out
    assert [p for p in (tmp_path / "D").rglob("*") if p.is_file()] == []
    assert [p for p in (tmp_path / "D").rglob(".*")] == []
    assert rows(tmp_path / "R") == []


def test_a_full_disk_under_the_block_writer_discards_the_partial_store(tmp_path, monkeypatch):
    import numpy as np

    from ssilbench.data.dataset_writer import AppendedArray, TransitionStoreWriter
    from ssilbench.errors import DatasetError

    def full(self, block):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(AppendedArray, "append", full)
    root = tmp_path / "store"
    writer = TransitionStoreWriter(root, (2,), np.float32, {"by": "test"})
    with pytest.raises(DatasetError, match="disk full") as caught:
        writer.append(np.zeros((3, 2)), np.zeros(3), np.zeros(3), np.array([0, 0, 1]))
    assert str(root) in str(caught.value)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(DatasetError, match="not a folder"):
        TransitionStoreWriter(_file_in_the_way(tmp_path) / "s", (2,), np.float32, {})


TORCH_FULL = (
    "[enforce fail at inline_container.cc:595] . PytorchStreamWriter failed writing file "
    "data/0: file write failed"
)


def test_a_full_disk_under_the_stage_cache_says_disk_full(capsys, tmp_path, monkeypatch):
    import torch

    def full(*args, **kwargs):
        raise RuntimeError(TORCH_FULL)

    monkeypatch.setattr(torch, "save", full)
    code, out = run(capsys, tmp_path / "R", tmp_path / "D")
    assert "disk full" in out and str(tmp_path / "R" / "cache") in out, out
    assert "inline_container" not in out and "Traceback" not in out
    assert leftovers(tmp_path / "R" / "cache") == []


@pytest.mark.parametrize("exc", [OSError(errno.ENOSPC, "No space left on device"),
                                 RuntimeError(TORCH_FULL)])  # fmt: skip
def test_save_atomic_names_the_file_and_a_full_disk(tmp_path, monkeypatch, exc):
    import torch

    from ssilbench.errors import ResultsStoreError
    from ssilbench.train.checkpoint import RunCheckpoints, save_atomic

    def full(*args, **kwargs):
        raise exc

    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(ResultsStoreError, match="disk full") as caught:
        save_atomic({"a": 1}, tmp_path / "x.pt")
    assert str(tmp_path / "x.pt") in str(caught.value)
    with pytest.raises(ResultsStoreError, match="disk full"):
        RunCheckpoints(tmp_path / "ck", 5, []).save("bc", {"step": 1})
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == []


def test_a_write_cut_short_under_torch_save_says_disk_full(tmp_path):
    # A file-size limit cuts the write short as a full disk does; torch then says
    # "[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598".
    code = f"""
import resource, signal, torch
from ssilbench.train.checkpoint import save_atomic
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (40000, 40000))
save_atomic({{"x": torch.zeros(100000)}}, __import__("pathlib").Path({str(tmp_path / "x.pt")!r}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("ssilbench.errors.ResultsStoreError: Cannot write"), out.stderr
    assert "disk full" in last and str(tmp_path / "x.pt") in last
    assert list(tmp_path.iterdir()) == []


def test_save_atomic_leaves_other_errors_alone(tmp_path, monkeypatch):
    import torch

    from ssilbench.train.checkpoint import save_atomic

    def broken(*args, **kwargs):
        raise RuntimeError("cannot pickle this")

    monkeypatch.setattr(torch, "save", broken)
    with pytest.raises(RuntimeError, match="cannot pickle"):
        save_atomic({"a": 1}, tmp_path / "x.pt")
    assert list(tmp_path.iterdir()) == []


def test_leaderboard_out_on_a_full_disk_leaves_no_temp_file(capsys, tmp_path, monkeypatch):
    assert run(capsys, tmp_path / "R", tmp_path / "D")[0] == 0
    real = Path.write_bytes

    def full(self, data):
        if self.name.endswith(".tmp"):
            real(self, data[:4])
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, data)

    monkeypatch.setattr(Path, "write_bytes", full)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    code, out = cli(capsys, "leaderboard", "--results", str(tmp_path / "R"),
                    "--out", str(out_dir / "board.md"))  # fmt: skip
    assert code == 2, out
    assert "disk full" in out and str(out_dir / "board.md") in out
    assert list(out_dir.iterdir()) == []


def test_plot_into_an_unwritable_folder_is_one_message(capsys, tmp_path):
    from ssilbench.errors import OutputError
    from ssilbench.studies.figures import pyplot, save

    fig = pyplot().figure()
    with pytest.raises(OutputError, match="not a folder") as caught:
        save(fig, _file_in_the_way(tmp_path) / "fig")
    assert "afile" in str(caught.value)


@pytest.mark.parametrize("name", ["../../x", "/tmp/abs", "a/b", "bad\nname", "..", "a b"])
def test_a_sweep_name_that_is_not_a_plain_name_is_refused(tmp_path, name):
    from ssilbench.errors import UsageError
    from ssilbench.planning.sweepfile import load_sweep_file

    path = tmp_path / "s.toml"
    path.write_text(f"name = {json.dumps(name)}\n")  # a JSON string is a TOML string
    with path.open("a") as fh:
        fh.write('[[block]]\nmethods = ["bc"]\nenvs = ["maze:10x10"]\nbudgets = [16]\n')
    with pytest.raises(UsageError, match="plain name"):
        load_sweep_file(path)


def test_figure_names_are_sanitised_as_a_second_guard():
    from ssilbench.studies.study import figure_name

    class Escaping:
        name = "../../etc/x"

    assert figure_name(Escaping(), quick=True) == "etc_x-quick"


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_the_file_name_sanitiser_never_escapes_its_folder(name):
    from ssilbench.errors import safe_file_name

    cleaned = safe_file_name(name)
    assert cleaned and "/" not in cleaned and "\\" not in cleaned and ".." not in cleaned
    assert not Path(cleaned).is_absolute() and Path(cleaned).name == cleaned
    assert all(ch.isprintable() for ch in cleaned)


def test_markdown_escapes_names_that_would_break_a_table():
    from ssilbench.leaderboard.render import md_escape

    escaped = md_escape("a|<script>`x`\nb")
    assert "|" not in escaped.replace("\\|", "") and "<" not in escaped and "\n" not in escaped
    assert "`" not in escaped.replace("\\`", "")


def test_the_markdown_leaderboard_escapes_every_name_it_prints():
    from ssilbench.leaderboard.render import to_markdown
    from ssilbench.leaderboard.table import build_table
    from ssilbench.runs.records import RunRecord
    from ssilbench.runs.spec import RunSpec

    env = 'maze:10x10 (goal="<script>|x")'
    records = [
        RunRecord.of(RunSpec(method="bc", config={}, env="maze:10x10", options={}, budget="16",
                             seed=seed, steps=20, eval_every=20),
                     "bc `a|b`", env, score=0.5, metrics={}, finished_at=1.0)
        for seed in (0, 1)
    ]  # fmt: skip
    text = to_markdown(build_table(records))
    assert "<script>" not in text and "&lt;script&gt;" in text
    assert "bc \\`a\\|b\\`" in text
    for line in text.splitlines():
        if line.startswith("| bc"):
            assert line.count(" | ") == 2  # method, one budget, AUC: no cell broken
