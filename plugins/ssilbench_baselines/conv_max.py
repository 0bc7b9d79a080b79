"""One convolution followed by a global max-pool (the paper's 1L CNN), with an exact fast path
for runs trained stacked together.

The global maximum of a convolution over an image depends only on the *set* of distinct
patches the image contains, not on where they are. A 51x51 maze image has 2,401 patch
positions but holds only ~115 distinct 3x3 patches, and a whole maze dataset only ~1,300.
So a stacked group can evaluate each distinct patch of its data once per step and take, per
image, the maximum over that image's own patch ids: the same function and the same gradients
as the convolution (up to float summation order), for a small fraction of the work. Data
whose images are mostly distinct patches (natural images) gain nothing and take the ordinary
path.
"""

from __future__ import annotations

import hashlib

import torch
import torch.nn.functional as F
from torch import nn

# The table pays when the data's distinct patches are far fewer than its patch positions.
_MAX_DISTINCT_SHARE = 0.25
_CHUNK = 64  # images unfolded at a time, to bound memory


class GlobalMaxPool(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.amax(dim=(-2, -1))


class ConvGlobalMax(nn.Sequential):
    """``Conv2d(in_channels, out, kernel)`` then the maximum over every position."""

    def __init__(self, in_channels: int, out: int, kernel: int = 3) -> None:
        super().__init__(nn.Conv2d(in_channels, out, kernel_size=kernel), GlobalMaxPool())
        self.kernel = kernel

    def stacked_encode(
        self, inputs: list[torch.Tensor], batch: int
    ) -> tuple[list[torch.Tensor], torch.Tensor] | None:
        """Per run, each image as the ids of its distinct patches (padded by repeating one of
        its own ids, which leaves a maximum unchanged), and the table of patches those ids
        index, flattened in ``Conv2d`` weight order; None when the data has too many distinct
        patches for this to pay."""
        return distinct_patch_ids(inputs, self.kernel)

    @staticmethod
    def stacked_forward(
        params: dict[str, torch.Tensor], rows: torch.Tensor, table: torch.Tensor
    ) -> torch.Tensor:
        """Outputs (R, B, out) of R stacked copies for rows of patch ids (R, B, K)."""
        weight, bias = params["0.weight"], params["0.bias"]  # (R, O, C, kh, kw), (R, O)
        runs, batch, width = rows.shape
        outs = weight.shape[1]
        values = torch.einsum("up,rop->ruo", table, weight.flatten(2)) + bias[:, None]
        index = rows.reshape(runs, batch * width, 1).expand(-1, -1, outs)
        return values.gather(1, index).view(runs, batch, width, outs).amax(2)


def distinct_patch_ids(
    inputs: list[torch.Tensor], kernel: int
) -> tuple[list[torch.Tensor], torch.Tensor] | None:
    """``(ids per input tensor (N_r, K), patch table (U, C*k*k))``, or None as soon as the
    distinct patches exceed a quarter of the patch positions seen (then a convolution is
    cheaper)."""
    device, dtype = inputs[0].device, inputs[0].dtype
    # Runs of one study share most of their images (splits of one dataset): encode each once.
    # Images are keyed by a digest, compared exactly where two share one, and unfolded from
    # views a chunk at a time: neither the keys nor a stack of the distinct images copies
    # the data (both did: 1.5 GB beside 16,384 images of 3x51x51 that are 511 MB).
    index: dict[bytes, int] = {}
    unique: list[torch.Tensor] = []
    per_run: list[torch.Tensor] = []
    for x in inputs:
        x = x.detach().cpu().contiguous()
        which = torch.empty(len(x), dtype=torch.long)
        for i, image in enumerate(x.numpy()):
            key = hashlib.blake2b(image.tobytes(), digest_size=16).digest()
            if key not in index:
                index[key] = len(unique)
                unique.append(x[i])
            elif not torch.equal(unique[index[key]], x[i]):
                return None  # two different images share a digest: leave it to the convolution
            which[i] = index[key]
        per_run.append(which)
    positions = (unique[0].shape[-2] - kernel + 1) * (unique[0].shape[-1] - kernel + 1)
    table: list[torch.Tensor] = []
    known: dict[float, int] = {}  # patch fingerprint -> row of the table
    image_ids: list[torch.Tensor] = []
    for start in range(0, len(unique), _CHUNK):
        cols = F.unfold(torch.stack(unique[start : start + _CHUNK]), kernel)  # (m, P, L)
        patches, inverse, keys = _distinct_rows(cols.transpose(1, 2).reshape(-1, cols.shape[1]))
        to_table = torch.empty(len(patches), dtype=torch.long)
        for j, key in enumerate(keys.tolist()):
            if key not in known:
                known[key] = len(table)
                table.append(patches[j])
            elif not torch.equal(table[known[key]], patches[j]):
                return None  # two different patches share a key: leave it to the convolution
            to_table[j] = known[key]
        if len(table) > _MAX_DISTINCT_SHARE * (start + len(cols)) * positions:
            return None
        ids = to_table[inverse].view(len(cols), positions).sort(dim=1).values
        fresh = torch.ones_like(ids, dtype=torch.bool)
        fresh[:, 1:] = ids[:, 1:] != ids[:, :-1]
        image_ids += [row[keep] for row, keep in zip(ids, fresh, strict=True)]
    # A multiple of 16, so that data of similar images share one width: stacked training
    # groups only runs of equal shapes.
    width = -(-max(len(ids) for ids in image_ids) // 16) * 16
    # Padding repeats an image's own first id, which leaves its maximum unchanged.
    padded = torch.stack(
        [F.pad(ids, (0, width - len(ids)), value=int(ids[0])) for ids in image_ids]
    )
    rows = [padded[which].to(device) for which in per_run]
    return rows, torch.stack(table).to(device=device, dtype=dtype)


def _keys(rows: torch.Tensor) -> torch.Tensor:
    """A fingerprint of each row (a fixed random projection); callers compare rows that share
    one exactly."""
    weights = torch.rand(
        rows.shape[1], generator=torch.Generator().manual_seed(0), dtype=torch.float64
    )
    return rows.double() @ (weights + 0.5)


def _distinct_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The distinct rows of ``x`` (first axis), for each row the index of its copy, and the
    distinct rows' fingerprints.

    Rows are grouped by fingerprint and then compared exactly; should two different rows
    share one, the slow exact path runs."""
    flat = x.reshape(len(x), -1)
    keys, inverse = torch.unique(_keys(flat), return_inverse=True)
    first = torch.full((len(keys),), len(flat), dtype=torch.long)
    first.scatter_reduce_(0, inverse, torch.arange(len(flat)), reduce="amin")
    distinct = flat[first]
    if not torch.equal(distinct[inverse], flat):
        distinct, inverse = torch.unique(flat, dim=0, return_inverse=True)
        keys = _keys(distinct)
    return distinct.view(-1, *x.shape[1:]), inverse, keys
