"""RunSpec and Sweep: what one run is, and the product of axes that a sweep expands into.

This module also holds the checks every value a user gives must pass, whichever way it comes
in (flags, sweep files, a library caller): :func:`check_json` for config and option values,
and the bounds :data:`MAX_SEED` and :data:`MAX_STEPS` on seeds and steps.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from ssilbench.data.split import parse_budget
from ssilbench.errors import UsageError

SPEC_VERSION = 5  # 2: stop_early and rollouts joined the spec; 3: evaluations forward live
# episodes only (sampled scores differ from version 2) and labels are taken in chunks;
# 4: the environment's protocol, the dataset and the plugins' versions joined the spec;
# 5: the fingerprints of the plugins' code joined the spec

MAX_INT = 2**63 - 1
"""Integers in configs and options lie within ±MAX_INT: numpy, torch and the results store
hold nothing larger."""
MAX_DEPTH = 32  # lists and tables nested deeper than this are a mistake, not a setting
MAX_SEED = 2**63 - 1
"""Seeds are whole numbers 0 <= seed <= MAX_SEED: the results store keeps them as signed
64-bit integers, and the random generators take them whole."""
MAX_STEPS = 10**9
"""The most training steps one run may ask for (``--steps``, ``steps`` in a sweep file, or
what ``--steps-scale`` makes of an environment's default), and the largest evaluation or
checkpoint interval: far beyond any benchmark run, and low enough that a mistyped number is
refused instead of training until it is killed."""

Seed = Annotated[int, Field(strict=True, ge=0, le=MAX_SEED)]
Steps = Annotated[int, Field(strict=True, ge=1, le=MAX_STEPS)]
"""A step count or interval (strict: true, "10" or 10.0 are not step counts)."""
StopEarly = Annotated[bool, Field(strict=True)] | Literal["converged", "paper"]
"""A spec's stopping rule (``ssilbench.train.loop.STOPPING_RULES``): false (train every
step), true or "converged" (the suite's rule), "paper" (the maze paper's code's rule)."""


def check_number(value: Any, where: str) -> None:
    """Raise a ValueError naming ``where`` for a float that is not finite or an integer
    outside ±:data:`MAX_INT`; any other value passes."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where} is {value}, and only finite numbers are accepted")
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
        raise ValueError(f"{where} = {value} is out of range: integers must lie within ±2^63")


def check_json(value: Any, where: str = "the value", bounded: bool = True) -> Any:
    """``value`` as canonical JSON data, or a ValueError naming ``where`` (a key path).

    Accepted: strings (valid Unicode: no lone surrogates), booleans, None, finite floats,
    integers, and lists, tuples and string-keyed dicts of these. The canonical form turns
    tuples into lists (JSON has one kind of array) and -0.0 into 0.0 (equal as numbers, and
    a setting trains the same with either); nothing else changes, so distinct canonical
    values have distinct JSON texts. Refused: inf and nan (JSON has no spelling for them:
    pydantic writes null, which would make them the default), dict keys other than strings
    (JSON would turn 1 and "1" into the same key) and any other type. ``bounded`` (what a
    user gives) also refuses integers beyond ±2^63 and nesting deeper than
    :data:`MAX_DEPTH`; a spec read back from the store is not bounded, so that every run
    ever recorded reads.
    """
    return _canonical_value(value, where, bounded, 0)


def _canonical_value(value: Any, where: str, bounded: bool, depth: int) -> Any:
    if bounded and depth > MAX_DEPTH:
        raise ValueError(f"{where} is nested more than {MAX_DEPTH} levels deep")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, float):
        check_number(value, where)
        return value + 0.0  # -0.0 + 0.0 is 0.0
    if isinstance(value, int):
        if bounded:
            check_number(value, where)
        return int(value)
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"{where} is not valid Unicode text ({value!r})") from None
        return str(value)
    if isinstance(value, list | tuple):
        return [_canonical_value(v, f"{where}[{i}]", bounded, depth + 1)
                for i, v in enumerate(value)]  # fmt: skip
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{where} has the key {key!r}, which is not a string")
            _canonical_value(key, f"a key of {where}", bounded, depth + 1)
            out[str(key)] = _canonical_value(item, f"{where}.{key}", bounded, depth + 1)
        return out
    raise ValueError(
        f"{where} is a {type(value).__name__}; give a string, a number, true/false, null, "
        "or a list or table of these"
    )


def check_numbers(value: Any, where: str) -> None:
    """:func:`check_number` on every number inside ``value`` (a model's python dump: dicts,
    lists, tuples and sets of anything)."""
    if isinstance(value, dict):
        for key, item in value.items():
            check_numbers(item, f"{where[:-1]}.{key}'" if where.endswith("'") else where)
    elif isinstance(value, list | tuple | set | frozenset):
        for item in value:
            check_numbers(item, where)
    else:
        check_number(value, where)


def has_negative_zero(value: Any) -> bool:
    """Whether -0.0 occurs anywhere inside ``value`` (dicts, lists, tuples and sets)."""
    if isinstance(value, float):
        return value == 0.0 and math.copysign(1.0, value) < 0
    if isinstance(value, dict):
        return any(has_negative_zero(v) for v in value.values())
    if isinstance(value, list | tuple | set | frozenset):
        return any(has_negative_zero(v) for v in value)
    return False


class _Refused(ValueError):
    """JSON that :func:`read_json` refuses (raised from inside ``json.loads``)."""


def _no_constants(name: str) -> Any:
    raise _Refused(f"it is {name}, and only finite numbers are accepted")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Refused(f"it gives the key {key!r} twice")
        out[key] = value
    return out


def read_json(text: str, default: Any) -> Any:
    """The JSON value ``text`` spells, or ``default`` when it is not JSON. A ValueError for
    JSON no setting can hold: Infinity or NaN, an object with a key twice, an integer too
    long to read, nesting deeper than Python's recursion limit. (Numbers too large for a
    float, 1e400, read as inf: :func:`check_json` refuses them.)"""
    try:
        return json.loads(text, parse_constant=_no_constants, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError:
        return default
    except _Refused:
        raise
    except (ValueError, RecursionError) as exc:  # a 5000-digit integer, [[[[...]]]]
        raise ValueError(f"it cannot be read ({exc})") from None


class RunSpec(BaseModel):
    """One run: fully resolved (defaults filled in), so its hash identifies its result.

    Besides the names and settings a user chose, the spec holds what else decides the
    result: ``protocol``, the fingerprint of the task's :class:`~ssilbench.api.EnvSpec`
    (evaluation episodes and seed, normaliser, horizon, ...); ``plugins``, the distribution
    and version of each plugin the run uses; ``code``, the fingerprint of each such plugin's
    files (:mod:`ssilbench.fingerprint`); and ``data``, the fingerprint of the dataset's
    manifest. :func:`ssilbench.planning.plan.resolve` fills in the first three without
    touching a dataset; :func:`ssilbench.planning.plan.prepare` opens the datasets and fills in
    ``data``. Runs recorded before spec version 4 have none of these (``None``/empty), runs
    of version 4 no ``code`` (empty, and left out of the JSON, so their ids read as
    recorded).

    Identity is injective: :meth:`canonical_json` is the JSON text of the fields with sorted
    keys, and ``config`` and ``options`` pass :func:`check_json` (unbounded, so that runs
    recorded with, say, a 20-digit integer still read), so two specs share a run id only when
    their values are equal as JSON data. In particular:

    - inf and nan are refused (a ValidationError), never written as null;
    - -0.0 is stored as 0.0, and tuples as lists; dict key order does not matter (a run
      recorded with -0.0 before this rule keeps its recorded id, and planning it again
      gives the 0.0 id: it runs once more);
    - 1, 1.0 and true are three distinct values here. The planner fills ``config`` and
      ``options`` from the method's and environment's validated models, so each value has
      its field's type: ``-c lr=1`` and ``-c lr=1.0`` on a float field give one run, and
      ``-c batch_size=true`` on an integer field is refused
      (:func:`ssilbench.planning.plan.validate_model`);
    - strings are compared code point by code point: the NFC and NFD spellings of "é" are
      distinct values (distinct runs, or refused by a field that only knows one spelling).

    ``seed`` may be any signed 64-bit integer so that every run the store holds reads back;
    :class:`Sweep` is what keeps new seeds within 0..:data:`MAX_SEED`.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    method: str
    config: dict[str, Any]
    env: str
    options: dict[str, Any]
    budget: str
    seed: int = Field(ge=-MAX_INT - 1, le=MAX_INT)
    steps: int
    eval_every: int
    stop_early: StopEarly = False
    rollouts: bool = True
    protocol: str | None = None
    plugins: dict[str, str] = {}
    code: dict[str, str] = {}
    data: str | None = None
    version: int = SPEC_VERSION

    @field_validator("config", "options")
    @classmethod
    def _canonical_values(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        return check_json(value, str(info.field_name), bounded=False)

    def document(self, exclude: set[str] = frozenset()) -> dict[str, Any]:
        """The spec as JSON data, as the store records it, without ``exclude``: a spec of a
        version before 5 has no ``code`` (it is left out, so that its run id reads as
        recorded)."""
        doc = self.model_dump(mode="json", exclude=set(exclude))
        if self.version < 5 and not doc.get("code", True):
            del doc["code"]
        return doc

    def canonical_json(self) -> str:
        """The spec as JSON text, keys sorted: what :attr:`run_id` hashes."""
        return _canonical(self.document())

    @property
    def run_id(self) -> str:
        """The run's identity: a hash of everything in the spec."""
        return _digest(self.canonical_json())

    @property
    def setup_id(self) -> str:
        """The run's identity before its dataset is opened: everything but ``data``. A dry
        run and ``status`` count a planned run as recorded by this key."""
        return _digest(_canonical(self.document({"data"})))

    @property
    def design_id(self) -> str:
        """The run as designed, whatever carried it out: everything but ``data``, ``code``,
        the spec ``version`` and the plugins' releases (their names stay). A report or a
        figure finds a sweep file's runs by this key, without opening a dataset, in stores
        and exports written by earlier releases too; where one design was run more than
        once, it draws the latest run (:func:`ssilbench.studies.study.study_runs`)."""
        doc = self.document({"data", "code", "version"})
        doc["plugins"] = sorted(doc["plugins"])
        return _digest(_canonical(doc))

    @property
    def cohort(self) -> str:
        """What the runs pooled into one leaderboard cell must share: everything but the
        seed (and the budget, which is the cell's column)."""
        return _digest(_canonical(self.document({"seed", "budget"})))

    @property
    def prepared(self) -> bool:
        return self.data is not None


def run_id_of(doc: dict[str, Any]) -> str:
    """The run id of a spec as recorded (its JSON document), whatever its spec version: a
    run recorded before a version added fields is identified by the fields it had."""
    return _digest(_canonical(doc))


def _canonical(doc: Any) -> str:
    # allow_nan=False: a non-finite number that got past the checks fails loudly here
    # instead of hashing as a spelling JSON readers do not share.
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:20]


