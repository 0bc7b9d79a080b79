"""Step times shipped with ssilbench, so that a dry run or ``plan`` prices a sweep at once.

Measuring step times (:mod:`ssilbench.runner.timings`) trains a few steps of every stage at
the sweep's sizes: on a CPU at the paper's Procgen sizes that is seconds a step, and minutes
for a sweep. ``step_times.json`` beside this module holds measurements made for the paper's
sweep files (``benchmarks/step_times.py`` writes it). Its keys are the measurements' keys
with the device reduced to its kind (``cpu``, ``cuda``) and without the torch version: an
entry stands for the same method config, task shape, stacking and label count on any device
of that kind, and says on which device and at what load it was measured, so the estimate
can say so. An entry measured on one kind of device is not used for another.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

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

    def _between(self, portable: str) -> Measurement | None:
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
        if at_lo.stages.keys() != at_hi.stages.keys():
            return None
        stages = {name: StageTiming(_line(n, lo, hi, t.seconds_per_step,
                                          at_hi.stages[name].seconds_per_step), t.flops_per_step)
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
