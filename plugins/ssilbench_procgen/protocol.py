"""What a Procgen run reads of its dataset, as the paper's reference code reads it.

Two of the Procgen options decide it:

- ``transitions``: the reference's loader concatenates its chunks and pairs every frame
  with the next one (``seq_len`` 2), so it keeps the pairs that cross an episode end: the
  last frame of an episode, its action, and the first frame of the episode stored after
  it. ``across_episodes`` (the default) keeps them too, as a view of the store with no
  frame copied (:class:`AcrossEpisodeEnds`); ``within_episodes`` keeps only the pairs
  inside an episode, as the store defines its transitions.
- ``max_chunks``: the reference reads the first 80 chunks of a split in numbered order
  (``MAX_DATA_CHUNKS``); the importer copies as many (0: every chunk), and a run checks
  that the dataset it opens holds what its own setting reads (:func:`check_chunks`).
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np

from ssilbench.api import DatasetError
from ssilbench.kit import TransitionStore
from ssilbench_procgen.games import MAX_DATA_CHUNKS


class AcrossEpisodeEnds(TransitionStore):
    """A store whose transitions are every pair of consecutive frames, episode ends
    included: (obs[i], actions[i], obs[i+1]) for i < frames - 1. The same memory maps as
    the store it views; its episodes are still the store's."""

    @classmethod
    def view(cls, store: TransitionStore) -> AcrossEpisodeEnds:
        return cls(**{f.name: getattr(store, f.name) for f in fields(store)})

    def transition_indices(self) -> np.ndarray:
        return np.arange(max(self.num_frames - 1, 0))

    @property
    def num_transitions(self) -> int:
        return max(self.num_frames - 1, 0)


def read_as(store: TransitionStore, transitions: str) -> TransitionStore:
    """``store`` with the transitions the option ``transitions`` names."""
    return AcrossEpisodeEnds.view(store) if transitions == "across_episodes" else store


def chunks_read(found: int, max_chunks: int) -> int:
    """How many of a split's ``found`` chunks a setting of ``max_chunks`` reads."""
    return found if max_chunks == 0 else min(found, max_chunks)


def import_record(found: int, max_chunks: int) -> dict[str, Any]:
    """What an import records in its producer besides the chunks it copied: how many the
    source held and the cap that chose among them."""
    return {"chunks_found": found, "max_chunks": max_chunks}


def check_chunks(
    store: TransitionStore, max_chunks: int, game: str, dataset: str, data_root: Path
) -> None:
    """Refuse an imported split holding other chunks than ``max_chunks`` reads, naming the
    commands that make them agree. Imports made before the cap existed copied every chunk;
    collected datasets have no chunks."""
    producer = store.manifest.get("producer", {})
    if producer.get("source") != "import" or not isinstance(producer.get("chunks"), list):
        return
    copied = len(producer["chunks"])
    found = int(producer.get("chunks_found", copied))
    wanted = chunks_read(found, max_chunks)
    if copied == wanted:
        return
    setting = "the default, the reference's" if max_chunks == MAX_DATA_CHUNKS else "set"
    keep = 0 if copied == found else copied
    flag = "" if dataset == "expert" else f" -o dataset={dataset}"
    split = producer.get("from")
    source = Path(split).parent.parent if isinstance(split, str) else "DIR"
    raise DatasetError(
        f"The dataset at {store.root} holds the first {copied} of the {found} chunks of "
        f"{split or 'its source'}, but -o max_chunks={max_chunks} ({setting}) reads {wanted}. "
        f"Import it again with 'ssilbench data import procgen --from {source} --games "
        f"{game}{flag} -o max_chunks={max_chunks} --replace --data-root {data_root}', or run "
        f"on the chunks it holds with -o max_chunks={keep}.",
        store.root,
    )
