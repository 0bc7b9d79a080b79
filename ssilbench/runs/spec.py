"""RunSpec and Sweep: what one run is, and the product of axes that a sweep expands into.

This module also holds the checks every value a user gives must pass, whichever way it comes
in (flags, sweep files, a library caller): :func:`check_json` for config and option values,
and the settings of a sweep (declared in :mod:`ssilbench.runs.settings`).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from ssilbench.errors import UsageError
from ssilbench.runs.checks import MAX_INT, check_json
from ssilbench.runs.settings import MAX_STEPS, RunSettings, StopEarly

SPEC_VERSION = 5  # 2: stop_early and rollouts joined the spec; 3: evaluations forward live
# episodes only (sampled scores differ from version 2) and labels are taken in chunks;
# 4: the environment's protocol, the dataset and the plugins' versions joined the spec;
# 5: the fingerprints of the plugins' code joined the spec


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
    seeded: list[str] = []
    """Environment options whose value is the run's seed (the family's
    ``per_seed_options`` that the sweep did not fix): each seed draws a dataset of its own,
    and a leaderboard cell pools such runs over seeds although their options and datasets
    differ. Left out of the JSON when empty, so that other runs keep their ids."""
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
        if not doc.get("seeded", True):
            del doc["seeded"]
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
        seed (and the budget, which is the cell's column), and where options follow the
        seed (``seeded``), those options and the dataset."""
        doc = self.document({"seed", "budget", *(["data"] if self.seeded else [])})
        doc["options"] = self.shared_options()
        return _digest(_canonical(doc))

    def shared_options(self) -> dict[str, Any]:
        """The options without those that follow the seed (``seeded``): what runs of one
        setup share whatever their seed."""
        return {k: v for k, v in self.options.items() if k not in self.seeded}

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


class Sweep(RunSettings):
    """Lists of methods, environment ids, budgets and seeds, plus shared settings (the
    fields of :class:`~ssilbench.runs.settings.RunSettings`, declared there once).

    ``config`` maps a key to a value for every method that has it; ``"method.key"`` scopes a
    key to one method. ``options`` are environment options applied to every environment.
    Every value is checked here, whoever builds the sweep: the settings' own checks, and
    ``config``/``options`` values pass :func:`check_json` (finite numbers, no other types
    than JSON's; a sweep file's block checks them its own way).
    """

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
