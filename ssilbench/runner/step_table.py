"""Step times shipped with ssilbench, so that a dry run or ``plan`` prices a sweep at once.

Measuring step times (:mod:`ssilbench.runner.timings`) trains a few steps of every stage at
the sweep's sizes: on a CPU at the paper's Procgen sizes that is seconds a step, and minutes
for a sweep. ``step_times.json`` beside this module holds measurements made for the paper's
sweep files (``benchmarks/step_times.py`` writes it). Its keys are the measurements' keys
with the device reduced to its kind (``cpu``, ``cuda``) and without the torch version: an
entry stands for the same method config, task shape, stacking and label count on any device
of that kind, and says on which device and at what load it was measured, so the estimate
can say so. An entry measured on one kind of device is not used for another.

Where no entry stands for a key (nor two around its label count), its step times are scaled
from measured entries of the same device kind by counted FLOPs
(:mod:`ssilbench.runner.step_flops`): each stage's seconds per FLOP of the closest measured
stage (the same method and stage first, then the nearest in FLOPs) times the key's FLOPs,
and so for the labelling per transition and the policy call; no stage step below the
fastest step measured on the device kind (a step's fixed cost does not shrink with its
FLOPs). Such an estimate is rough: a CPU's throughput per FLOP differs between small and
large networks (docs/guide.md gives the ratio of a scaled estimate to a measurement).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import replace
from pathlib import Path

from ssilbench.runner.step_flops import FlopCount, FlopTable
from ssilbench.runner.timings import Measurement, StageTiming, Timings

SHIPPED = Path(__file__).with_name("step_times.json")


def table_path() -> Path:
    """The shipped table, or the file ``SSILBENCH_STEP_TABLE`` names (one that does not
    exist, e.g. ``none``: no table)."""
    return Path(os.environ.get("SSILBENCH_STEP_TABLE") or SHIPPED)


def device_kind(description: str) -> str:
    """``cpu`` or ``cuda`` (or another torch device type) of a device description
    (``"cpu (x86_64, 1 threads)"``, ``"cuda (NVIDIA H200)"``)."""
    return description.split(" ", 1)[0]


def portable_key(key: str) -> str:
    """A measurement key (:func:`~ssilbench.runner.timings.measurement_key`) without the
    torch version and with the device reduced to its kind."""
    fields = json.loads(key)
    fields.pop("torch", None)
    fields["device"] = device_kind(fields["device"])
    return json.dumps(fields, sort_keys=True)


class StepTable:
    """The shipped measurements, by portable key."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path if path is not None else table_path()
        self.items = Timings(self.path).items  # the same file format as timings.json
        self.flops = FlopTable()

    def measured(self, key: str) -> Measurement | None:
        """The shipped measurement of ``key`` (a full measurement key), under that key, or
        one interpolated between the two nearest shipped label counts around its own."""
        portable = portable_key(key)
        found = self.items.get(portable) or self._between(portable, around=True)
        return None if found is None else Measurement.from_json({**_as_dict(found), "key": key})

    def can_scale(self, key: str) -> bool:
        """Whether a measured entry of the key's device kind has FLOP counts to scale from."""
        kind = json.loads(portable_key(key))["device"]
        return any(json.loads(k)["device"] == kind and self.flops.get(k) is not None
                   for k in self.items)  # fmt: skip

    def scaled(self, key: str, flops: FlopCount) -> Measurement | None:
        """``key``'s step times scaled by its counted ``flops`` from the measured entries of
        its device kind (see the module docstring), marked with the entries they came from
        (``scaled_from``); None where no entry of that kind has counts."""
        portable = portable_key(key)
        fields = json.loads(portable)
        anchors = [(k, m, c) for k, m in self.items.items()
                   if json.loads(k)["device"] == fields["device"]
                   and (c := self.flops.get(k)) is not None]  # fmt: skip
        if not anchors:
            return None
        used: set[str] = set()
        stages = {}
        floor, fastest = _floor(anchors, fields.get("stacked") or 1)
        for name, f in flops.stages.items():
            candidates = [(k, m, c, s) for k, m, c in anchors for s in m.stages
                          if c.stages.get(s)]  # fmt: skip
            if not candidates:
                return None
            k, m, c, s = min(candidates, key=lambda a, name=name, f=f: (
                a[3] != name, *_distance(fields, a[0], f, a[2].stages[a[3]])))  # fmt: skip
            seconds = m.stages[s].seconds_per_step * f / c.stages[s]
            if seconds < floor:
                seconds, k = floor, fastest
            stages[name] = StageTiming(seconds, f, side_steps=flops.side_steps.get(name))
            used.add(k)
        other, k = _scaled_rate(fields, anchors, flops.other_per_transition,
                                lambda m: m.other_seconds_per_transition,
                                lambda c: c.other_per_transition)  # fmt: skip
        used.add(k)
        evaluation, k = _scaled_rate(fields, anchors, flops.eval_forward,
                                     lambda m: m.eval_forward_seconds,
                                     lambda c: c.eval_forward)  # fmt: skip
        used.add(k)
        first = next(m for k, m, _ in anchors if k in used)
        return Measurement(key, fields["method"], first.device, stages, other, evaluation,
                           measured_at=min(m.measured_at for k, m, _ in anchors if k in used),
                           load=first.load, labeled=fields.get("labeled"),
                           scaled_from=sorted(used))  # fmt: skip

    def get(self, key: str) -> Measurement | None:
        """The shipped measurement standing for ``key`` (a full measurement key), under
        that key, or None. A label count without an entry of its own is interpolated
        between the nearest shipped ones of the same method, task shape and device kind
        (as a dry run interpolates between a sweep's smallest and largest budgets)."""
        portable = portable_key(key)
        found = self.items.get(portable)
        if found is None:
            found = self._between(portable)
        if found is None:
            return None
        return Measurement.from_json({**_as_dict(found), "key": key})

    def _between(self, portable: str, around: bool = False) -> Measurement | None:
        """Interpolated between the nearest label counts; ``around``: only between two
        entries on either side (else the nearest one's outside them)."""
        fields = json.loads(portable)
        n = fields.pop("labeled", None)
        if n is None:
            return None
        near = sorted((m.labeled, m) for k, m in self.items.items()
                      if m.labeled is not None and _without_labels(k) == fields)  # fmt: skip
        if not near:
            return None
        below = [pair for pair in near if pair[0] <= n] or near[:1]
        above = [pair for pair in near if pair[0] >= n] or near[-1:]
        (lo, at_lo), (hi, at_hi) = below[-1], above[0]
        if around and not lo <= n <= hi:
            return None
        if at_lo.stages.keys() != at_hi.stages.keys():
            return None
        stages = {name: replace(t, seconds_per_step=_line(n, lo, hi, t.seconds_per_step,
                                                           at_hi.stages[name].seconds_per_step))
                  for name, t in at_lo.stages.items()}  # fmt: skip
        return replace(at_lo, stages=stages, labeled=n)

    def add(self, timings: Timings) -> int:
        """Take every measurement of ``timings`` (a newer one replaces an older entry);
        returns how many were taken."""
        for m in timings.items.values():
            key = portable_key(m.key)
            self.items[key] = Measurement.from_json({**_as_dict(m), "key": key})
        return len(timings.items)

    def save(self) -> None:
        """Write the table as ``timings.json`` is written (a temporary file, renamed), its
        entries sorted by key so that a refresh shows as a small diff."""
        file = Timings(None)
        file.path, file.items = self.path, dict(sorted(self.items.items()))
        file.save()


