"""``ssilbench data download``: the generic downloader against a real HTTP server on 127.0.0.1.

The library is driven directly: a dropped connection resumed with a Range request, a server
that ignores ranges, a corrupted file, trust on first use, 404s and quota pages, unsafe
archives, damaged lock files, and the manifests (malformed ones, tasks, the built-in ones and
their data cards). The command is driven end to end in test_data_download_command.py; the
built-in environments' downloads are tested in tests/plugins/NAME/.
"""

from __future__ import annotations

import json
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest

from ssilbench.cli.download_progress import SilentReporter
from ssilbench.data import download as dl
from ssilbench.data.local_server import LocalServer
from ssilbench.errors import UsageError

from .download_toys import FAST, download, manifest, sha

PAYLOAD = bytes(np.random.default_rng(0).integers(0, 256, 300_000, dtype=np.uint8))

pytestmark = pytest.mark.usefixtures("no_proxy")  # tests/data/conftest.py


def one_file(**entry) -> dl.Manifest:
    return manifest([{"name": "blob.bin", "url": "https://example.org/blob.bin", **entry}])


@pytest.fixture
def served(tmp_path: Path) -> Path:
    root = tmp_path / "mirror"
    root.mkdir()
    (root / "blob.bin").write_bytes(PAYLOAD)
    return root


# --- transfers ---------------------------------------------------------------------------


def test_dropped_connection_is_resumed_with_a_range_request(served, tmp_path):
    dest = tmp_path / "dest"
    with LocalServer(served, drop_after={"blob.bin": 70_000}) as server:
        (fetched,), lines = download(one_file(sha256=sha(PAYLOAD)), dest, server)
        gets = server.gets("blob.bin")
    assert [g.range for g in gets] == [None, "bytes=70000-"]
    assert (dest / "blob.bin").read_bytes() == PAYLOAD
    assert not (dest / "blob.bin.part").exists()
    assert fetched.sha256 == sha(PAYLOAD) and fetched.downloaded and not fetched.first_use
    assert any("connection lost at 70.0 kB" in line and "retry 1/3" in line for line in lines)
    assert any("sha256 verified (the toy manifest)" in line for line in lines)
    assert lines[0] == "blob.bin: downloading 300.0 kB"
    assert any(line.startswith("blob.bin: 300.0 kB / 300.0 kB (100%)") for line in lines)


def test_a_part_left_by_an_earlier_run_is_continued(served, tmp_path):
    dest = tmp_path / "dest"
    m = one_file(sha256=sha(PAYLOAD))
    with LocalServer(served, drop_after={"blob.bin": 50_000}) as server:
        with pytest.raises(dl.DownloadError, match=r"run the command again to resume") as err:
            download(m, dest, server, transfer=dl.Transfer(retries=0, backoff=0))
        assert "blob.bin.part" in str(err.value)
        assert (dest / "blob.bin.part").read_bytes() == PAYLOAD[:50_000]
        planned = dl.plan_downloads(m, m.files, dest, server.url)
        assert planned[0].partial == 50_000
        assert "resuming: 50.0 kB already here" in "\n".join(dl.summary(planned))
        download(m, dest, server)
        assert [g.range for g in server.gets("blob.bin")] == [None, "bytes=50000-"]
    assert (dest / "blob.bin").read_bytes() == PAYLOAD


def test_a_server_that_ignores_ranges_sends_the_whole_file_again(served, tmp_path):
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "blob.bin.part").write_bytes(PAYLOAD[:1000])
    with LocalServer(served, ranges=False) as server:
        download(one_file(sha256=sha(PAYLOAD)), dest, server)
        assert [g.range for g in server.gets("blob.bin")] == ["bytes=1000-"]
    assert (dest / "blob.bin").read_bytes() == PAYLOAD  # not the first 1000 bytes twice


def test_a_complete_part_is_not_fetched_again(served, tmp_path):
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "blob.bin.part").write_bytes(PAYLOAD)  # killed between the last byte and the rename
    with LocalServer(served) as server:
        download(one_file(sha256=sha(PAYLOAD)), dest, server)
        assert [g.range for g in server.gets("blob.bin")] == [f"bytes={len(PAYLOAD)}-"]  # 416
    assert (dest / "blob.bin").read_bytes() == PAYLOAD


