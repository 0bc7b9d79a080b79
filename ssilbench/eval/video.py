"""Rollouts filmed: the frames of evaluation episodes, written as MP4 or GIF.

:class:`FilmedVectorEnv` wraps the vector environment an
:class:`~ssilbench.eval.rollout.Evaluator` plays, so that the protocol's own rollouts are
filmed (nothing about them changes): after every ``reset`` and ``step`` it asks the task
for the RGB frames of its sub-environments (:meth:`ssilbench.api.Task.frames`) and keeps, for
the first ``count`` sub-environments, the frames of their first episode. :func:`write_video`
writes one episode's frames as MP4 (imageio with imageio-ffmpeg, the ``video`` extra) or GIF
(Pillow): GIF where ffmpeg is missing or asked for.
"""

from __future__ import annotations

import importlib.util
import math
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ssilbench.errors import OutputError, UsageError, os_error_message
from ssilbench.outputs import check_output

VIDEOS = "videos"
"""The folder of a results directory where ``eval --video`` writes by default, as
``<run id>.mp4`` (or ``.gif``): the HTML leaderboard links the videos it finds there."""
FPS = 10
"""Frames per second of the videos: one frame per environment step."""
MIN_SIDE = 256
"""Small frames (a maze's cells, Procgen's 64x64) are enlarged by a whole factor, each pixel
a square block, until their longer side is at least this many pixels."""
FORMATS = ("auto", "mp4", "gif")

Frames = Callable[[Any, Any, dict], "np.ndarray | None"]
"""``(venv, obs, info) -> (num_envs, H, W, 3) uint8 frames or None``: a task's ``frames``."""


class FilmedVectorEnv:
    """A vector environment whose first ``count`` sub-environments' first episodes are
    filmed (:attr:`episodes`: one list of (H, W, 3) frames per sub-environment, the start
    state and the state after each step up to the episode's end). Everything else is
    passed through. A vector env that plays in waves (``waves()``, LIBERO) is filmed wave by
    wave, its sub-environments numbered in the whole."""

    def __init__(self, venv: Any, frames: Frames, count: int, first: int = 0) -> None:
        self.venv = venv
        self.frames = frames
        self.count = count
        self.first = first  # the number of this (wave's) first sub-environment in the whole
        self.episodes: dict[int, list[np.ndarray]] = {}
        self._done: set[int] = set()
        self.missing = False  # the task gave no frames
        if hasattr(venv, "waves"):
            self.waves = self._waves

    def __getattr__(self, name: str) -> Any:
        return getattr(self.venv, name)

    def _waves(self) -> Iterator[FilmedVectorEnv]:
        first = 0
        for wave in self.venv.waves():
            filmed = FilmedVectorEnv(wave, self.frames, self.count, first)
            filmed.episodes = self.episodes  # one collection for the whole
            filmed._done = self._done
            yield filmed
            self.missing |= filmed.missing
            first += wave.num_envs

    def reset(self, **kwargs: Any) -> tuple[Any, dict]:
        obs, info = self.venv.reset(**kwargs)
        self._film(obs, info, None)
        return obs, info

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict]:
        obs, reward, terminated, truncated, info = self.venv.step(actions)
        self._film(obs, info, np.asarray(terminated) | np.asarray(truncated))
        return obs, reward, terminated, truncated, info

    def _film(self, obs: Any, info: dict, ended: np.ndarray | None) -> None:
        wanted = [i for i in range(self.venv.num_envs)
                  if self.first + i < self.count and self.first + i not in self._done]  # fmt: skip
        if not wanted:
            return
        frames = self.frames(self.venv, obs, info)
        if frames is None:
            self.missing = True
            return
        for i in wanted:
            self.episodes.setdefault(self.first + i, []).append(np.asarray(frames[i]))
            if ended is not None and ended[i]:
                self._done.add(self.first + i)


def enlarge(frames: np.ndarray, min_side: int = MIN_SIDE) -> np.ndarray:
    """Frames (T, H, W, 3) enlarged by the whole factor that makes their longer side at least
    ``min_side`` (each pixel a square block: a maze's cells stay sharp)."""
    factor = max(1, math.ceil(min_side / max(frames.shape[1:3])))
    return frames.repeat(factor, axis=1).repeat(factor, axis=2) if factor > 1 else frames


def padded(frames: np.ndarray, block: int = 16) -> np.ndarray:
    """Frames padded with black at the bottom and right to a multiple of ``block`` pixels
    (H.264 players want even sizes; ffmpeg's writer would otherwise rescale them)."""
    h, w = frames.shape[1:3]
    pad_h, pad_w = -h % block, -w % block
    if not pad_h and not pad_w:
        return frames
    return np.pad(frames, ((0, 0), (0, pad_h), (0, pad_w), (0, 0)))


def ffmpeg_available() -> bool:
    """Whether imageio can write MP4 here (imageio-ffmpeg installed and its ffmpeg found)."""
    try:
        import imageio_ffmpeg

        return bool(imageio_ffmpeg.get_ffmpeg_exe())
    except Exception:  # noqa: BLE001 - missing, broken or without a binary: no MP4 here
        return False


def choose_format(fmt: str) -> str:
    """``mp4`` or ``gif`` for ``--format`` ``fmt`` (``auto``: MP4 where ffmpeg is available)."""
    if fmt == "auto":
        return "mp4" if ffmpeg_available() else "gif"
    if fmt == "mp4" and not ffmpeg_available():
        raise UsageError("MP4 needs imageio and a working imageio-ffmpeg: pip install "
                         "'ssilbench[video]' (imageio-ffmpeg 0.4 or later; procgen's gym3 pins "
                         "it below 0.4, which needs setuptools' pkg_resources), or write GIFs "
                         "with --format gif.")  # fmt: skip
    if fmt == "gif" and importlib.util.find_spec("PIL") is None:
        raise UsageError("GIF needs Pillow: pip install 'ssilbench[video]' (which writes MP4 "
                         "too).")  # fmt: skip
    return fmt


def write_video(frames: list[np.ndarray], path: Path, fmt: str, fps: int = FPS) -> Path:
    """One episode's frames written to ``path`` (its suffix set to ``fmt``: mp4 or gif),
    enlarged (:func:`enlarge`); an OS error is an OutputError naming the file."""
    stack = enlarge(np.stack(frames))
    path = check_output(path.with_suffix(f".{fmt}"), flag="--video")
    # Written beside it under a temporary name (its suffix kept: ffmpeg reads the container
    # from it) and renamed, so a failure leaves no half-written video.
    tmp = path.with_name(f".{path.stem}.{uuid.uuid4().hex[:12]}{path.suffix}")
    try:
        if fmt == "mp4":
            import imageio.v2 as imageio

            with imageio.get_writer(tmp, format="FFMPEG", mode="I", fps=fps,
                                    macro_block_size=1) as writer:  # fmt: skip
                for frame in padded(stack):
                    writer.append_data(frame)
        else:
            from PIL import Image

            images = [Image.fromarray(frame) for frame in stack]
            images[0].save(tmp, format="GIF", save_all=True, append_images=images[1:],
                           duration=round(1000 / fps), loop=0)  # fmt: skip
        os.replace(tmp, path)
    except OSError as exc:
        raise OutputError(os_error_message(path, exc)) from None
    finally:
        tmp.unlink(missing_ok=True)
    return path
