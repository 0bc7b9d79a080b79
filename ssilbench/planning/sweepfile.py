"""Declarative sweep files (TOML): blocks of methods x environments x options x budgets x seeds.

```toml
name = "environment-complexity"
title = "Varying the environment complexity"
metric = "test_accuracy"          # what `plot` and `report` read from each run

[[block]]
panel = "positions, low capacity" # figure panel; runs of one panel share an axis
methods = ["bc", "vm_idm"]
envs = ["maze:10x10", "maze:20x20"]
options = { state = "position", data = "states", noop = [0.0, 0.5] }  # lists are axes
config = { arch = "lc", "vm_idm.video_model" = "ground_truth" }
budgets = [0.05, 0.5, 1.0]
seeds = [0, 1, 2, 3, 4]
steps = 20000

[labels]                          # optional display names for method labels
"vm_idm (arch=lc, video_model=ground_truth)" = "VM*-IDM (LC)"

[quick]                           # overrides for `--quick` (CI-sized) runs, every block
seeds = [0, 1]
steps = 500
```
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from ssilbench.data.split import parse_budget
from ssilbench.errors import PreflightError, SsilbenchError, UsageError, safe_file_name
from ssilbench.runs.checks import check_json
from ssilbench.runs.settings import RunSettings, Seed, Steps, StopEarly, settings
from ssilbench.runs.spec import Sweep

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

Scalar = str | int | float | bool
# Numbers are finite everywhere in a file (TOML spells inf and nan; no setting takes them),
# every setting is strict (TOML has native types, so seeds = [true], steps = "500" or
# rollouts = 1 is a mistake to report, not a value to convert), and the values of options
# and config are checked by one function so that a bad one gets one message naming its key
# rather than one per member of a union.
_STRICT = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)


def _budgets(value: list[Any]) -> list[str]:
    try:
        for v in value:
            if not isinstance(v, str | int | float) or isinstance(v, bool):
                raise UsageError(f"Label budget {v!r} is not a count, a fraction or 'all'.")
        return [parse_budget(str(v)) for v in value]
    except UsageError as exc:  # reported by pydantic with the block's location
        raise ValueError(str(exc)) from None


def _scalar(value: Any, where: str) -> Scalar:
    if not isinstance(value, Scalar):
        raise ValueError(f"{where} must be a string, a number or true/false, not {value!r}")
    return check_json(value, where)


def _options(value: dict[str, Any]) -> dict[str, Any]:
    """Option values: scalars, or non-empty lists of scalars (a list is an axis)."""
    for key, axis in value.items():
        if isinstance(axis, list):
            if not axis:
                raise ValueError(f"option '{key}' is an empty list; give at least one value")
            value[key] = [_scalar(v, f"option '{key}'") for v in axis]
        else:
            value[key] = _scalar(axis, f"option '{key}'")
    return value


def _names(value: list[str]) -> list[str]:
    for name in value:
        check_json(name, repr(name))
        if not name.strip():
            raise ValueError("names must not be empty")
    return value


def _config(value: dict[str, Any]) -> dict[str, Any]:
    """Config values: scalars, or tables for a config field that holds one (UVA's
    ``arch_options``, as ``-c arch_options='{...}'`` gives it); a list here would read as an
    axis, which config has not."""
    return {key: check_json(v, f"config '{key}'") if isinstance(v, dict)
            else _scalar(v, f"config '{key}'") for key, v in value.items()}  # fmt: skip


class Block(RunSettings):
    """One product of axes: the run settings (:class:`~ssilbench.runs.settings.RunSettings`,
    where each is declared with its type, default and bounds), where an option given as a
    list is an axis, plus where the block's runs are drawn and whether ``--quick`` runs it."""

    model_config = _STRICT

    panel: str = Field("", description="Figure panel this block's runs are drawn in.")
    name: str = Field("", description="Selects the block with `ssilbench run --blocks NAME`.")
    quick: bool = Field(True, description="False: leave this block out of --quick runs.")

    @field_validator("options")
    @classmethod
    def _check_options(cls, value: dict[str, Any]) -> dict[str, Any]:
        return _options(value)

    @field_validator("config")
    @classmethod
    def _check_config(cls, value: dict[str, Any]) -> dict[str, Any]:
        return _config(value)

    def run_settings(self) -> dict[str, Any]:
        """The block's value of every run setting, by name."""
        return {name: getattr(self, name) for name in settings()}

    def sweeps(self) -> list[Sweep]:
        """One Sweep per combination of the list-valued options."""
        keys = [k for k, v in self.options.items() if isinstance(v, list)]
        fixed = {k: v for k, v in self.options.items() if not isinstance(v, list)}
        out = []
        for combo in itertools.product(*(self.options[k] for k in keys)):
            options = {**fixed, **dict(zip(keys, combo, strict=True))}
            out.append(Sweep(**{**self.run_settings(), "options": options}))
        return out


