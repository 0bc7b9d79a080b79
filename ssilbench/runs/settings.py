"""The settings a sweep gives its runs, each declared once: its type, default, bounds, help
text, command-line flag and sweep-file key.

:class:`RunSettings` is that declaration. Everything else is derived from it: the sweep
(:class:`~ssilbench.runs.spec.Sweep`) and a sweep file's block
(:class:`~ssilbench.planning.sweepfile.Block`) are subclasses, so a setting has the same
type and bounds in both; the flags of ``ssilbench run`` and ``plan`` are made from its
fields (``ssilbench.cli.run``), and the checks of those flags' values take the bounds from
here (``ssilbench.planning.options``). A field's name is its sweep-file key; its ``flag``
is the command-line spelling. Adding a setting here adds the flag, the key and the field of
the sweep; ``tests/runs/test_run_settings.py`` proves each flag has its key with the same
bounds, and the reverse.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.fields import FieldInfo

from ssilbench.data.split import parse_budget
from ssilbench.errors import UsageError
from ssilbench.runs.checks import check_json

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
STOPPING_RULES: tuple[str, ...] = get_args(get_args(StopEarly)[1])
"""The rules a stopping rule may name (``ssilbench.train.loop.STOPPING_RULES`` defines them)."""

# How a flag's text becomes the setting's value (``ssilbench.planning.options``).
Kind = Literal["names", "budgets", "seeds", "assignments", "count", "fraction", "rule", "switch"]


def setting(
    flag: str | tuple[str, ...],
    kind: Kind,
    help: str,
    default: Any = ...,
    *,
    metavar: str | None = None,
    unit: str = "",
    noun: str = "",
    example: str = "",
    **bounds: Any,
) -> Any:
    """A field of :class:`RunSettings`: ``flag`` (its spellings on the command line, the
    long one last), how its text is read (``kind``), ``help`` (shared by the flag and the
    key), the ``default`` (``...``: required), ``unit`` (what its bound counts, for the
    message of a value over it), ``noun`` (what a list holds, for its messages), an
    ``example`` of the flag, and pydantic's bounds."""
    flags = (flag,) if isinstance(flag, str) else flag
    extra = {"flags": list(flags), "kind": kind, "metavar": metavar, "unit": unit,
             "noun": noun, "example": example}  # fmt: skip
    return Field(default, description=help, json_schema_extra=extra, **bounds)


