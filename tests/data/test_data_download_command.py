"""``ssilbench data download`` end to end, against a real HTTP server on 127.0.0.1.

The command is driven with a small third-party environment package that ships its own
``downloads.toml``, as a plugin author would: a download then its import, a corrupted
download, trust on first use stated, user errors (exit 2, one message), a user's own
manifest, and the question asked on a terminal. The library alone is tested in
test_data_download.py.
"""

from __future__ import annotations

import json
import sys
import textwrap

import numpy as np
import pytest

from ssilbench.data import download as dl
from ssilbench.data.local_server import LocalServer
from ssilbench.testing import cli_exit_code, usage_error

from .download_toys import TOY_MANIFEST, TOY_PLUGIN, sha, toy_frames

pytestmark = pytest.mark.usefixtures("no_proxy")  # tests/data/conftest.py


@pytest.fixture
def toy(cli, tmp_path):
    """A third-party environment package ``toy_downloads`` (plugin module + downloads.toml)
    and a mirror holding its files; returns (cli, mirror folder, hashes by file name)."""
    package = cli.plugin_dir / "toy_downloads"
    package.mkdir()
    (package / "__init__.py").write_text(textwrap.dedent(TOY_PLUGIN))
    mirror = tmp_path / "mirror"
    (mirror / "data").mkdir(parents=True)
    hashes = {}
    for task in ("alpha", "beta"):
        np.save(mirror / "data" / f"{task}.npy", toy_frames(task))
        hashes[f"data/{task}.npy"] = sha((mirror / "data" / f"{task}.npy").read_bytes())

    def write_manifest(with_hashes: bool) -> None:
        files = "".join(
            f'\n[[files]]\nname = "data/{t}.npy"\nurl = "https://example.org/toy/{t}.npy"\n'
            f'tasks = ["{t}"]\n'
            + (f'sha256 = "{hashes[f"data/{t}.npy"]}"\n' if with_hashes else "")
            for t in ("alpha", "beta")
        )
        text = TOY_MANIFEST.format(hashes="published" if with_hashes else "none: trust on "
                                   "first use", files=files)  # fmt: skip
        (package / "downloads.toml").write_text(text)

    write_manifest(True)
    cli.write_toy_manifest = write_manifest
    return cli, mirror, hashes


def _download(cli, server, *args):
    env_args = ["--data-root", str(cli.data), "--from-url", server.url]
    return cli("-p", "toy_downloads", "data", "download", "toy", *env_args, *args)


def test_download_then_import_then_the_dataset_opens(toy):
    cli, mirror, hashes = toy
    with LocalServer(mirror, drop_after={"data/beta.npy": 200}) as server:
        result = _download(cli, server, "--retries", "2")
        assert result.returncode == 0, result.stderr
        assert [g.range for g in server.gets("data/beta.npy")] == [None, "bytes=200-"]
        out = result.stdout
        assert "Toy data (https://example.org/toy)" in out
        assert "2 file(s) to download, size unknown" in out
        assert "data/alpha.npy  size unknown  sha256 from the toy manifest" in out
        assert "2 file(s) in place and checked" in out
        assert "toy/alpha: 40 frames" in out and "toy/beta: 40 frames" in out
        assert "connection lost" in result.stderr  # plain lines: not a terminal
        from ssilbench.data.datasets import TransitionStore

        store = TransitionStore.open(cli.data / "toy" / "beta", verify=True)
        np.testing.assert_array_equal(np.asarray(store.obs), toy_frames("beta"))
        # Again: the files are verified in place, nothing is fetched, the import is skipped.
        before = len(server.requests)
        again = _download(cli, server)
        assert again.returncode == 0, again.stderr
        assert len(server.requests) == before
        assert "already imported" in again.stderr


def test_a_corrupted_download_exits_2_and_imports_nothing(toy):
    cli, mirror, _ = toy
    np.save(mirror / "data" / "alpha.npy", toy_frames("alpha") + 1)  # not the published bytes
    with LocalServer(mirror) as server:
        result = _download(cli, server, "--games", "alpha")
    error = usage_error(result)
    assert "data/alpha.npy is corrupted or not the published file" in error
    assert not (cli.data / "toy").exists()
    assert not (cli.data / "downloads" / "toy" / "data" / "alpha.npy").exists()


