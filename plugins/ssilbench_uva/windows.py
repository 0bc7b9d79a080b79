"""Windows of an episode around each transition: history frames, future frames, an action
chunk. UVA trains on these rather than on single (s, a, s') transitions.

For a transition starting at frame t, the window holds the frames t-(H-1)d .. t-d, t
(history: every d-th frame, d = ``history_stride``, 1 by default; the reference's
select_frames takes d = 4: t-12, t-8, t-4, t; the observation the policy acts on), the frames
t+s, t+2s, .. t+Fs (future; s = chunk / F, so the future frames span the action chunk) and the
actions a_t .. a_{t+K-1}. Indices are clamped to the episode, repeating its first frame before
the start and its last frame and last action after the end, as demonstration datasets are
commonly padded. Nothing crosses an episode boundary.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Windows:
    """Frame indices of N windows into the store's frames."""

    starts: np.ndarray
    history: np.ndarray
    future: np.ndarray
    action_frames: np.ndarray

    def __len__(self) -> int:
        return len(self.starts)


def episode_bounds(starts: np.ndarray, episode_ends: np.ndarray) -> tuple[np.ndarray, ...]:
    """The first and last frame of the episode holding each frame index."""
    episode = np.searchsorted(episode_ends, starts, side="right")
    first = np.where(episode > 0, episode_ends[np.maximum(episode - 1, 0)], 0)
    last = episode_ends[episode] - 1
    return first, last


def make_windows(
    starts: np.ndarray,
    episode_ends: np.ndarray,
    history: int,
    future: int,
    chunk: int,
    history_stride: int = 1,
) -> Windows:
    """Windows at the transition start frames ``starts``."""
    starts = np.asarray(starts, dtype=np.int64)
    first, last = episode_bounds(starts, np.asarray(episode_ends, dtype=np.int64))
    stride = max(1, chunk // max(future, 1))
    back = history_stride * np.arange(history - 1, -1, -1)
    ahead = stride * np.arange(1, future + 1)
    hist = np.maximum(starts[:, None] - back[None, :], first[:, None])
    fut = np.minimum(starts[:, None] + ahead[None, :], last[:, None])
    acts = np.minimum(starts[:, None] + np.arange(chunk)[None, :], last[:, None] - 1)
    return Windows(starts, hist, fut, acts)


def chunk_targets(
    windows: Windows, labeled_index: np.ndarray, actions: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Action chunks (N, K, A) from a labeled view's actions, and which entries are known.

    ``labeled_index`` (sorted) are the frames whose action is labeled, ``actions`` theirs. A
    chunk entry whose frame is not labeled (a transition budget labels transitions, not
    whole demonstrations) is marked unknown and left out of the loss."""
    labeled_index = np.asarray(labeled_index, dtype=np.int64)
    frames = windows.action_frames
    pos = np.clip(np.searchsorted(labeled_index, frames), 0, len(labeled_index) - 1)
    known = labeled_index[pos] == frames
    actions = np.asarray(actions, dtype=np.float32)
    if actions.ndim == 1:
        actions = actions[:, None]
    return actions[pos], known
