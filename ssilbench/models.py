"""The models of the contract: an :class:`Architecture` builds networks, a method returns a
:class:`Policy`, and a :class:`VideoModel` predicts next states (an environment's ground
truth, or one a method learned). Exported by :mod:`ssilbench.api`, where plugins import them
from; defined here so that :mod:`ssilbench.context` names them without importing the api."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import numpy as np
    import torch

    from ssilbench.stages import WarmupLinear


class VideoModel(ABC):
    """A next-state predictor v(s) in model-input space (float tensors, batched)."""

    @abstractmethod
    def predict(self, obs: torch.Tensor) -> torch.Tensor:
        """The most likely next state for each state of the batch."""

    def outcomes(self, obs: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Every possible next state with its probability: ``[(prob (B,), next (B, ...))]``.

        A VM-IDM policy marginalises over these, pi(a|s) = sum_k p_k h(a | s, s'_k). The
        default is the deterministic prediction with probability one; a stochastic
        environment (e.g. a maze with no-op probability) lists each outcome.
        """
        import torch

        return [(torch.ones(len(obs), device=obs.device), self.predict(obs))]


class Policy(ABC):
    """A trained policy. Observations are model-input tensors (``ssilbench.kit.as_model_input``).

    Discrete-action policies implement :meth:`probs` and inherit :meth:`act`. A
    continuous-action policy overrides :meth:`act` to return actions of shape (batch, A), or
    chunks (batch, K, A) of which the rollout executes ``spec.action_execute``; its
    observations are a dict of tensors where the environment has ``extra_obs``.
    """

    @abstractmethod
    def probs(self, obs: torch.Tensor) -> torch.Tensor:
        """Action probabilities, shape (batch, num_actions)."""

    def idm_probs(self, obs: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor | None:
        """h(a | s, s') of the IDM behind the policy, where there is one (diagnostics)."""
        return None

    def snapshot(self) -> Policy:
        """A copy that training no longer changes, for an evaluation that runs while training
        goes on (a deep copy by default; override it to share large read-only parts)."""
        import copy

        return copy.deepcopy(self)

    def act(self, obs: torch.Tensor, greedy: bool, generator: torch.Generator | None = None):
        """Actions for a batch: the most likely one, or one sampled from :meth:`probs`."""
        import torch

        with torch.no_grad():
            p = self.probs(obs)
            if greedy:
                return p.argmax(dim=-1)
            return torch.multinomial(p.cpu(), 1, generator=generator).squeeze(-1).to(p.device)


class Architecture(ABC):
    """A network family; builds modules mapping an input of some shape to ``out`` numbers."""

    description: ClassVar[str] = ""
    input_kinds: ClassVar[tuple[str, ...]] = ("vector", "image")
    action_kinds: ClassVar[tuple[str, ...]] = ("discrete",)
    lr: ClassVar[float] = 1e-3
    lr_schedule: ClassVar[WarmupLinear | None] = None
    """The learning-rate schedule the methods train with (``ssilbench.kit.WarmupLinear``;
    None: constant)."""
    fast_cuda: ClassVar[bool] = False
    """Train with bf16 autocast and channels-last tensors on CUDA (``ssilbench.kit.Speed``);
    float32 on the CPU whatever this says."""
    unified: ClassVar[bool] = False
    """True for a multi-role network (``ssilbench.kit.UnifiedArchitecture``): one model that
    the methods train as a policy, an IDM or a video model instead of building a classifier."""

    min_image_size: ClassVar[tuple[int, int]] = (1, 1)
    """The smallest (height, width) of image observations (channels first) its networks
    take: :meth:`input_problem` refuses smaller ones before any run starts."""

    @abstractmethod
    def build(self, in_shape: tuple[int, ...], out: int) -> torch.nn.Module:
        """A fresh module; inputs are float tensors of shape (batch, *in_shape)."""

    def input_problem(self, obs_shape: tuple[int, ...]) -> str | None:
        """Why networks of this architecture cannot take observations of ``obs_shape`` (one
        stored frame), or None. The planner asks before any run starts, so a mismatch is
        one message and exit code 2; the default refuses images smaller than
        :attr:`min_image_size`. Override it for other rules."""
        low_h, low_w = self.min_image_size
        if len(obs_shape) == 3 and (obs_shape[1] < low_h or obs_shape[2] < low_w):
            return (f"needs images of at least {low_h}x{low_w} pixels, and the observations "
                    f"are {obs_shape[1]}x{obs_shape[2]}")  # fmt: skip
        return None

    def batch_size(self, n: int) -> int:
        """The paper's batch-size rule for a dataset of ``n`` items (full batch by default)."""
        return n


def image_frames(obs: Any, obs_shape: tuple[int, ...], frame_stack: int = 1) -> np.ndarray | None:
    """RGB frames (N, H, W, 3) uint8 of a batch of image observations (channels first or
    last, 1 or 3 channels; with a frame stack, its newest frame; a dict's ``"obs"``), or None
    where the observations are not images. ``Task.frames``' default: in the contract, so
    that the api imports none of the core's video machinery."""
    import numpy as np

    if isinstance(obs, dict):
        obs = obs.get("obs")
    if obs is None or len(obs_shape) != 3:
        return None
    array = np.asarray(obs)
    if frame_stack > 1 and array.ndim == 5:
        array = array[:, -1]
    if array.ndim != 4 or tuple(array.shape[1:]) != tuple(obs_shape):
        return None
    if obs_shape[0] in (1, 3) and obs_shape[-1] not in (1, 3):
        array = array.transpose(0, 2, 3, 1)  # channels first -> last
    if array.shape[-1] == 1:
        array = np.repeat(array, 3, axis=-1)
    if array.shape[-1] != 3:
        return None
    if array.dtype != np.uint8:
        array = np.clip(array, 0, 255).astype(np.uint8)
    return array