def _without_labels(key: str) -> dict:
    fields = json.loads(key)
    fields.pop("labeled", None)
    return fields


def _floor(anchors: list, stacked: int) -> tuple[float, str]:
    """The fastest step measured on the device kind, as one run's share of a group of
    ``stacked``, and the entry that measured it. A step's fixed cost (the optimiser's, the
    data's, Python's) does not shrink with its FLOPs, so no scaled stage is priced below it:
    an LC on maze:50x50 scaled by FLOPs alone came out at 1/150 of its measured step."""
    k, m = min(((k, m) for k, m, _ in anchors),
               key=lambda a: _group_step(a[0], a[1]))  # fmt: skip
    return _group_step(k, m) / stacked, k


def _group_step(key: str, m: Measurement) -> float:
    """An entry's fastest stage step, for the whole group it stacked."""
    fastest = min(t.seconds_per_step for t in m.stages.values())
    return fastest * (json.loads(key).get("stacked") or 1)


def _distance(target: dict, key: str, flops: float, counted: float) -> tuple:
    """How far an anchor is from a target: another method, then another task shape (where
    data handling, not arithmetic, may take the time), then another config or label count,
    then the FLOP ratio (either way)."""
    fields = json.loads(key)

    def config(f: dict) -> dict:
        return {**f, "labeled": None, "stacked": None}

    return (fields["method"] != target["method"], fields["spec"] != target["spec"],
            config(fields) != config(target), fields.get("stacked") != target.get("stacked"),
            abs(math.log(max(flops, 1.0) / max(counted, 1.0))))  # fmt: skip


def _scaled_rate(target: dict, anchors: list, flops: float, seconds, counted) -> tuple[float, str]:
    """Seconds of ``flops`` at the closest anchor's seconds per FLOP (``seconds`` and
    ``counted`` read an anchor's); where the anchor counts none (data handling only, or
    nothing for the target to scale), that anchor's seconds as they are."""
    if math.isnan(flops):
        return math.nan, min(anchors, key=lambda a: _distance(target, a[0], 1.0, 1.0))[0]
    k, m, c = min(anchors, key=lambda a: _distance(target, a[0], flops, counted(a[2]) or 1.0))
    if flops <= 0 or not counted(c) or math.isnan(counted(c)):
        return seconds(m), k
    return seconds(m) * flops / counted(c), k


def _line(n: int, lo: int, hi: int, at_lo: float, at_hi: float) -> float:
    """Linear between two label counts; outside them, the nearest one's (a table entry is
    not extrapolated)."""
    if hi == lo or n <= lo:
        return at_lo
    if n >= hi:
        return at_hi
    return at_lo + (at_hi - at_lo) * (n - lo) / (hi - lo)


def _as_dict(m: Measurement) -> dict:
    from dataclasses import asdict

    return asdict(m)