class Sweep(BaseModel):
    """Lists of methods, environment ids, budgets and seeds, plus shared settings.

    ``config`` maps a key to a value for every method that has it; ``"method.key"`` scopes a
    key to one method. ``options`` are environment options applied to every environment.
    Every value is checked here, whoever builds the sweep: seeds are whole numbers in
    0..:data:`MAX_SEED`, ``steps`` and ``eval_every`` whole numbers in 1..:data:`MAX_STEPS`,
    ``steps_scale`` a finite positive number, and ``config``/``options`` values pass
    :func:`check_json` (finite numbers, no other types than JSON's).
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    methods: list[str] = Field(min_length=1)
    envs: list[str] = Field(min_length=1)
    budgets: list[str] = Field(min_length=1)
    seeds: list[Seed] = Field(min_length=1)
    config: dict[str, Any] = {}
    options: dict[str, Any] = {}
    steps: Steps | None = None
    steps_scale: float | None = Field(None, gt=0, le=MAX_STEPS)
    """Train ``steps_scale`` x the environment's default steps (``steps`` wins when both)."""
    eval_every: Steps | None = None
    stop_early: StopEarly = False
    rollouts: bool = True

    @field_validator("methods", "envs")
    @classmethod
    def _names(cls, value: list[str]) -> list[str]:
        for name in value:
            check_json(name, repr(name))
            if not name.strip():
                raise ValueError("names must not be empty")
        return value

    @field_validator("budgets")
    @classmethod
    def _budgets(cls, value: list[str]) -> list[str]:
        return [parse_budget(v) for v in value]

    @field_validator("config", "options")
    @classmethod
    def _values(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        return check_json(value, str(info.field_name))

    def total_steps(self, default: int) -> int:
        """Each run's step budget on an environment whose default is ``default``; a
        ``steps_scale`` that asks for more than :data:`MAX_STEPS` raises a UsageError."""
        if self.steps is not None:
            return self.steps
        if self.steps_scale is not None:
            wanted = default * self.steps_scale
            if wanted > MAX_STEPS:
                raise UsageError(
                    f"--steps-scale {self.steps_scale:g} asks for {wanted:.3g} steps per run "
                    f"(the environment's default is {default}); a run may train at most "
                    f"{MAX_STEPS:,} (10^9) steps."
                )
            return max(1, round(wanted))
        return default

    def axes(self) -> itertools.product:
        return itertools.product(self.envs, self.methods, self.budgets, self.seeds)