def test_a_corrupted_file_is_refused_naming_both_hashes(served, tmp_path):
    dest = tmp_path / "dest"
    wrong = "0" * 64
    with LocalServer(served) as server, pytest.raises(dl.DownloadError) as err:
        download(one_file(sha256=wrong), dest, server)
    message = str(err.value)
    assert "blob.bin is corrupted or not the published file" in message
    assert f"sha256 {sha(PAYLOAD)}, expected {wrong} (from the toy manifest)" in message
    assert "--sha256 blob.bin=HEX" in message
    assert not (dest / "blob.bin").exists() and not (dest / "blob.bin.part").exists()


def test_a_wrong_size_is_refused_when_no_hash_is_published(served, tmp_path):
    dest = tmp_path / "dest"
    with LocalServer(served) as server, pytest.raises(dl.DownloadError) as err:
        download(one_file(size=len(PAYLOAD) + 1), dest, server)
    assert f"blob.bin has {len(PAYLOAD)} bytes, expected {len(PAYLOAD) + 1}" in str(err.value)
    assert not dl.Lock.read(dest).files  # nothing trusted


def test_trust_on_first_use_records_the_hash_and_checks_later_copies(served, tmp_path):
    dest = tmp_path / "dest"
    m = one_file()
    with LocalServer(served) as server:
        (fetched,), lines = download(m, dest, server)
        assert fetched.first_use
        lock = json.loads((dest / dl.LOCK_NAME).read_text())
        assert lock["files"]["blob.bin"]["sha256"] == sha(PAYLOAD)
        assert lock["files"]["blob.bin"]["size"] == len(PAYLOAD)
        assert any("trust on first use" in line for line in lines)
        # The same bytes again: checked against the lock, not recorded anew.
        (dest / "blob.bin").unlink()
        (fetched,), lines = download(m, dest, server)
        assert not fetched.first_use
        assert any("sha256 verified (the lock file" in line for line in lines)
        # The publisher's file changes: refused, the lock file named.
        (served / "blob.bin").write_bytes(PAYLOAD[::-1])
        (dest / "blob.bin").unlink()
        with pytest.raises(dl.DownloadError, match=r"expected [0-9a-f]{64} \(from the lock file"):
            download(m, dest, server)
        # A pinned hash overrides the lock.
        (fetched,), _ = download(m, dest, server, pins={"blob.bin": sha(PAYLOAD[::-1])})
    assert (dest / "blob.bin").read_bytes() == PAYLOAD[::-1]


def test_a_file_put_in_place_by_hand_is_verified_not_downloaded(served, tmp_path):
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "blob.bin").write_bytes(PAYLOAD)
    with LocalServer(served) as server:
        (fetched,), _ = download(one_file(sha256=sha(PAYLOAD)), dest, server)
        assert server.requests == []
    assert not fetched.downloaded
    (dest / "blob.bin").write_bytes(b"something else")
    with LocalServer(served) as server:
        with pytest.raises(dl.DownloadError, match="moved aside to .*blob.bin.rejected-"):
            download(one_file(sha256=sha(PAYLOAD)), dest, server)
        (aside,) = dest.glob("blob.bin.rejected-*")
        assert aside.read_bytes() == b"something else"  # a user's file is kept, renamed
        download(one_file(sha256=sha(PAYLOAD)), dest, server)  # as the message says
    assert (dest / "blob.bin").read_bytes() == PAYLOAD


def test_404_and_quota_pages_and_unreachable_hosts_say_what_to_do(served, tmp_path):
    m = manifest([{"name": "missing.bin", "url": "https://example.org/missing.bin"}])
    with LocalServer(served, html={"blob.bin"}) as server:
        with pytest.raises(dl.DownloadError) as err:
            download(m, tmp_path / "a", server)
        assert "answered 404 Not Found: missing.bin is not there" in str(err.value)
        assert "BASE/missing.bin" in str(err.value)
        with pytest.raises(dl.DownloadError) as err:
            download(one_file(), tmp_path / "b", server, transfer=dl.Transfer(retries=0))
        assert "answered with a web page instead of blob.bin" in str(err.value)
        assert "put it at" in str(err.value)
        assert not list((tmp_path / "b").glob("blob.bin*"))
        port = server.url.rsplit(":", 1)[1]
    # The server is gone: refused at once, no retries.
    planned = dl.plan_downloads(one_file(), one_file().files, tmp_path / "c",
                                f"http://127.0.0.1:{port}")  # fmt: skip
    with pytest.raises(dl.DownloadError, match=r"Cannot reach 127.0.0.1:\d+ for blob.bin"):
        dl.download_all(one_file(), planned, tmp_path / "c", SilentReporter(), FAST)


