"""Row-wise networks (LC, 5L MLP) with a fast path for stacked runs over repeated inputs.

A network without batch statistics maps each input row on its own, so when a dataset repeats
its states — the stochastic-expert grid has 988 transitions over 39 to 265 distinct
positions — a stacked group can evaluate each distinct state once per step and gather the
outputs for its minibatch rows: the same outputs and gradients (up to float summation order)
for a fraction of the rows.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.func import functional_call

# Worth it when the distinct rows are clearly fewer than a minibatch's rows.
_MAX_SHARE_OF_BATCH = 0.7


class RowwiseSequential(nn.Sequential):
    """``nn.Sequential`` of layers that treat every input row independently."""

    def stacked_encode(
        self, inputs: list[torch.Tensor], batch: int
    ) -> tuple[list[torch.Tensor], torch.Tensor] | None:
        """Per run, each row as an index into the table of distinct rows of every run's data;
        None when the table would not be clearly smaller than a minibatch."""
        if inputs[0].dim() != 2:
            return None  # vectors only: finding repeated images costs more than it saves
        table, inverse = torch.unique(torch.cat(inputs), dim=0, return_inverse=True)
        if len(table) > _MAX_SHARE_OF_BATCH * batch:
            return None
        return list(inverse.split([len(x) for x in inputs])), table

    def stacked_forward(
        self, params: dict[str, torch.Tensor], rows: torch.Tensor, table: torch.Tensor
    ) -> torch.Tensor:
        """Outputs (R, B, out) of R stacked copies for rows of table indices (R, B)."""
        outputs = torch.vmap(lambda p: functional_call(self, p, (table,)))(params)  # (R, U, O)
        return outputs.gather(1, rows.unsqueeze(-1).expand(-1, -1, outputs.shape[-1]))
