"""The check of each run of an export before ``ssilbench results merge`` writes anything.

A received file is input like any other: every column is read by a strict model (strings
where strings are expected, integers in range, finite numbers within ±1e15, the JSON columns
of the shape the readers of the store take), the run id must be the hash of its spec, the
spec must be written as ssilbench writes it, and the run's method, environment, budget and
seed must be its spec's. A run that passes is one that ``leaderboard``, ``status`` and later
sweeps read; a run that does not is refused, naming the file, the line and every field.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from ssilbench.data.split import parse_budget
from ssilbench.errors import UsageError
from ssilbench.runs.checks import MAX_INT, check_json
from ssilbench.runs.records import RunRecord
from ssilbench.runs.spec import RunSpec, run_id_of

MAX_MAGNITUDE = 1e15
"""Scores, metrics and times lie within ±1e15: the statistics over larger numbers overflow."""
MAX_PID = 2**31 - 1


def _text(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("not valid Unicode text (a lone surrogate)") from None
    return value


def _bounded(value: Any) -> Any:
    """Valid JSON data (see :func:`check_json`) whose floats lie within ±MAX_MAGNITUDE."""
    value = check_json(value, "a value")
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and abs(item) > MAX_MAGNITUDE:
            raise ValueError(f"a value ({item!r}) lies beyond ±{MAX_MAGNITUDE:g}")
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return value


def _budget(value: str) -> str:
    try:
        parse_budget(value)
    except UsageError as exc:
        raise ValueError(str(exc)) from None
    return value


Text = Annotated[str, AfterValidator(_text)]
Name = Annotated[str, Field(min_length=1), AfterValidator(_text)]
Number = Annotated[float, Field(allow_inf_nan=False, ge=-MAX_MAGNITUDE, le=MAX_MAGNITUDE)]
Moment = Annotated[float, Field(allow_inf_nan=False, ge=0, le=MAX_MAGNITUDE)]
Count = Annotated[int, Field(ge=0, le=MAX_INT)]
JsonObject = Annotated[dict[str, Any], AfterValidator(_bounded)]


class _Normaliser(BaseModel):
    """What the leaderboard prints of a normaliser; more keys may follow."""

    model_config = ConfigDict(strict=True, extra="allow", allow_inf_nan=False)

    name: Text
    low: Number
    high: Number
    source: Text = ""


def _normaliser(value: dict[str, Any]) -> dict[str, Any]:
    value = _bounded(value)
    if value:  # {}: a run recorded without one
        _Normaliser.model_validate(value)
    return value


MAX_CURVE_POINTS = 100_000
"""Points a received series may hold (this ssilbench keeps 1,000; later ones may keep more)."""


class ReceivedCurve(BaseModel):
    """One series of a run's ``curves``: as many steps as values."""

    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)

    stage: Name
    name: Name
    steps: Annotated[list[Count], Field(max_length=MAX_CURVE_POINTS)]
    values: Annotated[list[Number | None], Field(max_length=MAX_CURVE_POINTS)]

    @model_validator(mode="after")
    def _lengths(self) -> ReceivedCurve:
        if len(self.steps) != len(self.values):
            raise ValueError(f"{len(self.steps)} steps but {len(self.values)} values")
        return self


def _curves(value: list[ReceivedCurve]) -> list[ReceivedCurve]:
    keys = [(c.stage, c.name) for c in value]
    if len(set(keys)) != len(keys):
        raise ValueError("a series (stage, name) appears twice")
    return value


class ReceivedRun(BaseModel):
    """One line of an export, every column typed."""

    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)

    run_id: Name
    spec: dict[str, Any]
    method: Name
    method_label: Name
    env: Name
    env_label: Name
    budget: Annotated[str, AfterValidator(_budget)]
    seed: Annotated[int, Field(ge=-MAX_INT - 1, le=MAX_INT)]
    status: Literal["running", "done", "failed", "interrupted"]
    attempts: Count | None = None
    started_at: Moment | None = None
    finished_at: Moment | None = None
    wall_time: Moment | None = None
    n_labeled: Count | None = None
    score: Number | None = None
    final_score: Number | None = None
    max_score: Number | None = None
    report: Text | None = None
    normaliser: Annotated[dict[str, Any], AfterValidator(_normaliser)] | None = None
    timeline: list[JsonObject] | None = None
    metrics: dict[Text, Number] | None = None
    stages: JsonObject | None = None
    versions: JsonObject | None = None
    device: Text | None = None
    host: Text | None = None
    pid: Annotated[int, Field(ge=0, le=MAX_PID)] | None = None
    error: Text | None = None
    curves: Annotated[list[ReceivedCurve], AfterValidator(_curves)] | None = None


def check_run(row: Any, where: str) -> RunRecord:
    """The run of one export line (decoded JSON), checked; a UsageError that starts with
    ``where`` (file and line) and names every bad field. Required columns are checked by the
    caller. Unfinished runs (``running``, ``interrupted``) come back ``interrupted``: a
    received claim is never live here, so a later sweep runs them."""
    try:
        run = ReceivedRun.model_validate(row)
    except ValidationError as exc:
        raise UsageError(f"{where}: {_problems(exc)}. Export it again from its store.") from None
    try:
        spec = RunSpec.model_validate(run.spec)
        matches = run_id_of(run.spec) == run.run_id
    except (ValidationError, ValueError, TypeError, RecursionError):
        matches = False
    if not matches:
        raise UsageError(
            f"{where}: run {run.run_id[:12]} does not match its spec (edited by hand, or from "
            "an incompatible ssilbench); export it again."
        )
    # Written as ssilbench writes it: the spec's own value in each field it records (a "60"
    # read as 60, or a -0.0, would give the same run a second id) ...
    dumped = spec.model_dump(mode="json")
    differ = [
        f"spec.{k} is {_short(_json(v))}, read as {_short(_json(dumped.get(k)))}"
        for k, v in sorted(run.spec.items())
        if _json(v) != _json(dumped.get(k))
    ]
    # ... and the run's columns are its spec's.
    differ += [f"'{k}' is {_json(getattr(run, k))} but its spec says {_json(getattr(spec, k))}"
               for k in ("method", "env", "budget", "seed")
               if getattr(run, k) != getattr(spec, k)]  # fmt: skip
    if differ:
        raise UsageError(f"{where}: run {run.run_id[:12]} disagrees with its spec "
                         f"({'; '.join(differ)}); export it again.")  # fmt: skip
    values = run.model_dump()
    if run.status in ("running", "interrupted"):
        values["status"] = "interrupted"
    curves = values.pop("curves")
    return RunRecord.from_row(values).with_curves(curves)


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _short(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."


def _problems(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = "".join(f"[{x}]" if isinstance(x, int) else f".{x}" for x in err["loc"])
        loc = loc.lstrip(".") or "the run"
        if err["type"] == "extra_forbidden":
            parts.append(f"unknown field '{loc}'")
            continue
        message = err["msg"].removeprefix("Value error, ")
        parts.append(f"'{loc}': {message} (got {_short(repr(err.get('input')))})")
    return "; ".join(parts)
