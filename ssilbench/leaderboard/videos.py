"""The rollout videos of a store's runs (``ssilbench eval RUN_ID --video``, written to
``RESULTS/videos/<run id>.mp4`` or ``.gif``), found for the HTML leaderboard's cells."""

from __future__ import annotations

import os
from pathlib import Path

from ssilbench.eval.video import VIDEOS
from ssilbench.runs.records import RunRecord

SUFFIXES = (".mp4", ".gif")  # MP4 first where both were written


def cell_videos(
    records: list[RunRecord], results: Path, page_dir: Path | None = None
) -> dict[tuple[str, str, str], str]:
    """(environment label, method label, budget) -> the link to the video of the cell's run
    with the lowest seed that has one: relative to ``page_dir`` (the folder the page is
    written to), or absolute where the page has no folder (printed) or another drive."""
    folder = Path(results) / VIDEOS
    if not folder.is_dir():
        return {}
    found: dict[tuple[str, str, str], tuple[int, str]] = {}
    for record in records:
        video = next((p for s in SUFFIXES if (p := folder / f"{record.run_id}{s}").is_file()),
                     None)  # fmt: skip
        if video is None:
            continue
        key = (record.env_label, record.method_label, record.budget)
        if key not in found or record.seed < found[key][0]:
            found[key] = (record.seed, _link(video, page_dir))
    return {key: link for key, (_, link) in found.items()}


def _link(video: Path, page_dir: Path | None) -> str:
    absolute = video.resolve()
    if page_dir is None:
        return absolute.as_uri()
    try:
        return Path(os.path.relpath(absolute, page_dir.resolve())).as_posix()
    except ValueError:  # another drive (Windows)
        return absolute.as_uri()


def store_videos(results: Path, page_dir: Path | None = None) -> dict[tuple[str, str, str], str]:
    """:func:`cell_videos` of the finished runs of the store at ``results``."""
    from ssilbench.runs.store import ResultsStore

    if not (Path(results) / VIDEOS).is_dir():
        return {}
    with ResultsStore.open_read_only(Path(results)) as store:
        return cell_videos(store.rows("done"), results, page_dir)
