"""Downloads of published expert data: a manifest an environment plugin ships, streamed with
resume and checked by sha256 (``ssilbench data download FAMILY``).

A manifest (TOML, format ``ssilbench.downloads`` v1) lists the files of one environment
family: where each is published, its size and sha256 where the publisher gives them, which
tasks need it and whether it is a zip archive to unpack. Downloading a file
(:mod:`ssilbench.data.download_session`):

- holds the file's download lock, so that concurrent commands download it once and the
  others wait, then find it in place;
- streams it into ``NAME.part`` beside its final place; a ``.part`` left by an interrupted
  try is continued with an HTTP Range request, a dropped connection retried a few times
  (:mod:`ssilbench.data.download_fetch`);
- hashes the bytes on disk and checks size and sha256 before the file is renamed
  (atomically) into place. A file that fails a check is moved aside (``NAME.rejected-TIME``)
  with a message that says how to retry;
- unpacks archives checked and bounded (:mod:`ssilbench.data.download_unpack`);
- where neither the manifest nor the user (``--sha256 NAME=HEX``) gives a hash, records the
  hash in the download folder's lock file (``downloads.lock.json``, trust on first use)
  only once the file was unpacked and imported; later copies are checked against it, and
  ``--refresh`` forgets it (:mod:`ssilbench.data.download_state`).

Nothing here runs unless the user asks for a download: runs never touch the network.
"""

from __future__ import annotations

from ssilbench.data.download_fetch import Reporter, Transfer, fetch, human_size
from ssilbench.data.download_manifest import (
    FORMAT,
    FileEntry,
    Manifest,
    Planned,
    check_base_url,
    mirror_url,
    packaged_manifest,
    parse_manifest,
    parse_pins,
    plan_downloads,
    read_manifest,
    summary,
)
from ssilbench.data.download_session import (
    Download,
    Fetched,
    download_all,
    remove_downloads,
    sha256_of,
)
from ssilbench.data.download_state import LOCK_FORMAT, LOCK_NAME, DownloadError, Lock, part_path
from ssilbench.data.download_unpack import (
    MAX_RATIO,
    MAX_UNPACKED,
    UnpackLimits,
    parse_size,
    unpack_zip,
)

__all__ = [
    "FORMAT", "LOCK_FORMAT", "LOCK_NAME", "MAX_RATIO", "MAX_UNPACKED", "Download",
    "DownloadError", "Fetched", "FileEntry", "Lock", "Manifest", "Planned", "Reporter",
    "Transfer", "UnpackLimits", "check_base_url", "download_all", "fetch", "human_size",
    "mirror_url", "packaged_manifest", "parse_manifest", "parse_pins", "parse_size", "part_path",
    "plan_downloads", "read_manifest", "remove_downloads", "sha256_of", "summary",
    "unpack_zip",
]  # fmt: skip
