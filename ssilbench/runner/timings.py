"""Step times of a method's stages measured on this device, for the cost of a sweep.

A sweep's cost is its stages' steps times their step time, plus its evaluations. Step times
depend on the method, its config, the task's observations and the device, so they are
measured: the method's own ``fit`` runs on a small store of the task's shape (the first
episodes of its dataset, or random frames where it has none yet), each stage stopped after
a few steps, on the device the sweep would use. Steady-state time per step is the median of
the steps after the first; floating-point operations per step are counted in a separate
pass (``torch.utils.flop_counter``), so that the projection to another device can be made.
Runs a sweep stacks into one computation (``Method.fit_many``) are measured stacked as well:
``k`` runs fitted together, each run's step time being the group's over ``k``. A small
classifier stacked five times costs a fraction of five lone runs, so costing each run alone
would overstate such a sweep many times over.
A labeled stage's step time also depends on how many labeled transitions it trains on (a
full-batch stage's batch is all of them, a minibatch one's min(batch, N_L)), so a sweep's
runs are measured at the label budgets they use: ``labeled`` transitions, at most
MAX_LABELED (``ssilbench.runner.dryrun`` interpolates between the smallest and largest).
Measurements are kept in ``RESULTS/timings.json`` keyed by what they depend on.
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ssilbench.api import EnvSpec
from ssilbench.data.datasets import TransitionStore
from ssilbench.data.tensors import as_model_input
from ssilbench.planning.plan import MethodInfo, TaskInfo
from ssilbench.runner.worker import RunInputs
from ssilbench.stages import Stage, StageBudget, StagePlan, StepParityError

FILE = "timings.json"
SAMPLE_FRAMES = 1024
"""Frames of the small store a measurement trains on (its D_U)."""
SAMPLE_LABELED = 256  # labeled stages train at the paper's batch, min(128, N_L) = 128
"""Labeled transitions of a measurement when the runs' label budget is not known."""
MAX_LABELED = 16384
"""The most labeled transitions a measurement trains on (its sample store holds them)."""


@dataclass
class StageTiming:
    seconds_per_step: float
    flops_per_step: float | None = None
    steps_timed: int = 0
    side_steps: int | None = None
    """The steps a run asks of this stage where it trains outside the declared stages
    (``StagePlan.side_stage``: a shared initialisation); None for a declared stage."""


@dataclass
class Measurement:
    """What one method config costs on one task shape and device."""

    key: str
    method: str
    device: str
    stages: dict[str, StageTiming]
    other_seconds_per_transition: float
    """Time outside the stages' steps (labelling D_U, data setup) per D_U transition."""
    eval_forward_seconds: float
    """One policy call on ``eval_episodes`` observations (an upper bound on an evaluation
    is ``horizon`` of these)."""
    measured_at: float = field(default_factory=time.time)
    stacked: int = 1
    """How many runs were fitted together; the times are one run's share of the group's."""
    load: float | None = None
    """The machine's 1-minute load average when measured (None where it is not known): on a
    shared CPU, step times measured at different loads differ several times over."""
    labeled: int | None = None
    """The labeled transitions each run trained on (None: SAMPLE_LABELED, or fewer where the
    sample store had fewer)."""
    scaled_from: list[str] | None = None
    """Not measured for this key: scaled by counted FLOPs from these (portable) keys'
    measurements (:meth:`ssilbench.runner.step_table.StepTable.scaled`)."""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Measurement:
        stages = {k: StageTiming(**v) for k, v in data["stages"].items()}
        return cls(**{**data, "stages": stages})


def _as_json(m: Measurement) -> dict[str, Any]:
    """``m`` as kept in the file: a declared stage's timing without ``side_steps``, so that
    files written before side stages were priced keep their text."""
    data = asdict(m)
    for timing in data["stages"].values():
        if timing["side_steps"] is None:
            del timing["side_steps"]
    return data