def _zip(path: Path, members: dict[str, bytes]) -> bytes:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path.read_bytes()


def test_archives_unpack_once_and_unsafe_members_are_refused(tmp_path):
    root = tmp_path / "mirror"
    root.mkdir()
    _zip(root / "good.zip", {"game/train/0.npz": b"a", "game/test/0.npz": b"b"})
    _zip(root / "evil.zip", {"../outside.txt": b"x"})
    m = manifest([{"name": "good.zip", "url": "https://x.org/good.zip", "unpack": "zip"}])
    dest = tmp_path / "dest"
    with LocalServer(root) as server:
        download(m, dest, server)
        assert (dest / "game" / "train" / "0.npz").read_bytes() == b"a"
        (dest / "game" / "train" / "0.npz").write_bytes(b"edited")
        download(m, dest, server)  # same archive: not unpacked again
        assert (dest / "game" / "train" / "0.npz").read_bytes() == b"edited"
        evil = manifest([{"name": "evil.zip", "url": "https://x.org/evil.zip", "unpack": "zip"}])
        with pytest.raises(dl.DownloadError, match="outside the download folder"):
            download(evil, dest, server)
    assert not (tmp_path / "outside.txt").exists()


# --- manifests ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({"name": "../x", "url": "https://a/x"}, "without '..'"),
        ({"name": "x", "url": "ftp://a/x"}, "not an http(s) URL"),
        ({"name": "x", "url": "https://a/x", "sha256": "ABC"}, "64 lower-case hex"),
        ({"name": "x", "url": "https://a/x", "colour": "red"}, "Extra inputs"),
    ],
)
def test_malformed_manifests_are_one_clear_error(entry, problem):
    text = textwrap.dedent(f"""
        format = "ssilbench.downloads"
        version = 1
        family = "toy"
        title = "t"
        [[files]]
        {chr(10).join(f'{k} = "{v}"' for k, v in entry.items())}
    """)
    with pytest.raises(UsageError, match="Download manifest m.toml is malformed") as err:
        dl.parse_manifest(text, "m.toml")
    assert problem in str(err.value)


def test_selecting_tasks_keeps_shared_files():
    m = manifest([
        {"name": "a.zip", "url": "https://x/a", "tasks": ["a"]},
        {"name": "b.zip", "url": "https://x/b", "tasks": ["b"]},
        {"name": "common.bin", "url": "https://x/c"},
    ])  # fmt: skip
    assert [f.name for f in m.select(["b"])] == ["b.zip", "common.bin"]
    assert [f.name for f in m.select([])] == ["a.zip", "b.zip", "common.bin"]
    assert m.tasks() == ["a", "b"]


def test_every_built_in_manifest_parses_and_covers_its_tasks(plugins):
    for family in ("procgen", "pusht", "libero10"):
        environment = plugins.environments.create(family)
        m = dl.packaged_manifest(environment)
        assert m is not None and m.family == family
        assert sorted(m.tasks()) == sorted(environment.tasks()), family
        assert all(f.url.startswith("https://") for f in m.files)
        # Either a published hash for every file, or the manifest says there is none.
        assert all(f.sha256 for f in m.files) or "trust on first use" in m.hashes
    assert dl.packaged_manifest(plugins.environments.create("maze")) is None


CARDS = Path(__file__).resolve().parents[2] / "docs" / "environments"


@pytest.mark.parametrize("family", ["procgen", "pusht", "libero10"])
def test_each_data_card_says_which_files_are_trusted_on_first_use(plugins, family):
    m = dl.packaged_manifest(plugins.environments.create(family))
    unpinned = [f.name for f in m.files if not f.sha256]
    (line,) = [t for t in (CARDS / f"{family}.md").read_text().splitlines()
               if t.startswith("**Trust on first use:**")]  # fmt: skip
    if not unpinned:
        assert "none" in line and f"all {len(m.files)}" not in line
    elif len(unpinned) == len(m.files) > 1:
        assert f"all {len(m.files)} files" in line
    else:
        assert all(f"`{name}`" in line for name in unpinned)


def test_a_damaged_lock_file_is_one_clear_error(tmp_path):
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / dl.LOCK_NAME).write_text('{"format": "ssilbench.download-lock", "files": {"x": {}}}')
    with pytest.raises(dl.DownloadError, match=r"lock file .* is unreadable .*Delete it"):
        dl.plan_downloads(one_file(), one_file().files, dest)