def test_first_use_is_stated_in_the_output(toy):
    cli, mirror, _ = toy
    cli.write_toy_manifest(False)
    with LocalServer(mirror) as server:
        result = _download(cli, server, "--games", "beta", "--no-import")
    assert result.returncode == 0, result.stderr
    assert "No sha256 is published" in result.stdout
    assert "trust on first use" in result.stderr
    assert "ssilbench data import toy --from" in result.stdout
    assert not (cli.data / "toy").exists()
    lock = json.loads((cli.data / "downloads" / "toy" / dl.LOCK_NAME).read_text())
    assert list(lock["files"]) == ["data/beta.npy"]


@pytest.fixture
def in_process(toy, monkeypatch, capsys):
    """``ssilbench -p toy_downloads ARGS`` in this process (fast, for the refusals): the
    last line of standard error of a command that must exit with 2."""
    cli = toy[0]
    monkeypatch.syspath_prepend(str(cli.plugin_dir))

    def refused(*args: str) -> str:
        code = cli_exit_code("-p", "toy_downloads", *args)
        err = capsys.readouterr().err
        assert code == 2, err
        assert "Traceback" not in err
        return err.strip().splitlines()[-1]

    yield refused
    sys.modules.pop("toy_downloads", None)


def test_user_errors_exit_2_with_one_message(in_process, tmp_path):
    fine = ["data", "download", "toy", "--data-root", str(tmp_path), "--from-url",
            "http://127.0.0.1:9"]  # fmt: skip
    assert "Did you mean 'beta'" in in_process(*fine, "--games", "betta")
    assert "not an http(s) URL" in in_process("data", "download", "toy", "--from-url", "ftp://x")
    assert "give NAME=HEX" in in_process(*fine, "--sha256", "data/beta.npy")
    assert "Unknown file 'beta.npy'" in in_process(*fine, "--sha256", f"beta.npy={'a' * 64}")
    assert "takes a family" in in_process("data", "download", "toy:alpha")
    maze = in_process("data", "download", "maze")
    assert "Environment 'maze' publishes no downloads" in maze
    assert "ssilbench data build maze:all" in maze
    assert "Did you mean 'procgen'" in in_process("data", "download", "procgne")
    assert "Cannot reach 127.0.0.1:9" in in_process(*fine, "--games", "alpha", "--yes")


def test_a_user_manifest_replaces_the_plugins(toy, tmp_path):
    cli, mirror, hashes = toy
    own = tmp_path / "mine.toml"
    own.write_text(
        TOY_MANIFEST.format(
            hashes="mine",
            files=(
                '\n[[files]]\nname = "data/alpha.npy"\nurl = "https://example.org/a.npy"\n'
                'tasks = ["alpha"]\nsha256 = "' + "1" * 64 + '"\n'
            ),
        )
    )
    with LocalServer(mirror) as server:
        error = usage_error(_download(cli, server, "--manifest", str(own), "--games", "alpha"))
        assert f"expected {'1' * 64} (from the toy manifest)" in error
        fixed = _download(cli, server, "--manifest", str(own), "--games", "alpha",
                          "--sha256", f"data/alpha.npy={hashes['data/alpha.npy']}")  # fmt: skip
        assert fixed.returncode == 0, fixed.stderr
        assert "sha256 from --sha256" in fixed.stdout
    other = tmp_path / "other.toml"
    other.write_text(own.read_text().replace('family = "toy"', 'family = "maze"'))
    assert "describes 'maze', not 'toy'" in usage_error(
        cli("-p", "toy_downloads", "data", "download", "toy", "--manifest", str(other))
    )


class _Terminal:
    """Standard input that is a terminal, answering ``answer`` to the question."""

    def __init__(self, answer: str) -> None:
        self.answer = answer

    def isatty(self) -> bool:
        return True

    def readline(self) -> str:
        return self.answer + "\n"


def test_a_terminal_is_asked_before_the_download_and_yes_skips_it(toy, monkeypatch, capsys):
    cli = toy[0]
    monkeypatch.syspath_prepend(str(cli.plugin_dir))
    args = ["-p", "toy_downloads", "data", "download", "toy", "--data-root", str(cli.data),
            "--from-url", "http://127.0.0.1:9"]  # fmt: skip
    try:
        monkeypatch.setattr(sys, "stdin", _Terminal("n"))
        assert cli_exit_code(*args) == 130  # declined: nothing was fetched
        out = capsys.readouterr()
        assert "Start the download? [Y/n]" in out.out and "Aborted." in out.err
        assert "Cannot reach" not in out.err
        assert cli_exit_code(*args, "--yes") == 2  # not asked: it tried the (closed) port
        assert "Cannot reach 127.0.0.1:9" in capsys.readouterr().err
    finally:
        sys.modules.pop("toy_downloads", None)