def device_description(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    return f"cpu ({platform.machine()}, {torch.get_num_threads()} threads)"


def measurement_key(
    method: MethodInfo,
    spec: EnvSpec,
    device: torch.device,
    stacked: int = 1,
    labeled: int | None = None,
) -> str:
    """What a step time depends on: the method and config, the task's observations and
    actions, the device and torch, how many runs are stacked (left out for one, so that the
    keys of lone runs are those measured before stacking was) and how many labeled
    transitions the runs train on (left out where that is not known: SAMPLE_LABELED)."""
    shape = {
        k: getattr(spec, k)
        for k in (
            "obs_shape",
            "obs_dtype",
            "num_actions",
            "action_kind",
            "frame_stack",
            "action_chunk",
        )
    }
    return json.dumps(
        {
            "method": method.name,
            "config": method.config.model_dump(mode="json"),
            "spec": shape,
            "default_steps": spec.default_steps,
            "device": device_description(device),
            "torch": torch.__version__,
            **({"stacked": stacked} if stacked > 1 else {}),
            **({"labeled": labeled} if labeled is not None else {}),
        },
        sort_keys=True,
        default=list,
    )


class Timings:
    """The measurements kept in one file (``RESULTS/timings.json``)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.items: dict[str, Measurement] = {}
        if path is not None and path.is_file():
            try:
                for data in json.loads(path.read_text()):
                    m = Measurement.from_json(data)
                    self.items[m.key] = m
            except (OSError, ValueError, TypeError, KeyError):
                self.items = {}  # an unreadable file is measured again, and replaced

    def get(self, key: str) -> Measurement | None:
        return self.items.get(key)

    def add(self, m: Measurement) -> None:
        self.items[m.key] = m

    def save(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps([_as_json(m) for m in self.items.values()], indent=1))
        os.replace(tmp, self.path)


class _TimedBudget(StageBudget):
    """A stage budget that stops its stage after ``limit`` steps and stamps each step
    (``stamps``: time and the flop counter's total after each)."""

    def tick(self) -> None:
        super().tick()
        if self.plan.device.type == "cuda":
            torch.cuda.synchronize(self.plan.device)
        flops = self.counter.get_total_flops() if self.counter is not None else 0.0
        self.stamps.append((time.perf_counter(), float(flops)))
        if self.used >= self.limit and self.remaining:
            self.stop_early("step-time measurement")


@dataclass
class _TimedPlan(StagePlan):
    device: torch.device = torch.device("cpu")
    limit: int = 4
    counter: Any = None

    def stage(self, name: str, policy: Any = None) -> StageBudget:
        return self._timed(super().stage(name, policy).stage, policy)

    def side_stage(self, name: str, steps: int) -> StageBudget:
        # Limited as a declared stage is (a paper-size pretraining would otherwise run its
        # tens of thousands of steps inside a dry run), and timed apart from "other".
        if name in self.budgets:
            raise StepParityError(f"stage '{name}' was opened twice")
        return self._timed(Stage(name, steps), None)

    def _timed(self, stage: Stage, policy: Any) -> StageBudget:
        timed = _TimedBudget(stage, self, policy)
        timed.limit, timed.stamps, timed.counter = self.limit, [], self.counter
        self.budgets[stage.name] = timed
        return timed


def _sample_store(task: TaskInfo, root: Path, labeled: int = 0) -> TransitionStore:
    """A small store of the task's shape: the first episodes of its dataset (at most
    SAMPLE_FRAMES frames, at least one episode, and enough episodes for ``labeled``
    transitions where the dataset has them), or random frames when it has none."""
    spec = task.spec
    data = task.dataset
    if data is not None:
        ends = np.asarray(data.episode_ends)
        transitions = ends - np.arange(1, len(ends) + 1)  # an episode of L frames has L - 1
        enough = int(np.searchsorted(transitions, labeled))  # the first with >= labeled
        keep = ends[: max(enough + 1, int(np.sum(ends <= SAMPLE_FRAMES)), 1)]
        n = int(keep[-1])
        return TransitionStore.write(
            root,
            np.asarray(data.obs[:n]),
            np.asarray(data.actions[:n]),
            np.asarray(data.rewards[:n]),
            keep,
            {"sample": True},
            extras={k: np.asarray(v[:n]) for k, v in data.extras.items()},
        )
    rng = np.random.Generator(np.random.PCG64(0))
    n = max(SAMPLE_FRAMES, 64 * -(-labeled // 63))  # episodes of 64 frames: 63 transitions
    if spec.obs_dtype == "uint8":
        obs = rng.integers(0, 256, size=(n, *spec.obs_shape), dtype=np.uint8)
    else:
        obs = rng.standard_normal((n, *spec.obs_shape)).astype(np.float32)
    if spec.action_kind == "discrete":
        actions = rng.integers(0, spec.num_actions, size=n)
    else:
        low, high = np.asarray(spec.action_low), np.asarray(spec.action_high)
        actions = rng.uniform(low, high, size=(n, spec.num_actions)).astype(np.float32)
    extras = {
        k: rng.integers(0, 256, size=(n, *shape), dtype=np.uint8)
        if dt == "uint8"
        else rng.standard_normal((n, *shape)).astype(dt)
        for k, (shape, dt) in spec.extra_obs.items()
    }
    ends = np.arange(64, n + 1, 64)
    return TransitionStore.write(
        root, obs, actions, np.zeros(n, np.float32), ends, {"sample": True}, extras=extras
    )


def _fit_timed(
    method: MethodInfo,
    task: TaskInfo,
    store: TransitionStore,
    plugins,
    device: torch.device,
    limit: int,
    counter=None,
    stacked: int = 1,
    labeled: int | None = None,
) -> tuple[list[_TimedPlan], float]:
    """The timed plans of ``stacked`` runs (seeds 0, 1, ...) fitted on ``store``, one run
    through ``fit`` or several together through ``fit_many``, and the seconds it took."""
    spec = task.spec
    budget = str(
        min(
            (labeled or SAMPLE_LABELED) if spec.budget_unit == "transitions" else 2,
            store.num_transitions if spec.budget_unit == "transitions" else store.num_episodes,
        )
    )
    plans, ctxs = [], []
    for seed in range(stacked):
        inputs = RunInputs.declare(method, task, store, budget, seed, spec.default_steps)
        plan = _TimedPlan(
            inputs.stages,
            eval_every=max(s.steps for s in inputs.stages) + 1,
            evaluate=lambda policy: math.nan,
            device=device,
            limit=limit,
            counter=counter,
        )
        plans.append(plan)
        ctxs.append(inputs.context(method, task, plugins, device, seed, plan,
                                   log=lambda message: None))  # fmt: skip
    began = time.perf_counter()
    fitter = method.cls()
    policies = fitter.fit_many(ctxs) if stacked > 1 else [fitter.fit(ctxs[0])]
    total = time.perf_counter() - began
    for plan, policy in zip(plans, policies, strict=True):
        plan.policy = policy
    return plans, total


def measure(
    method: MethodInfo,
    task: TaskInfo,
    plugins,
    device: torch.device,
    steps: int = 4,
    flops: bool = False,
    stacked: int = 1,
    labeled: int | None = None,
) -> Measurement:
    """Measure one method config on one task (see the module docstring); ``stacked`` runs
    fitted together (a method that is not ``batched`` fits them one after the other, so it
    is measured alone), each on ``labeled`` labeled transitions (at most MAX_LABELED; None:
    SAMPLE_LABELED, or fewer where the store has fewer)."""
    stacked = stacked if method.cls.batched else 1
    if labeled is not None:
        labeled = max(1, min(labeled, MAX_LABELED))
    with tempfile.TemporaryDirectory(prefix="ssilbench-timing-") as tmp:
        store = _sample_store(task, Path(tmp) / "store", labeled or 0)
        plans, total = _fit_timed(method, task, store, plugins, device, max(2, steps),
                                  stacked=stacked, labeled=labeled)  # fmt: skip
        plan = plans[0]  # a stacked group steps in lockstep: its first run's stamps time it
        counted = None
        if flops:
            from torch.utils.flop_counter import FlopCounterMode

            with FlopCounterMode(display=False) as counter:
                [counted], _ = _fit_timed(method, task, store, plugins, device, 2, counter,
                                          labeled=labeled)  # fmt: skip
        stages: dict[str, StageTiming] = {}
        stepping = 0.0
        for name, budget in plan.budgets.items():
            times = [t for t, _ in budget.stamps]
            if len(times) < 2:
                continue
            per_step = float(statistics.median(np.diff(times)))
            stepping += per_step * budget.used
            per_flop = None
            if counted is not None and len(counted.budgets[name].stamps) >= 2:
                (_, f0), (_, f1) = counted.budgets[name].stamps[:2]
                per_flop = f1 - f0
            stages[name] = StageTiming(per_step / stacked, per_flop, len(times) - 1,
                                       side_steps(plan, name))  # fmt: skip
        # What is not stepping (labelling D_U, gathering data) grows with D_U.
        other = max(0.0, total - stepping) / stacked / max(store.num_transitions, 1)
        eval_forward = _policy_call_seconds(plan.policy, task.spec, store, device)
    return Measurement(
        measurement_key(method, task.spec, device, stacked, labeled),
        method.name,
        device_description(device),
        stages,
        other,
        eval_forward,
        stacked=stacked,
        load=load_average(),
        labeled=labeled,
    )


def side_steps(plan: StagePlan, name: str) -> int | None:
    """The steps asked of ``name`` where it is a side stage of ``plan`` (None: declared)."""
    if any(stage.name == name for stage in plan.stages):
        return None
    return plan.budgets[name].stage.steps


def load_average() -> float | None:
    """The 1-minute load average, where the system gives one."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


@torch.no_grad()
def _policy_call_seconds(policy, spec: EnvSpec, store: TransitionStore, device) -> float:
    """Median time of one policy call on ``eval_episodes`` observations."""
    if spec.extra_obs or spec.frame_stack > 1:
        return math.nan  # dict / stacked observations: measured by the environment's bench
    rows = np.arange(spec.eval_episodes) % store.num_frames
    obs = as_model_input(np.asarray(store.obs[rows]), device)
    times = []
    for _ in range(3):
        began = time.perf_counter()
        policy.act(obs, greedy=spec.action_selection == "greedy")
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - began)
    return float(statistics.median(times))
