"""Input standardisation: each feature shifted and scaled to zero mean and unit variance over
the rows a network is fitted to, the way the maze paper's code standardises positions
(scikit-learn's ``StandardScaler``: population variance, a constant feature left unscaled).

A standardised network is the scaler followed by the trained network, so that a policy or
an IDM reads raw observations wherever it is used; the trained part learns on the scaled
rows, read per minibatch (no scaled copy of a dataset is kept).
"""

from __future__ import annotations

import hashlib

import torch
from torch import nn

from ssilbench.data.batches import Rows, RowSource, chunk_rows, chunks, fingerprint, row_bytes


class Standardise(nn.Module):
    """(x - mean) / scale per feature of a vector input."""

    def __init__(self, mean: torch.Tensor, scale: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("mean", mean)
        self.register_buffer("scale", scale)

    @classmethod
    @torch.no_grad()
    def fit(cls, rows: RowSource) -> Standardise:
        """The scaler of ``rows`` (vectors), its moments summed in float64 over chunks."""
        n = len(rows)
        total = square = None
        for part in chunks(n, chunk_rows(row_bytes(rows))):
            x = rows[part].to(torch.float64)
            if x.dim() != 2:
                raise ValueError("standardisation applies to vector inputs (rows of features)")
            s, q = x.sum(0), (x * x).sum(0)
            total, square = (s, q) if total is None else (total + s, square + q)
        mean = total / n
        var = (square / n - mean * mean).clamp_min(0.0)
        scale = var.sqrt()
        scale = torch.where(
            scale > 1e-12 * mean.abs().clamp_min(1.0), scale, torch.ones_like(scale)
        )
        return cls(mean.to(torch.float32), scale.to(torch.float32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.scale


class Standardised(nn.Sequential):
    """A scaler, then the network it feeds: ``inner`` is the part that is trained."""

    def __init__(self, scaler: Standardise, inner: nn.Module) -> None:
        super().__init__(scaler, inner)

    @property
    def scaler(self) -> Standardise:
        return self[0]

    @property
    def inner(self) -> nn.Module:
        return self[1]


class StandardisedRows:
    """The rows of a source passed through a scaler, computed per minibatch."""

    def __init__(self, source: RowSource, scaler: Standardise) -> None:
        self.source = source
        self.scaler = scaler
        moments = torch.cat([scaler.mean, scaler.scale]).cpu().numpy().tobytes()
        self.fingerprint = hashlib.sha256(
            fingerprint(source).encode() + b"|standardised|" + moments
        ).hexdigest()

    def __len__(self) -> int:
        return len(self.source)

    @property
    def device(self) -> torch.device:
        return self.scaler.mean.device

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self.source), len(self.scaler.mean))

    def is_floating_point(self) -> bool:
        return True

    @torch.no_grad()
    def __getitem__(self, rows: Rows) -> torch.Tensor:
        return self.scaler(self.source[rows].float())

    def prefetch(self, rows: Rows) -> None:
        ahead = getattr(self.source, "prefetch", None)
        if ahead is not None:
            ahead(rows)


def trainable(net: nn.Module, inputs: RowSource) -> tuple[nn.Module, RowSource]:
    """The part of ``net`` that is trained and the rows it is trained on: a standardised
    network's inner network on the scaled rows, any other network on ``inputs``."""
    if isinstance(net, Standardised):
        return net.inner, StandardisedRows(inputs, net.scaler)
    return net, inputs
