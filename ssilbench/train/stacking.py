"""Stacked parameters: R copies of one module applied as one ``vmap``-ed module, the
padding that keeps a run's sums its own, and an Adam whose update of an element does not
depend on where the element lies in the stacked tensor.

These are the pieces :mod:`ssilbench.train.batched` trains with; its docstring says why each
is written as it is (a run's numbers must not depend on the runs stacked with it).
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
from torch import nn
from torch.func import functional_call, stack_module_state


class Stacked(nn.Module):
    """R copies of one module with separate parameters, applied to inputs of shape (R, B, ...)."""

    def __init__(self, nets: list[nn.Module], context: Any = None) -> None:
        super().__init__()
        params, buffers = stack_module_state(nets)
        self.params = nn.ParameterDict(
            {k.replace(".", "/"): nn.Parameter(v) for k, v in params.items()}
        )
        self.buffers_ = {k: v for k, v in buffers.items()}
        # Kept out of the module tree: the template has no data (meta) and must not move.
        self._template = (copy.deepcopy(nets[0]).to("meta"),)
        self.count = len(nets)
        self.context = context  # from the module's ``stacked_encode``; None: vmap

    def _state(self):
        return {k.replace("/", "."): v for k, v in self.params.items()}, self.buffers_

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        params, buffers = self._state()
        if self.context is not None:
            return self._template[0].stacked_forward(params, x, self.context)
        return self.apply_to(params, buffers, x)

    def apply_to(
        self,
        params: dict[str, torch.Tensor],
        buffers: dict[str, torch.Tensor],
        x: torch.Tensor,
        tables: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The copies whose stacked parameters are ``params`` on ``x`` (R, B, ...); with
        ``tables`` (R, U, ...), ``x`` holds rows of each copy's own ``stacked_encode`` table."""
        template = self._template[0]
        if tables is None:

            def one(p, b, xi):
                return functional_call(template, (p, b), (xi,))

            return torch.vmap(one)(params, buffers, x)

        def own(p, rows, table):
            single = {k: v.unsqueeze(0) for k, v in p.items()}
            return template.stacked_forward(single, rows.unsqueeze(0), table).squeeze(0)

        return torch.vmap(own)(params, x, tables)

    def unstack(self, nets: list[nn.Module]) -> list[nn.Module]:
        """Copy the trained parameters back into the original modules (returned)."""
        params, _ = self._state()
        with torch.no_grad():
            for r, net in enumerate(nets):
                for name, value in net.named_parameters():
                    value.copy_(params[name][r])
        return nets


def padded_width(n: int) -> int:
    """The rows a run's data or minibatch of ``n`` rows is padded to: a function of ``n``
    alone, at most a quarter more (up to 8 rows, exactly ``n``)."""
    if n <= 8:
        return n
    step = 1 << (n.bit_length() - 3)
    return -(-n // step) * step


def padded_stack(tensors: list[torch.Tensor], length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack ragged per-run tensors on a new run axis, ``length`` rows each (at least each
    one's own); the mask marks real rows."""
    longest = max(length, *(len(t) for t in tensors))
    out = tensors[0].new_zeros((len(tensors), longest, *tensors[0].shape[1:]))
    mask = torch.zeros(len(tensors), longest, dtype=torch.bool, device=tensors[0].device)
    for r, t in enumerate(tensors):
        out[r, : len(t)] = t
        mask[r, : len(t)] = True
    return out, mask


class StackedAdam:
    """Adam (PyTorch's defaults) on stacked parameters, which it moves into one flat buffer
    (so that a step is a dozen operations, however many tensors the network has). Only
    multiplications, additions, square roots and divisions of whole tensors: each is
    correctly rounded in a kernel's vectorised body and in its scalar tail alike, so an
    element's update does not depend on where the runs stacked with it put it (the fused
    kernel and ``lerp``/``addcmul`` treat the two differently)."""

    def __init__(
        self,
        params: list[torch.Tensor],
        lr: float,
        steps: int = 0,
        moments: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ) -> None:
        self.params = params
        self.lr = lr
        self.steps = steps
        self.betas = betas
        self.eps = eps
        self.sizes = [p.numel() for p in params]
        self.flat = torch.cat([p.detach().reshape(-1) for p in params])
        with torch.no_grad():
            for p, view in zip(params, self._views(self.flat), strict=True):
                p.data = view
        if moments is None:
            self.exp_avg, self.exp_avg_sq = torch.zeros_like(self.flat), torch.zeros_like(self.flat)
        else:
            self.exp_avg, self.exp_avg_sq = (torch.cat([t.reshape(-1) for t in m]) for m in moments)

    def _views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        return [v.view_as(p) for v, p in zip(flat.split(self.sizes), self.params, strict=True)]

    def moments(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The first and second moments, shaped as the parameters."""
        return self._views(self.exp_avg), self._views(self.exp_avg_sq)

    @torch.no_grad()
    def step(self) -> None:
        b1, b2 = self.betas
        self.steps += 1
        grad = torch.cat([p.grad.reshape(-1) for p in self.params])
        self.exp_avg.mul_(b1).add_(grad * (1 - b1))
        self.exp_avg_sq.mul_(b2).add_(grad.mul_(grad).mul_(1 - b2))
        denom = self.exp_avg_sq.sqrt().mul_(1 / math.sqrt(1 - b2**self.steps)).add_(self.eps)
        update = torch.div(self.exp_avg, denom).mul_(self.lr / (1 - b1**self.steps))
        self.flat.sub_(update)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None
