"""The conditioning vector of each LIBERO-10 task: a CLIP text embedding of its language
instruction, or, without an encoder, the task's one-hot index.

UVA conditions on CLIP text embeddings of the instructions. A user who has a CLIP text
encoder on disk (a ``transformers`` CLIP checkpoint folder: ``config.json``, the weights and
the tokenizer files) names it with ``-o text_encoder=PATH``; it is loaded from that folder
only (``local_files_only``, ``HF_HUB_OFFLINE=1``: nothing is downloaded), each instruction
is embedded once and the table is cached in the dataset folder
(``language/<encoder key>.npy``), so later runs never load the encoder again.

Without an encoder the vector is the task's one-hot index: a model that maps it through a
linear layer learns one embedding per task (conditioning by task identity, not language).
The two never pool in one leaderboard: the encoder is a task option (the run's label shows
it) and the table's sha256 is part of the dataset's fingerprint.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ssilbench.api import ConfigError, PluginError, UsageError

CLIP_HINT = (
    "Embedding instructions with a local CLIP text encoder needs transformers: pip install "
    "'ssilbench[clip]' (or leave -o text_encoder unset to condition on the task index)."
)


def one_hot(n: int) -> np.ndarray:
    """The fallback conditioning: task k's vector is e_k."""
    return np.eye(n, dtype=np.float32)


def _encoder_key(path: Path, instructions: Sequence[str]) -> str:
    """A cheap identity of an encoder folder and the instructions (file names, sizes and
    modification times; the table's own sha256 identifies the result)."""
    h = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        stat = file.stat()
        h.update(f"{file.relative_to(path)}|{stat.st_size}|{stat.st_mtime_ns}\n".encode())
    h.update(json.dumps(list(instructions)).encode())
    return h.hexdigest()[:32]


def encoder_folder(text_encoder: str) -> Path:
    """The encoder folder the option names, checked: a folder holding ``config.json``."""
    path = Path(text_encoder).expanduser()
    if not path.is_dir() or not (path / "config.json").is_file():
        raise UsageError(
            f"text_encoder={text_encoder!r} is not a folder holding a CLIP checkpoint "
            "(config.json, weights, tokenizer files, as transformers' save_pretrained writes "
            "them). Nothing is downloaded: give the folder of a CLIP model you have, or leave "
            "text_encoder unset to condition on the task index."
        )
    return path


def clip_embeddings(path: Path, instructions: Sequence[str]) -> np.ndarray:
    """(len(instructions), D) CLIP text embeddings (the projection's output) from a local
    ``transformers`` checkpoint folder."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import torch
        from transformers import AutoTokenizer, CLIPTextModelWithProjection
    except ImportError:
        raise PluginError(CLIP_HINT) from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        model = CLIPTextModelWithProjection.from_pretrained(str(path), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"text_encoder {path} could not be loaded as a CLIP text encoder ({exc})."
        ) from None
    model.eval()
    with torch.no_grad():
        tokens = tokenizer(list(instructions), padding=True, return_tensors="pt")
        out = model(**tokens).text_embeds
    return out.float().cpu().numpy().astype(np.float32)


def task_embeddings(
    instructions: Sequence[str],
    text_encoder: str | None,
    dim: int,
    cache_dir: Path | None = None,
) -> np.ndarray:
    """The conditioning table, one row per instruction: one-hot without an encoder, else
    the encoder's embeddings (read from ``cache_dir`` when cached there, written there
    otherwise). Refuses an encoder whose embeddings are not ``dim`` wide."""
    if not text_encoder:
        return one_hot(len(instructions))
    path = encoder_folder(text_encoder)
    cached = None
    if cache_dir is not None:
        cached = Path(cache_dir) / "language" / f"{_encoder_key(path, instructions)}.npy"
        if cached.is_file():
            table = np.load(cached, allow_pickle=False)
            if table.shape == (len(instructions), dim):
                return table
    table = clip_embeddings(path, instructions)
    if table.shape[1] != dim:
        raise ConfigError(
            f"text_encoder {path} embeds instructions in {table.shape[1]} numbers, but "
            f"text_dim is {dim}: add -o text_dim={table.shape[1]}."
        )
    if cached is not None:
        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
            tmp = cached.with_name(f".{cached.name}.{os.getpid()}.npy")
            np.save(tmp, table, allow_pickle=False)
            os.replace(tmp, cached)
        except OSError:
            pass  # a read-only data root: the table is computed again next time
    return table