class QuickOverrides(BaseModel):
    """Replacements applied to every block by ``--quick``, checked as a block's are."""

    model_config = _STRICT

    envs: list[str] | None = Field(None, min_length=1)
    budgets: list[str | int | float] | None = Field(None, min_length=1)
    seeds: list[Seed] | None = Field(None, min_length=1)
    steps: Steps | None = None
    eval_every: Steps | None = None
    stop_early: StopEarly | None = None
    options: dict[str, Any] | None = None
    config: dict[str, Any] | None = Field(
        None, description="Config values set in (merged into) every block's config."
    )

    @field_validator("budgets")
    @classmethod
    def _check_budgets(cls, value: list[Any] | None) -> list[str] | None:
        return None if value is None else _budgets(value)

    @field_validator("envs")
    @classmethod
    def _check_names(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else _names(value)

    @field_validator("options")
    @classmethod
    def _check_options(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else _options(value)

    @field_validator("config")
    @classmethod
    def _check_config(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else _config(value)


def _line(value: str, key: str) -> str:
    """A one-line text, given or left out: a blank or multi-line one reads as a mistake."""
    if value and not value.strip():
        raise ValueError(f"'{key}' is blank: say it in a line of words, or leave the key out")
    if "\n" in value.strip():
        raise ValueError(f"'{key}' must be one line (the report prints it as one)")
    return value.strip()


class Claim(BaseModel):
    """A statement of the paper, checked against a study's results on its seeds
    (``ssilbench.studies.report``: one-sided tests at level 0.05, paired by seed where
    both methods ran the same seeds; the verdict is held, not held, not established or not
    checked).

    ``reaches``: every seed of ``method`` at the largest budget is at least ``threshold`` in
    every selected panel. ``never_reaches``: its mean is established below ``threshold`` at
    every budget. ``beats``: ``method`` is established above ``other`` at the ``budgets``
    smallest budgets in every panel. ``gap_grows``: the gap method − other over those
    budgets is established to grow from one selected panel to the next (panels in the order
    of ``panels``; a bootstrap over seeds). ``up_to`` (beats, gap_grows) keeps those budgets
    at or below one label, so that a protocol planning fewer budgets (the fast one) is not
    judged on a low-data claim at its largest.
    """

    model_config = _STRICT

    text: str
    check: Literal["reaches", "never_reaches", "beats", "gap_grows"]
    method: str
    other: str = ""
    panels: list[str] = Field(default_factory=list, description="Panel-title prefixes; [] = all.")
    threshold: float = 1.0
    budgets: int = Field(2, ge=1)
    up_to: str | None = Field(
        None, description="The largest budget a beats or gap_grows claim is judged at."
    )
    scope: str = Field(
        "",
        description="Why the claim is judged at its budgets where the paper names none (one "
        "line; the report prints it with the budgets used).",
    )

    @field_validator("scope")
    @classmethod
    def _check_scope(cls, value: str) -> str:
        return _line(value, "scope")

    @field_validator("up_to", mode="before")
    @classmethod
    def _check_up_to(cls, value: Any) -> str | None:  # a count, a fraction or 'all', as TOML has it
        return None if value is None else _budgets([value])[0]

    @model_validator(mode="after")
    def _up_to_needs_low_budgets(self) -> Claim:
        if self.up_to is not None and self.check not in ("beats", "gap_grows"):
            raise ValueError(
                f"up_to applies to beats and gap_grows claims, not {self.check}: remove it"
            )
        return self


class SweepFile(BaseModel):
    model_config = _STRICT

    name: str = Field(min_length=1)
    protocol: str = Field(
        "paper",
        min_length=1,
        description="What the blocks' settings follow (the [quick] overrides are the fast one).",
    )
    title: str = ""
    description: str = ""
    metric: str = "score"
    x_label: str = "N_L"
    block: list[Block] = Field(min_length=1)
    labels: dict[str, str] = {}
    quick: QuickOverrides | None = None
    claim: list[Claim] = []
    variant: str = Field(
        "",
        description="Empty: the study is the paper's experiment. Otherwise what it changes "
        "from the paper's (one line): its claims are counted apart from the paper's.",
    )

    @field_validator("variant")
    @classmethod
    def _check_variant(cls, value: str) -> str:
        return _line(value, "variant")

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        # Figures and report sections are files named after it: it must stay one plain name.
        if safe_file_name(value) != value:
            raise ValueError(
                f"{value!r} must be a plain name (letters, digits, '_', '+', '-'; no path "
                f"separator, '..' or space), e.g. {safe_file_name(value)!r}"
            )
        return value

    def blocks(self, quick: bool = False) -> list[Block]:
        if not quick:
            return list(self.block)
        if self.quick is None:
            raise UsageError(
                f"Sweep file '{self.name}' has no [quick] section; run it without --quick."
            )
        changes = self.quick.model_dump(exclude_none=True)
        config = changes.pop("config", {})
        try:
            return [Block.model_validate({**b.model_dump(), **changes,
                                          "config": {**b.config, **config}})
                    for b in self.block if b.quick]  # fmt: skip
        except ValidationError as exc:  # QuickOverrides checks what a block does: a safety net
            raise UsageError(f"Sweep file '{self.name}', [quick]: {_problems(exc)}.") from None

    def display(self, method_label: str) -> str:
        return self.labels.get(method_label, method_label)


def _location(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts[-1] = f"{parts[-1]}[{item + 1}]" if parts else f"[{item + 1}]"
        else:
            parts.append(str(item))
    return ".".join(parts)


def _problems(exc: ValidationError) -> str:
    problems = []
    for err in exc.errors():
        where = _location(err["loc"]) or "(top level)"
        if err["type"] == "extra_forbidden":
            problems.append(f"unknown key '{where}'")
        elif err["type"] == "value_error":  # our own validators name the value
            message = err["msg"].removeprefix("Value error, ").rstrip(".")
            problems.append(f"'{where}': {message}")
        else:
            got = err.get("input")
            shown = f" (got {got!r})" if isinstance(got, str | int | float) else ""
            problems.append(f"'{where}': {err['msg']}{shown}")
    return "; ".join(problems)


def read_toml(path: Path) -> dict[str, Any]:
    """The TOML document of a sweep file, or a UsageError naming the file: missing,
    unreadable, not UTF-8 text (a UTF-8 byte-order mark is allowed), not valid TOML."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"Sweep file {path} does not exist.") from None
    except OSError as exc:
        raise UsageError(f"Sweep file {path} cannot be read: {exc.strerror}.") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"Sweep file {path} is not UTF-8 text (byte {data[exc.start]:#04x} at offset "
            f"{exc.start}): save it as UTF-8."
        ) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"Sweep file {path} is not valid TOML: {exc}.") from None
    except RecursionError:
        raise UsageError(f"Sweep file {path} nests tables or arrays too deeply.") from None


def load_sweep_file(path: Path) -> SweepFile:
    """Parse and validate a sweep file; every problem names the file and the key or line."""
    path = Path(path)
    raw = read_toml(path)
    try:
        return SweepFile.model_validate(raw)
    except ValidationError as exc:
        allowed = (
            "top level: name, protocol, variant, title, description, metric, x_label, block, "
            "labels, quick, claim; "
            "[[block]]: panel, name, methods, envs, budgets, seeds, options, config, steps, "
            "steps_scale, eval_every, stop_early, rollouts, quick; "
            "[[claim]]: text, check, method, other, panels, threshold, budgets, up_to, scope"
        )
        raise UsageError(
            f"Sweep file {path}: {_problems(exc)}. Allowed keys — {allowed}."
        ) from None


def select_blocks(sweep_file: SweepFile, path: Path, names: list[str]) -> SweepFile:
    """The file with only the blocks named (``name`` or ``panel``); every name must exist."""
    if not names:
        return sweep_file
    known = sorted({b.name for b in sweep_file.block if b.name}
                   | {b.panel for b in sweep_file.block if b.panel})  # fmt: skip
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(
            f"Sweep file {path} has no block named {', '.join(map(repr, unknown))}; "
            f"--blocks takes block names or panels: {', '.join(known) or '(none named)'}."
        )
    kept = [b for b in sweep_file.block if b.name in names or b.panel in names]
    return sweep_file.model_copy(update={"block": kept})


def load_blocks(path: Path, blocks: str | None) -> SweepFile:
    """The sweep file at ``path`` with only the blocks of a ``--blocks`` value (names or
    panels, comma-separated; None: every block)."""
    from ssilbench.planning.values import comma_list

    names = [] if blocks is None else comma_list(blocks, "block", "--blocks positions")
    return select_blocks(load_sweep_file(path), path, names)


def plan_blocks(
    plugins, sweep_file: SweepFile, path: Path, data_root: Path | None, quick: bool,
    datasets: str = "prepare",
):  # fmt: skip
    """One checked plan for every block of the file; errors name the file and the block
    (``datasets``: as for ``build_plan``; ``data_root`` None: resolved only, no dataset
    opened)."""
    from ssilbench.planning.plan import SweepPlan, build_plan, resolve_plan

    plan = SweepPlan(runs=[])
    sweeps = []
    for number, block in enumerate(sweep_file.blocks(quick), start=1):
        for sweep in block.sweeps():
            try:
                plan.extend(resolve_plan(plugins, sweep) if data_root is None
                            else build_plan(plugins, sweep, data_root, datasets))  # fmt: skip
            except PreflightError as exc:  # everything the block lacks, found together
                raise PreflightError(f"Sweep file {path}, block {number}: {exc}",
                                     exc.problems) from None  # fmt: skip
            except SsilbenchError as exc:
                raise type(exc)(f"Sweep file {path}, block {number}: {exc}") from None
            sweeps.append(sweep)
    return plan, sweeps


def prepare_blocks(plan, path: Path, data_root: Path, datasets: str = "prepare"):
    """Open (or build) the datasets of a sweep file's resolved plan (:func:`plan_blocks`
    with no data root); errors name the file."""
    from ssilbench.planning.plan import prepare

    try:
        return prepare(plan, data_root, datasets)
    except PreflightError as exc:
        raise PreflightError(f"Sweep file {path}: {exc}", exc.problems) from None
    except SsilbenchError as exc:
        raise type(exc)(f"Sweep file {path}: {exc}") from None


class PanelCell(NamedTuple):
    """Where a planned run is drawn: its panel, its method's label, its label budget."""

    title: str
    method_label: str
    budget: str


def panel_cells(plugins, sweep_file: SweepFile, quick: bool) -> dict[str, PanelCell]:
    """Design id (:attr:`RunSpec.design_id`) -> the cell its runs are drawn in: the figure
    panel (the block's panel, the environment, and the values of the block's list-valued
    options), the method's label and the budget. Resolved without opening a dataset or
    needing a simulator."""
    from ssilbench.planning.plan import resolve_plan
    from ssilbench.planning.values import display_label

    cells: dict[str, PanelCell] = {}
    for block in sweep_file.blocks(quick):
        axes = [k for k, v in block.options.items() if isinstance(v, list)]
        for sweep in block.sweeps():
            plan = resolve_plan(plugins, sweep)
            for spec in plan.runs:
                extra = "".join(f", {k}={spec.options[k]}" for k in axes)
                head = f"{block.panel}: " if block.panel else ""
                label = display_label(spec.method, spec.config, plan.method_of(spec).cls.Config)
                cell = PanelCell(f"{head}{spec.env}{extra}", label, spec.budget)
                cells.setdefault(spec.design_id, cell)
    return cells


def planned_setups(plugins, sweep_file: SweepFile, quick: bool) -> dict[str, str]:
    """The setup ids (:attr:`RunSpec.setup_id`: all but the data) of the file's runs as
    this installation plans them, resolved without opening a dataset (a recorded run with
    one of these ids is one a sweep of the file skips), each with its design id (a report
    draws a run of that design whatever code recorded it)."""
    from ssilbench.planning.plan import resolve_plan

    return {spec.setup_id: spec.design_id for block in sweep_file.blocks(quick)
            for sweep in block.sweeps() for spec in resolve_plan(plugins, sweep).runs}  # fmt: skip
