"""Training windows of a view as UVA's inputs, and the loss of one task mode on them."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from ssilbench.kit import LabeledView, UnlabeledView
from ssilbench_uva.modes import mode_masks
from ssilbench_uva.windows import Windows, chunk_targets, make_windows

if TYPE_CHECKING:
    from ssilbench_uva.architecture import Shared
    from ssilbench_uva.model import UVANet

ENCODE_BATCH = 256
"""Windows per pass when a whole view is read (labels, the stopping rule's loss)."""


class Batches:
    """Minibatches of windows of one view as model inputs (latent tokens, actions)."""

    def __init__(self, shared: Shared, view: LabeledView | UnlabeledView,
                 labels: np.ndarray | None = None) -> None:  # fmt: skip
        lay = shared.layout
        self.shared = shared
        self.windows: Windows = make_windows(view.index, view.episode_ends, lay.history,
                                             lay.future, lay.chunk,
                                             shared.options.history_stride)  # fmt: skip
        device = shared.device
        self.history = torch.from_numpy(self.windows.history).to(device)
        self.future = torch.from_numpy(self.windows.future).to(device)
        # A multitask task's conditioning vector of each window: its current frame's,
        # read per minibatch (the store keeps one row per task, not one per frame).
        key = shared.condition_key
        self._condition_rows = view.extras[key] if key is not None else None
        self._current = self.windows.history[:, -1]
        self.targets = self.known = None
        if labels is not None:
            self.targets = torch.as_tensor(labels, dtype=torch.float32, device=device)
            self.known = torch.ones(self.targets.shape[:2], device=device)
        elif isinstance(view, LabeledView):
            actions, known = chunk_targets(self.windows, view.index, view.actions)
            self.targets = shared.normalise_actions(torch.from_numpy(actions).to(device))
            self.known = torch.from_numpy(known).float().to(device)

    def __len__(self) -> int:
        return len(self.windows)

    def condition(self, rows) -> torch.Tensor | None:
        """The conditioning vectors (B, C) of the windows ``rows`` (None: unconditioned)."""
        if self._condition_rows is None:
            return None
        if isinstance(rows, torch.Tensor):
            rows = rows.cpu().numpy()
        frames = self._current[rows]
        values = np.asarray(self._condition_rows[frames], dtype=np.float32)
        return torch.from_numpy(values).to(self.shared.device)

    def inputs(self, rows, augment_with: torch.Generator | None = None,
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:  # fmt: skip
        """History tokens (B, Th, C), future tokens (B, Tf, C), proprio (B, H, D). With
        ``augment_with`` (training) and an ``augment`` transform, the windows' frames are
        read, transformed and encoded anew (the reference encodes every training batch)."""
        enc = self.shared.encoded
        hist, fut = self.history[rows], self.future[rows]
        b = hist.shape[0]
        latent = enc.tokens.shape[-1]
        proprio = enc.proprio[hist] if enc.proprio is not None else None
        if augment_with is not None and self.shared.options.augment != "none":
            frames = torch.cat([hist, fut], dim=1).cpu().numpy()
            tokens = self.shared.augmented_tokens(frames, augment_with)
            h_tok = tokens[:, : hist.shape[1]].reshape(b, -1, latent)
            return h_tok, tokens[:, hist.shape[1] :].reshape(b, -1, latent), proprio
        h_tok = enc.tokens[hist].reshape(b, -1, latent)
        f_tok = enc.tokens[fut].reshape(b, -1, latent)
        return h_tok, f_tok, proprio


def mode_loss(net: UVANet, batches: Batches, rows, mode: str, generator: torch.Generator,
              min_mask_ratio: float, augmented: bool = False) -> torch.Tensor:  # fmt: skip
    """The loss of one mode on one minibatch of windows (``augmented``: of its frames
    transformed by ``augment``, drawn from ``generator``)."""
    hist, fut, proprio = batches.inputs(rows, generator if augmented else None)
    masks = mode_masks(mode, hist.shape[0], fut.shape[1], generator, min_mask_ratio,
                       device=hist.device, masking=batches.shared.options.masking,
                       frames=batches.shared.layout.future)  # fmt: skip
    actions = batches.targets[rows] if batches.targets is not None else None
    if actions is None and bool(masks.actions_visible.any()):
        raise ValueError(f"UVA mode {mode!r} reads actions: it needs a labeled view or labels")
    known = batches.known[rows] > 0 if actions is not None else None
    out_future, out_actions = net(hist, fut, proprio, actions, masks, known,
                                  condition=batches.condition(rows))  # fmt: skip
    loss = hist.new_zeros(())
    if masks.video_loss:
        sel = masks.video_target
        loss = loss + net.diffloss.loss(fut[sel], out_future[sel], generator=generator)
    if masks.action_loss:
        if actions is None:
            raise ValueError(f"UVA mode {mode!r} needs action targets: a labeled view or labels")
        weight = batches.known[rows].flatten()
        loss = loss + net.action_head.loss(actions.flatten(0, 1), out_actions.flatten(0, 1),
                                           weight=weight, generator=generator)  # fmt: skip
    return loss


@torch.no_grad()
def full_loss(net: UVANet, batches: Batches, modes: tuple[str, ...],
              min_mask_ratio: float, chunk: int = ENCODE_BATCH) -> torch.Tensor:  # fmt: skip
    """The stopping rule's training loss: every mode on every window, under fixed noise and
    masks, so that two checks measure the same quantity."""
    generator = torch.Generator().manual_seed(0)
    total = 0.0
    for mode in modes:
        for start in range(0, len(batches), chunk):
            rows = slice(start, min(start + chunk, len(batches)))
            size = rows.stop - rows.start
            total += float(mode_loss(net, batches, rows, mode, generator, min_mask_ratio)) * size
    return torch.tensor(total / (len(batches) * len(modes)))
