"""The run's side of the contract: :class:`RunContext`, everything a method may use, and
:func:`stream_seed`, how a run's named random streams are seeded. Both are exported by
:mod:`ssilbench.api`, where plugins import them from."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from ssilbench.deprecation import deprecated
from ssilbench.env_spec import EnvSpec

if TYPE_CHECKING:
    import torch

    from ssilbench.data.split import LabeledView, UnlabeledView
    from ssilbench.models import Architecture, Policy, VideoModel
    from ssilbench.stages import StagePlan, StoppingRule


def stream_seed(seed: int, name: str) -> int:
    """The seed of the random stream ``name`` of a run seeded ``seed``.

    The first eight bytes of ``sha256(f"{seed}:{name}")``, read big-endian, shifted right by
    one bit: an integer in [0, 2**63) that is the same in every process, on every machine and
    Python version (unlike ``hash()``), and unrelated between names, so adding a stream never
    moves another.
    """
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


@dataclass
class RunContext:
    """Everything a method may use, and nothing else.

    ``unlabeled`` has no actions at all, so no method can leak labels from D_U.
    """

    config: BaseModel
    """The validated instance of the method's ``Config``."""
    spec: EnvSpec
    labeled: LabeledView
    unlabeled: UnlabeledView
    video_model: VideoModel | None
    device: torch.device
    seed: int
    plan: StagePlan
    architectures: Callable[[str], Architecture]
    evaluate: Callable[[Policy], float]
    stopping: StoppingRule | None = None
    """The rule that may end a stage once training has converged (``--stop-early``), or None."""
    log: Callable[[str], None] = print
    metrics: Callable[[str, float, int | None], None] | None = None
    """Where :meth:`log_metric` records (set by the runner; None: nowhere)."""
    _extras: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def log_metric(self, name: str, value: float, step: int | None = None) -> None:
        """Record a diagnostic of the run (e.g. the fraction of pseudo-labels kept) as a
        point of the curve ``name`` of the stage open now, at ``step`` (default: the run's
        global step). Curves are kept in the results store, thinned to at most 1,000 points
        each, drawn by ``ssilbench curves`` and sent to the enabled loggers. ``value`` is
        converted with ``float()`` (a tensor's device syncs): call it at most every few
        hundred steps, not every step. Recording never changes the run's result."""
        if self.metrics is not None:
            self.metrics(name, float(value), step)

    def architecture(self, name: str | None) -> Architecture:
        """The named architecture, or the environment's default when ``name`` is None."""
        return self.architectures(name or self.spec.default_arch)

    @contextmanager
    def seeded(self) -> Iterator[None]:
        """Torch's global generator seeded from the run seed for the block (and restored
        after it): networks built inside start from the same weights whether runs are fitted
        one by one or stacked together."""
        import torch

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            yield

    def stream_seed(self, name: str) -> int:
        """The seed of the run's random stream ``name`` (:func:`stream_seed`), for helpers
        that take an integer ``seed=`` (minibatch order, sampling)."""
        return stream_seed(self.seed, name)

    def generator(self, name: str | int | None = None) -> torch.Generator:
        """A CPU torch generator for the run's random stream ``name``, seeded with
        :meth:`stream_seed`. Name a stream after what it drives (``"policy"``, ``"idm"``):
        two methods that train the same stage on the same data should use the same name,
        so that the stage cache recognises the computation as one.

        Deprecated: an integer salt, or none (API 1.0's ``generator(salt=0)``), seeds the
        generator as API 1.0 did, with a DeprecationWarning."""
        import torch

        g = torch.Generator(device="cpu")
        if isinstance(name, str):
            g.manual_seed(self.stream_seed(name))
            return g
        deprecated("RunContext.generator(salt) with an integer salt (or none)",
                   "name the stream instead, e.g. ctx.generator(\"policy\")", "1.1")  # fmt: skip
        g.manual_seed(self.seed * 1_000_003 + int(name or 0))
        return g

    @property
    def extras(self) -> dict[str, Any]:
        """Deprecated (API 1.0's free dictionary for harness extensions): a dict of the run
        that nothing reads, with a DeprecationWarning."""
        deprecated("RunContext.extras", "keep a run's state in local variables of fit, and "
                   "rows computed from a stage in the stage cache (ssilbench.kit.label_rows("
                   "ctx.plan.cache, ...))", "1.1")  # fmt: skip
        return self._extras
