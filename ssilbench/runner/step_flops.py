"""Floating-point operations of a method's stage steps, counted without doing the arithmetic,
so that a step time measured for one network can be scaled to another (``step_table``).

The method's own ``fit`` runs for two steps of each stage on a small store of the task's
shape (as a measurement does, :mod:`ssilbench.runner.timings`), under torch's
``FlopCounterMode``; every matrix product and convolution (forward and backward) is counted
at its real shapes but answered with zeros of its output's shape instead of computed. What
is counted is therefore a full training step (forward, backward and optimiser), not the
"3 x forward" rule, at the run's batch size, in the time the data handling and the
element-wise operations take (seconds at the paper's Procgen sizes, where computing takes
minutes). The counts do not depend on the device; they are kept by their key without it
(``step_flops.json`` beside this module holds those of the shipped step times and of the
paper's sweeps).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ssilbench.data.tensors import as_model_input

if TYPE_CHECKING:
    from ssilbench.planning.plan import MethodInfo, TaskInfo

SHIPPED_FLOPS = Path(__file__).with_name("step_flops.json")

_aten = torch.ops.aten
HEAVY = {
    _aten.convolution.default,
    _aten.convolution_backward.default,
    _aten.mm.default,
    _aten.addmm.default,
    _aten.bmm.default,
    _aten.baddbmm.default,
}
"""The operations answered by shape alone: nearly all of a network's arithmetic."""


@dataclass
class FlopCount:
    """What one method config costs on one task shape and label count, in FLOPs."""

    stages: dict[str, float]
    """One training step of each stage (forward, backward, optimiser)."""
    other_per_transition: float
    """Outside the stages' steps (labelling D_U, computing targets) per D_U transition."""
    eval_forward: float
    """One policy call on ``eval_episodes`` observations."""
    side_steps: dict[str, int] = field(default_factory=dict)
    """The steps asked of each stage trained outside the declared ones (a shared
    initialisation, ``StagePlan.side_stage``), so that a dry run can price it."""


def flops_path() -> Path:
    """The shipped counts, or the file ``SSILBENCH_STEP_FLOPS`` names."""
    return Path(os.environ.get("SSILBENCH_STEP_FLOPS") or SHIPPED_FLOPS)


COUNT_ALL = "SSILBENCH_COUNT_FLOPS"
"""Set (to 1): a dry run counts the FLOPs of every step time it uses and adds them to the
counts file (``benchmarks/step_times.py --flops`` fills the shipped one so)."""


def flop_key(key: str) -> str:
    """A measurement key without what FLOPs do not depend on: the device, the torch version
    and how many runs are stacked (a stacked run's share computes what a lone run does)."""
    fields = json.loads(key)
    for name in ("device", "torch", "stacked"):
        fields.pop(name, None)
    return json.dumps(fields, sort_keys=True)


class _ShapesOnly(TorchDispatchMode):
    """Matrix products and convolutions answered with zeros of their output's shape (found
    on meta tensors): the FLOP counter inside this mode sees them, nothing computes them."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func not in HEAVY:
            return func(*args, **kwargs)
        meta = func(*_to_meta(args), **_to_meta(kwargs))
        if isinstance(meta, tuple | list):
            return type(meta)(_zeros_like(t) for t in meta)
        return _zeros_like(meta)


def _to_meta(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to("meta")
    if isinstance(value, tuple | list):
        return type(value)(_to_meta(v) for v in value)
    if isinstance(value, dict):
        return {k: _to_meta(v) for k, v in value.items()}
    return value


def _zeros_like(t: Any) -> Any:
    return torch.zeros(t.shape, dtype=t.dtype) if isinstance(t, torch.Tensor) else t


def count_flops(method: MethodInfo, task: TaskInfo, plugins, labeled: int | None) -> FlopCount:
    """Count the FLOPs of ``method`` on ``task`` at ``labeled`` labeled transitions (see the
    module docstring). Torch's random state is left as it was."""
    from torch.utils.flop_counter import FlopCounterMode

    from ssilbench.runner.timings import MAX_LABELED, _fit_timed, _sample_store, side_steps

    if labeled is not None:
        labeled = max(1, min(labeled, MAX_LABELED))
    cpu = torch.device("cpu")
    with (
        tempfile.TemporaryDirectory(prefix="ssilbench-flops-") as tmp,
        torch.random.fork_rng(devices=[]),
    ):
        store = _sample_store(task, Path(tmp) / "store", labeled or 0)
        with _ShapesOnly(), FlopCounterMode(display=False) as counter:
            [plan], _ = _fit_timed(method, task, store, plugins, cpu, 2, counter,
                                   labeled=labeled)  # fmt: skip
            total = float(counter.get_total_flops())
            eval_forward = _policy_call_flops(plan.policy, task, store, counter)
    stages, stepping, side = {}, 0.0, {}
    for name, budget in plan.budgets.items():
        if len(budget.stamps) < 2:
            continue
        (_, f0), (_, f1) = budget.stamps[:2]
        stages[name] = f1 - f0
        stepping += stages[name] * budget.used
        if (steps := side_steps(plan, name)) is not None:
            side[name] = steps
    other = max(0.0, total - stepping) / max(store.num_transitions, 1)
    return FlopCount(stages, other, eval_forward, side)


def _policy_call_flops(policy, task: TaskInfo, store, counter) -> float:
    """FLOPs of one policy call on ``eval_episodes`` observations (NaN where a measurement
    does not time one either: dict or stacked observations)."""
    spec = task.spec
    if spec.extra_obs or spec.frame_stack > 1:
        return math.nan
    rows = np.arange(spec.eval_episodes) % store.num_frames
    obs = as_model_input(np.asarray(store.obs[rows]), torch.device("cpu"))
    before = counter.get_total_flops()
    with torch.no_grad():
        policy.act(obs, greedy=spec.action_selection == "greedy")
    return float(counter.get_total_flops() - before)


class FlopTable:
    """FLOP counts by :func:`flop_key`: the shipped ones, and those counted in this process."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path if path is not None else flops_path()
        self.items: dict[str, FlopCount] = {}
        if self.path.is_file():
            try:
                for key, data in json.loads(self.path.read_text()).items():
                    self.items[key] = FlopCount(**data)
            except (OSError, ValueError, TypeError):
                self.items = {}  # unreadable: counted again where needed
        self.counted_now: set[str] = set()

    def get(self, key: str) -> FlopCount | None:
        return self.items.get(flop_key(key))

    def count(self, key: str, method: MethodInfo, task: TaskInfo, plugins) -> FlopCount | None:
        """The count of ``key`` (a measurement key): kept, or counted now and kept (None
        where the method cannot be run so: a count is an estimate's help, not a need)."""
        found = self.get(key)
        if found is not None:
            return found
        try:
            found = count_flops(method, task, plugins, json.loads(key).get("labeled"))
        except Exception:  # noqa: BLE001 - any failure means "not counted", not an error
            return None
        self.items[flop_key(key)] = found
        self.counted_now.add(flop_key(key))
        return found

    def save(self) -> None:
        """Write the counts (a temporary file, renamed), sorted by key."""
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        # side_steps only where there are side stages: the other entries keep their text
        data = {k: {f: v for f, v in asdict(c).items() if f != "side_steps" or v}
                for k, c in sorted(self.items.items())}  # fmt: skip
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, self.path)
