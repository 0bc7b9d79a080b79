"""Nothing a download brings can corrupt or poison what ``ssilbench data download`` keeps.

Against a real HTTP server on 127.0.0.1: two commands downloading one file at once, a bad
first download (not a zip, a transfer cut without Content-Length) followed by the good
file, archives whose members are named like ssilbench's own files, archives over the size,
ratio and free-space bounds, and a publisher that replaced a file trusted on first use.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from ssilbench.cli.download_progress import SilentReporter
from ssilbench.data import download as dl
from ssilbench.data.local_server import LocalServer
from ssilbench.testing import cli_exit_code

from .download_toys import TOY_MANIFEST, TOY_PLUGIN, download, manifest, sha, toy_frames

RANDOM = np.random.default_rng(1).integers(0, 256, 2_000_000, dtype=np.uint8).tobytes()


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


def npy_bytes(task: str, tmp: Path) -> bytes:
    np.save(tmp / f"{task}.npy", toy_frames(task))
    return (tmp / f"{task}.npy").read_bytes()


def zip_of(path: Path, members: dict[str, bytes]) -> bytes:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path.read_bytes()


@pytest.fixture
def toy(cli, tmp_path: Path):
    """The third-party package ``toy_downloads`` with a manifest of trust-on-first-use files
    (``data/alpha.npy``, ``data/beta.npy``), a mirror holding them and ``archive.toml``, a
    manifest of one zip holding both; returns (cli, mirror)."""
    package = cli.plugin_dir / "toy_downloads"
    package.mkdir()
    (package / "__init__.py").write_text(TOY_PLUGIN)
    files = "".join(f'\n[[files]]\nname = "data/{t}.npy"\nurl = "https://example.org/{t}.npy"\n'
                    f'tasks = ["{t}"]\n' for t in ("alpha", "beta"))  # fmt: skip
    (package / "downloads.toml").write_text(TOY_MANIFEST.format(hashes="none", files=files))
    archive = (
        '\n[[files]]\nname = "toy.zip"\nurl = "https://example.org/toy.zip"\n'
        'unpack = "zip"\ntasks = ["alpha", "beta"]\n'
    )
    (tmp_path / "archive.toml").write_text(TOY_MANIFEST.format(hashes="none", files=archive))
    mirror = tmp_path / "mirror"
    (mirror / "data").mkdir(parents=True)
    for task in ("alpha", "beta"):
        (mirror / "data" / f"{task}.npy").write_bytes(npy_bytes(task, tmp_path))
    good = {f"data/{t}.npy": (mirror / "data" / f"{t}.npy").read_bytes() for t in ("alpha", "beta")}
    zip_of(mirror / "toy.zip", good)
    return cli, mirror


def _args(cli, server: LocalServer, *more: str) -> list[str]:
    return ["-p", "toy_downloads", "data", "download", "toy", "--data-root", str(cli.data),
            "--from-url", server.url, *more]  # fmt: skip


@pytest.fixture
def run_here(toy, monkeypatch, capsys):
    """``ssilbench ARGS`` in this process: (exit code, standard error)."""
    monkeypatch.syspath_prepend(str(toy[0].plugin_dir))

    def run(*args: str) -> tuple[int, str]:
        code = cli_exit_code(*args)
        err = capsys.readouterr().err
        assert "Traceback" not in err
        return code, err

    yield run
    sys.modules.pop("toy_downloads", None)


# --- concurrency -----------------------------------------------------------------------------


def _lines_until(stream, needle: str, seen: list[str], found: threading.Event) -> None:
    for line in stream:
        seen.append(line)
        if needle in line:
            found.set()


def test_two_concurrent_downloads_of_one_file_give_one_correct_file(toy):
    cli, mirror = toy
    gate = threading.Event()
    with LocalServer(mirror, gate=gate) as server:
        args = [sys.executable, "-m", "ssilbench", *_args(cli, server, "--games", "alpha")]
        first = subprocess.Popen(args, env=cli.env(), cwd=cli.tmp, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        deadline = time.monotonic() + 60
        while not server.gets("data/alpha.npy") and time.monotonic() < deadline:
            time.sleep(0.05)
        # The first holds the file's lock, its transfer held back by the server: the second
        # must wait for it rather than write the same .part.
        second = subprocess.Popen(args, env=cli.env(), cwd=cli.tmp, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        lines: list[str] = []
        waiting = threading.Event()
        reader = threading.Thread(target=_lines_until, args=(second.stderr, "waiting", lines,
                                                             waiting))  # fmt: skip
        reader.start()
        assert waiting.wait(60), "".join(lines)
        gate.set()
        out1, err1 = first.communicate(timeout=120)
        second.wait(timeout=120)
        reader.join(timeout=10)
        assert first.returncode == 0, err1
        assert second.returncode == 0, "".join(lines)
        assert len(server.gets("data/alpha.npy")) == 1  # the second found it in place
    folder = cli.data / "downloads" / "toy"
    published = (mirror / "data" / "alpha.npy").read_bytes()
    assert (folder / "data" / "alpha.npy").read_bytes() == published
    lock = json.loads((folder / dl.LOCK_NAME).read_text())
    assert lock["files"]["data/alpha.npy"]["sha256"] == sha(published)
    assert "already here, verifying" in "".join(lines)
    assert sorted(p.name for p in (folder / "data").iterdir()) == ["alpha.npy"]  # no leftovers
    from ssilbench.data.datasets import TransitionStore

    store = TransitionStore.open(cli.data / "toy" / "alpha", verify=True)
    np.testing.assert_array_equal(np.asarray(store.obs), toy_frames("alpha"))


def test_concurrent_records_of_other_files_all_reach_the_lock_file(tmp_path):
    lock = dl.Lock.read(tmp_path)
    names = [f"file{i}.bin" for i in range(8)]
    threads = [
        threading.Thread(target=dl.Lock.read(tmp_path).record, args=(n, "a" * 64, 1, "https://x"))
        for n in names
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(dl.Lock.read(tmp_path).files) == names
    assert lock.path.exists() and not list(tmp_path.glob("*.tmp"))


# --- a bad first download, then the good file ----------------------------------------------


@pytest.mark.parametrize("bad", ["not a zip", "zip cut without Content-Length"])
def test_a_bad_first_archive_then_the_good_one_succeeds_on_the_second_try(toy, run_here, bad):
    cli, mirror = toy
    good = (mirror / "toy.zip").read_bytes()
    server_options = {}
    if bad == "not a zip":
        (mirror / "toy.zip").write_bytes(b"PK no zip here " * 1000)
    else:
        server_options = {"no_length": {"toy.zip"}, "drop_after": {"toy.zip": len(good) // 2}}
    manifest_file = str(cli.tmp / "archive.toml")
    with LocalServer(mirror, **server_options) as server:
        code, err = run_here(*_args(cli, server, "--manifest", manifest_file))
        assert code == 2, err
        message = err.strip().splitlines()[-1]
        assert "toy.zip is not a readable zip archive" in message
        assert "It was moved aside to" in message
        assert message.endswith("run the command again to download it afresh.")
        folder = cli.data / "downloads" / "toy"
        assert not dl.Lock.read(folder).files  # nothing trusted
        assert not (cli.data / "toy").exists()
        (mirror / "toy.zip").write_bytes(good)  # the server serves the good file again
        code, err = run_here(*_args(cli, server, "--manifest", manifest_file))
        assert code == 0, err
    assert dl.Lock.read(folder).files["toy.zip"]["sha256"] == sha(good)
    assert len(list(folder.glob("toy.zip.rejected-*"))) == 1
    assert (cli.data / "toy" / "beta" / "manifest.json").is_file()


def test_a_cut_file_that_fails_its_import_is_moved_aside_then_downloaded_again(toy, run_here):
    cli, mirror = toy
    size = (mirror / "data" / "alpha.npy").stat().st_size
    cut = {"no_length": {"data/alpha.npy"}, "drop_after": {"data/alpha.npy": size // 2}}
    with LocalServer(mirror, **cut) as server:
        code, err = run_here(*_args(cli, server, "--games", "alpha"))
        assert code == 2, err
        message = err.strip().splitlines()[-1]
        assert "cannot be read" in message  # the importer's own message, then what to do
        assert "No sha256 vouches for the downloaded file(s), so they were moved aside" in message
        assert message.endswith("run the command again to download them afresh.")
        folder = cli.data / "downloads" / "toy"
        assert not dl.Lock.read(folder).files
        code, err = run_here(*_args(cli, server, "--games", "alpha"))
        assert code == 0, err
    published = (mirror / "data" / "alpha.npy").read_bytes()
    assert (folder / "data" / "alpha.npy").read_bytes() == published


def test_refresh_forgets_a_recorded_hash_when_the_publisher_replaced_the_file(tmp_path):
    served = tmp_path / "mirror"
    served.mkdir()
    (served / "blob.bin").write_bytes(RANDOM[:1000])
    m = manifest([{"name": "blob.bin", "url": "https://example.org/blob.bin"}])
    dest = tmp_path / "dest"
    with LocalServer(served) as server:
        download(m, dest, server)
        (dest / "blob.bin").unlink()
        (served / "blob.bin").write_bytes(RANDOM[1000:2000])  # a new version
        with pytest.raises(dl.DownloadError) as err:
            download(m, dest, server)
        assert "from the lock file" in str(err.value) and "--refresh" in str(err.value)
        planned = dl.plan_downloads(m, m.files, dest, server.url)
        lines: list[str] = []
        from ssilbench.cli.download_progress import PlainReporter

        dl.download_all(m, planned, dest, PlainReporter(lines.append), refresh=True)
    assert any("forgot the sha256 recorded on its first download" in line for line in lines)
    assert dl.Lock.read(dest).files["blob.bin"]["sha256"] == sha(RANDOM[1000:2000])


# --- archives: names, size, ratio, free space -----------------------------------------------

RESERVED = [
    "downloads.lock.json",
    "Downloads.Lock.JSON",  # the same file on a case-insensitive disk
    "downloads.lock.json.4242.tmp",
    ".good.zip.unpacked",
    "sub/.other.zip.unpacked",
    ".good.zip.unpacking/x.npz",
    "game/0.npz.download-lock",
    "game/0.npz.part",
    "game/0.npz.rejected-20260101T000000Z",
    "toy/alpha/manifest.json",
    "toy/alpha/.verified.json",
    ".alpha.partial/obs.npy",
    "stagekey.lease",
    "good.zip",  # the archive itself, or another file of the manifest
    "GOOD.ZIP/x",
]


@pytest.mark.parametrize("member", RESERVED)
def test_members_named_like_ssilbenchs_own_files_are_refused(tmp_path, member):
    root = tmp_path / "mirror"
    root.mkdir()
    zip_of(root / "good.zip", {"game/1.npz": b"data", member: b"forged"})
    m = manifest([{"name": "good.zip", "url": "https://x.org/good.zip", "unpack": "zip"}])
    dest = tmp_path / "dest"
    dest.mkdir()
    trusted = '{"format": "ssilbench.download-lock", "version": 1, "files": {}}\n'
    (dest / dl.LOCK_NAME).write_text(trusted)
    with LocalServer(root) as server, pytest.raises(dl.DownloadError) as err:
        download(m, dest, server)
    message = str(err.value)
    assert f"holds the member {member!r}" in message and "the archive is refused" in message
    assert "moved aside to" in message
    assert (dest / dl.LOCK_NAME).read_text() == trusted
    assert sorted(p.name for p in dest.iterdir()) == [dl.LOCK_NAME, *[
        p.name for p in dest.glob("good.zip.rejected-*")]]  # fmt: skip


def _served_archive(tmp_path: Path, members: dict[str, bytes]) -> tuple[Path, dl.Manifest]:
    root = tmp_path / "mirror"
    root.mkdir()
    zip_of(root / "big.zip", members)
    return root, manifest([{"name": "big.zip", "url": "https://x.org/big.zip", "unpack": "zip"}])


def test_an_archive_over_the_size_limit_is_refused_from_its_central_directory(tmp_path):
    root, m = _served_archive(tmp_path, {"a/x.bin": RANDOM})
    dest = tmp_path / "dest"
    with LocalServer(root) as server:
        with pytest.raises(dl.DownloadError) as err:
            planned = dl.plan_downloads(m, m.files, dest, server.url)
            dl.download_all(m, planned, dest, SilentReporter(),
                            limits=dl.UnpackLimits(max_bytes=1_000_000))  # fmt: skip
        message = str(err.value)
        assert "would unpack to 2.0 MB (1 members), over the limit of 1.0 MB" in message
        assert "--max-unpacked 2MB" in message and str(dest / "big.zip") in message
        assert not (dest / "a").exists() and (dest / "big.zip").is_file()  # kept: not bad
        assert not dl.Lock.read(dest).files
        # As the message says: a larger limit, and the file in place is used.
        planned = dl.plan_downloads(m, m.files, dest, server.url)
        dl.download_all(m, planned, dest, SilentReporter(),
                        limits=dl.UnpackLimits(max_bytes=2_000_000))  # fmt: skip
        assert len(server.gets("big.zip")) == 1
    assert (dest / "a" / "x.bin").read_bytes() == RANDOM


def test_a_zip_bomb_is_refused_by_its_compression_ratio(tmp_path):
    root, m = _served_archive(tmp_path, {"a/zeros.bin": bytes(4_000_000)})
    dest = tmp_path / "dest"
    with LocalServer(root) as server, pytest.raises(dl.DownloadError) as err:
        download(m, dest, server)
    message = str(err.value)
    assert re.search(r"'a/zeros.bin' would unpack [\d.]+ kB into 4.0 MB, a compression ratio "
                     r"of \d{3,4}, over the limit of 200 ", message), message  # fmt: skip
    assert "--max-ratio" in message
    assert not (dest / "a").exists()


def test_unpacking_checks_the_free_space_first(tmp_path, monkeypatch):
    root, m = _served_archive(tmp_path, {"a/x.bin": RANDOM})
    dest = tmp_path / "dest"
    monkeypatch.setattr("shutil.disk_usage", lambda path: type("U", (), {"free": 1_500_000})())
    with LocalServer(root) as server, pytest.raises(dl.DownloadError) as err:
        download(m, dest, server)
    message = str(err.value)
    assert f"Unpacking {dest / 'big.zip'} needs 2.0 MB in {dest}, but only 1.5 MB are free" in (
        message)  # fmt: skip
    assert "--dest DIR" in message and not (dest / "a").exists()


def test_a_member_larger_than_its_declared_size_is_never_written_whole(tmp_path):
    root, m = _served_archive(tmp_path, {"a/x.bin": RANDOM[:300_000]})
    data = bytearray((root / "big.zip").read_bytes())
    # Declare 1000 bytes in both the local header (offset 22) and the central directory
    # (offset 24), as a hostile archive would to slip past the size check.
    local, central = data.find(b"PK\x03\x04"), data.find(b"PK\x01\x02")
    data[local + 22 : local + 26] = (1000).to_bytes(4, "little")
    data[central + 24 : central + 28] = (1000).to_bytes(4, "little")
    (root / "big.zip").write_bytes(bytes(data))
    dest = tmp_path / "dest"
    with LocalServer(root) as server, pytest.raises(dl.DownloadError) as err:
        download(m, dest, server)
    assert "big.zip" in str(err.value) and "moved aside to" in str(err.value)
    assert not (dest / "a").exists() and not list(dest.glob(".big.zip.unpacking*"))


def test_download_flags_a_user_can_get_wrong_exit_2(toy, run_here, tmp_path):
    cli, _ = toy
    base = ["-p", "toy_downloads", "data", "download", "toy", "--data-root", str(cli.data),
            "--from-url", "http://127.0.0.1:9", "--yes"]  # fmt: skip
    code, err = run_here(*base, "--max-unpacked", "lots")
    assert code == 2 and "--max-unpacked 'lots' is not a size" in err
    code, err = run_here(*base, "--max-ratio", "0.5")
    assert code == 2 and "--max-ratio" in err
    code, err = run_here(*base, "--dest", str(cli.data))
    assert code == 2 and "holds the data root" in err and "downloads" in err
    assert not (cli.data / "downloads").exists()


def test_an_archive_over_max_unpacked_exits_2_and_a_larger_limit_passes(toy, run_here):
    cli, mirror = toy
    with LocalServer(mirror) as server:
        args = _args(cli, server, "--manifest", str(cli.tmp / "archive.toml"))
        code, err = run_here(*args, "--max-unpacked", "1kB")
        assert code == 2, err
        assert "would unpack to 1.2 kB (2 members), over the limit of 1.0 kB" in err
        assert "--max-unpacked 1MB" in err
        code, err = run_here(*args, "--max-unpacked", "1MB")
        assert code == 0, err
        assert len(server.gets("toy.zip")) == 1  # the second run used the file in place
    assert (cli.data / "toy" / "alpha" / "manifest.json").is_file()


def test_a_file_of_published_size_is_not_started_without_room_for_it(tmp_path, monkeypatch):
    served = tmp_path / "mirror"
    served.mkdir()
    (served / "blob.bin").write_bytes(RANDOM)
    m = manifest([{"name": "blob.bin", "url": "https://x.org/blob.bin", "size": len(RANDOM)}])
    monkeypatch.setattr("shutil.disk_usage", lambda path: type("U", (), {"free": 1_000_000})())
    with LocalServer(served) as server:
        with pytest.raises(dl.DownloadError) as err:
            download(m, tmp_path / "dest", server)
        assert server.requests == []
    assert "blob.bin needs 2.0 MB in" in str(err.value) and "only 1.0 MB are free" in str(err.value)


@pytest.mark.parametrize(
    ("members", "why"),
    [
        ({"game/a.npz": b"1", "GAME/A.npz": b"2"}, "listed twice (letter case aside)"),
        ({"game": b"a file", "game/a.npz": b"1"}, "both a file and a folder"),
    ],
)
def test_members_that_would_overwrite_each_other_are_refused(tmp_path, members, why):
    root, m = _served_archive(tmp_path, members)
    dest = tmp_path / "dest"
    with LocalServer(root) as server, pytest.raises(dl.DownloadError, match=re.escape(why)):
        download(m, dest, server)
    assert not (dest / "game").exists()