class RunSettings(BaseModel):
    """The settings of a sweep, as the command line and a sweep file's block both give them.
    Every value is checked by whoever builds one: names are non-empty, seeds whole numbers in
    0..:data:`MAX_SEED`, ``steps`` and ``eval_every`` whole numbers in 1..:data:`MAX_STEPS`,
    ``steps_scale`` a finite positive number; subclasses check config and option values."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)

    methods: list[str] = setting(
        "--method", "names", "Comma-separated method names.", min_length=1, noun="method",
        example="--method bc,vm_idm",
    )  # fmt: skip
    envs: list[str] = setting(
        "--env", "names", "Comma-separated ids: family:task or family:all.", min_length=1,
        noun="environment", example="--env maze:10x10",
    )  # fmt: skip
    budgets: list[str | int | float] | None = setting(
        "--budgets", "budgets",
        "Label budgets N_L: counts, fractions in (0,1], 'all' [default: the paper's, where the "
        "environment family declares its paper protocol].",
        None, min_length=1, example="--budgets 16,64,all",
    )  # fmt: skip
    seeds: list[Seed] | None = setting(
        "--seeds", "seeds",
        "Comma-separated integer seeds [default: the paper's, where the environment family "
        "declares its paper protocol; else 0].",
        None, min_length=1, example="--seeds 0,1,2",
    )  # fmt: skip
    config: dict[str, Any] = setting(
        ("-c", "--config"), "assignments",
        "Method config value (all methods that have KEY); 'METHOD.KEY=VALUE' for one method.",
        {}, metavar="KEY=VALUE",
    )  # fmt: skip
    options: dict[str, Any] = setting(
        ("-o", "--option"), "assignments",
        "Environment option, e.g. -o state=image. See docs/environments/.", {},
        metavar="KEY=VALUE",
    )  # fmt: skip
    steps: Steps | None = setting(
        "--steps", "count", "Total training steps per run (default: the environment's).",
        None, unit="(10^9) training steps per run",
    )  # fmt: skip
    steps_scale: float | None = setting(
        "--steps-scale", "fraction",
        "Train this fraction of each environment's default steps, e.g. 0.01 for small runs "
        "(stage splits keep their proportions; --steps wins over it).",
        None, gt=0, le=MAX_STEPS,
    )  # fmt: skip
    eval_every: Steps | None = setting(
        "--eval-every", "count",
        "Evaluate every N steps of a policy stage (default: the environment's).", None,
        unit="steps",
    )  # fmt: skip
    stop_early: StopEarly = setting(
        "--stop-early", "rule",
        "Stop stages once training has converged: the suite's rule ('converged', what the "
        "flag alone means), or 'paper' (the maze paper's code's). Sweep files: false, true "
        '("converged") or "paper".',
        False, metavar="[converged|paper]",
    )  # fmt: skip
    rollouts: bool = setting(
        ("--rollouts/--no-rollouts",), "switch",
        "Roll the policy out in its environment to score it; false (--no-rollouts): the test "
        "set only, no score.", True,
    )  # fmt: skip

    @field_validator("methods", "envs")
    @classmethod
    def _names(cls, value: list[str]) -> list[str]:
        for name in value:
            check_json(name, repr(name))
            if not name.strip():
                raise ValueError("names must not be empty")
        return value

    @field_validator("budgets", mode="before")
    @classmethod
    def _budgets(cls, value: Any) -> Any:
        """Label budgets as their canonical text ("16", "0.5", "all"), whether given as text
        (a flag) or as numbers (a sweep file)."""
        if value is None or not isinstance(value, list):
            return value  # not given (the paper's), or pydantic says what is wrong with it
        for v in value:
            if not isinstance(v, str | int | float) or isinstance(v, bool):
                raise ValueError(f"Label budget {v!r} is not a count, a fraction or 'all'.")
        try:
            return [parse_budget(str(v)) for v in value]
        except UsageError as exc:  # reported by pydantic with the setting's location
            raise ValueError(str(exc)) from None


def settings() -> dict[str, FieldInfo]:
    """Every run setting by name (its sweep-file key), in declaration order."""
    return dict(RunSettings.model_fields)


def extra(name: str) -> dict[str, Any]:
    """The command-line side of the setting ``name``: ``flags``, ``kind``, ``metavar``,
    ``unit``, ``noun`` and ``example``."""
    info = RunSettings.model_fields[name].json_schema_extra
    assert isinstance(info, dict)
    return info


def flag(name: str) -> str:
    """The setting's long flag as a message names it (``--no-rollouts`` for ``rollouts``)."""
    spelled = extra(name)["flags"][-1]
    return spelled.split("/")[-1] if extra(name)["kind"] == "switch" else spelled


def bounds(name: str) -> dict[str, Any]:
    """The numeric bounds of a setting (``ge``, ``le``, ``gt``, ``lt``), however its type
    declares them (on the field, or on an annotated type such as :data:`Steps`)."""
    found: dict[str, Any] = {}
    info = RunSettings.model_fields[name]
    metadata = list(info.metadata)
    for arg in getattr(info.annotation, "__args__", ()):
        metadata += getattr(arg, "__metadata__", ())
    for item in metadata:
        for key in ("ge", "le", "gt", "lt"):
            if getattr(item, key, None) is not None:
                found[key] = getattr(item, key)
        for inner in getattr(item, "metadata", ()):
            for key in ("ge", "le", "gt", "lt"):
                if getattr(inner, key, None) is not None:
                    found[key] = getattr(inner, key)
    return found


def required() -> list[str]:
    """The settings without a default (a sweep needs them)."""
    return [name for name, info in settings().items() if info.is_required()]
