"""Values as a user writes them (flags, KEY=VALUE assignments, comma-separated lists) turned
into checked Python values, and pydantic models validated with messages that name the key
and the valid ones."""

from __future__ import annotations

import json
import re
import types
import typing
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import to_jsonable_python

from ssilbench.errors import (
    ConfigError,
    UsageError,
    did_you_mean,
)
from ssilbench.runs.checks import check_json, check_numbers, has_negative_zero, read_json
from ssilbench.runs.settings import MAX_SEED


def parse_value(text: str, where: str = "The value") -> Any:
    """A CLI value: JSON where it parses (numbers, true/false, null, lists, objects), else
    the string. ``where`` names the value in the UsageError for JSON that parses to
    something no setting can hold: Infinity, NaN or a number too large for a float (1e400),
    an integer beyond ±2^63, an object with a key twice, text that is not valid Unicode. What
    it returns is canonical JSON data (:func:`~ssilbench.runs.spec.check_json`), so it
    survives ``json.dumps`` and reads back equal."""
    try:
        return check_json(read_json(text, default=text), "it")  # plain text: a name, e.g. lc
    except ValueError as exc:
        raise UsageError(f"{where}: {exc}.") from None


def parse_assignments(items: typing.Iterable[str], flag: str) -> dict[str, Any]:
    """``KEY=VALUE`` items of a repeatable flag (``--config``, ``--option``) as a dict; each
    value read by :func:`parse_value`. A key given twice with different values is refused."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"{flag} expects KEY=VALUE, got {item!r}.")
        try:
            check_json(key, "the key")
        except ValueError as exc:
            raise UsageError(f"{flag} {item!r}: {exc}.") from None
        parsed = parse_value(value.strip(), f"{flag} {key}={value.strip()}")
        if key in out and _text(out[key]) != _text(parsed):  # not ==: 1 == true in Python
            raise UsageError(
                f"{flag} gives {key} twice ({key}={json.dumps(out[key])} and "
                f"{key}={json.dumps(parsed)}): give it once."
            )
        out[key] = parsed
    return out


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def format_validation(error: ValidationError, what: str, model: type[BaseModel]) -> str:
    """One message for every problem pydantic found in ``what`` (a config or options
    model): each names its key, unknown keys get the closest valid one. A field that takes
    one of several types (``maze | integer``) gets one problem, in its type as a user writes
    it, where pydantic reports one per type it tried."""
    fields = sorted(model.model_fields)
    parts: dict[str, str] = {}
    by_union: dict[str, list[Any]] = {}
    for err in error.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "(config)"
        if err["type"] == "extra_forbidden":
            parts[loc] = f"'{loc}' is not a valid key.{did_you_mean(loc, fields)}"
        elif _union_field(model, err["loc"]):
            by_union.setdefault(str(err["loc"][0]), []).append(err)
            parts.setdefault(str(err["loc"][0]), "")  # its place among the others
        else:
            hint = _closest_choice(model, err)
            parts[loc] = f"'{loc}': {err['msg']} (got {_shown(err.get('input'))}).{hint}"
    for name, errors in by_union.items():
        parts[name] = _union_problem(name, errors, model.model_fields[name].annotation)
    return _invalid(what, list(parts.values()), fields)


def _closest_choice(model: type[BaseModel], err: Any) -> str:
    """' Did you mean 'paper'?' for a misspelt value of a field that takes named values."""
    field = model.model_fields.get(str(err["loc"][0])) if err["loc"] else None
    if field is None or not isinstance(err.get("input"), str):
        return ""
    return did_you_mean(err["input"], named_values(field.annotation))


def named_values(annotation: Any) -> list[str]:
    """The text values a type names (its ``Literal`` strings, through unions): ``layout``'s
    ``["suite", "paper"]``."""
    if typing.get_origin(annotation) is typing.Literal:
        return [a for a in typing.get_args(annotation) if isinstance(a, str)]
    return [v for a in typing.get_args(annotation) for v in named_values(a)]


def _union_field(model: type[BaseModel], loc: tuple[Any, ...]) -> bool:
    """Whether pydantic's ``loc`` is one of the types tried for a union field (its second
    part names the type: ``('noop_seed', "literal['maze']")``)."""
    field = model.model_fields.get(str(loc[0])) if loc else None
    if field is None or len(loc) < 2:
        return False
    return _is_union(field.annotation)


def _is_union(annotation: Any) -> bool:
    """``A | B`` or ``Union[A, B]`` (``Optional`` included)."""
    origin = typing.get_origin(annotation)
    return origin in (typing.Union, types.UnionType) and bool(typing.get_args(annotation))


def _union_problem(name: str, errors: list[Any], annotation: Any) -> str:
    """``'noop_seed' takes maze | integer: Input should be greater than or equal to 0 (got
    -1)``. The type already lists the literal values, so "should be 'maze'" is left out
    where another type says more."""
    said = [e["msg"] for e in errors if e["type"] != "literal_error"] or [errors[0]["msg"]]
    why = "; ".join(dict.fromkeys(said))
    given = errors[0].get("input")
    hint = did_you_mean(given, named_values(annotation)) if isinstance(given, str) else ""
    return f"'{name}' takes {type_text(annotation)}: {why} (got {_shown(given)}).{hint}"


def type_text(annotation: Any) -> str:
    """A field's type as a user types its values: ``suite | paper``, ``integer``, ..."""
    if annotation is None or annotation is type(None):
        return "null"
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return " | ".join(str(a) for a in args)
    if origin is typing.Annotated:
        return type_text(args[0])
    if _is_union(annotation):
        return " | ".join(type_text(a) for a in args)
    if args:
        return f"{getattr(origin, '__name__', origin)}[{', '.join(type_text(a) for a in args)}]"
    names = {int: "integer", float: "number", bool: "true | false", str: "text"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _invalid(what: str, parts: list[str], fields: list[str]) -> str:
    valid = ", ".join(fields) if fields else "(none)"
    return (
        f"Invalid {what}: "
        + " ".join(p if p.endswith((".", "?")) else p + "." for p in parts)
        + f" Valid keys: {valid}."
    )


def validate_model(model: type[BaseModel], values: dict[str, Any], what: str) -> BaseModel:
    """``values`` validated by ``model`` (a method config, environment or architecture
    options), or a ConfigError naming every bad key. Beyond the model's own rules it refuses
    what pydantic would let through: a non-finite float (pydantic reads "inf" and "nan" as
    floats, and would write them as null), an integer beyond ±2^63, and true/false given
    for a number (pydantic reads true as 1). A -0.0 the model made (from "-0") becomes
    0.0, as :class:`~ssilbench.runs.spec.RunSpec` stores it."""
    try:
        checked = model.model_validate(values)
    except ValidationError as exc:
        raise ConfigError(format_validation(exc, what, model)) from None
    dumped = checked.model_dump()
    parts = [
        f"'{key}' takes a number, not {json.dumps(raw)}"
        for key, raw in values.items()
        if isinstance(raw, bool)
        and isinstance(dumped.get(key), int | float)
        and not isinstance(dumped.get(key), bool)
    ]
    for key, value in dumped.items():
        try:
            check_numbers(value, f"'{key}'")
        except ValueError as exc:
            parts.append(str(exc))
    if parts:
        raise ConfigError(_invalid(what, parts, sorted(model.model_fields)))
    if has_negative_zero(dumped):
        checked = model.model_validate(check_json(checked.model_dump(mode="json"), "values"))
    return checked


def run_options(environment: Any, family: str, given: dict[str, Any]) -> dict[str, Any]:
    """The option values a new run of ``family`` takes: ``given`` (the sweep's or the
    command's ``-o``), and for the keys it leaves unset the family's
    :meth:`~ssilbench.api.Environment.run_defaults` (a ConfigError for a bad value)."""
    values = validate_model(environment.Options, given, f"options of environment '{family}'")
    return {**environment.run_defaults(values), **given}


_INTEGER = re.compile(r"-?[0-9]+")


def comma_list(text: str, what: str, example: str) -> list[str]:
    """The items of a comma-separated flag value, duplicates removed, order kept; ``what``
    and ``example`` name the list in the message. An empty list, an empty item between two
    commas (a,,b: an item left out) and text that is not valid Unicode are refused; one
    trailing comma is allowed."""
    parts = [part.strip() for part in text.split(",")]
    if not any(parts):
        raise UsageError(f"The {what} list is empty: write e.g. {example}.")
    if not all(parts[:-1]):
        raise UsageError(f"The {what} list {text!r} has an empty item (two commas in a row, "
                         f"or a comma first): write e.g. {example}.")  # fmt: skip
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"The {what} list {text!r} is not valid Unicode text.") from None
    return list(dict.fromkeys(filter(None, parts)))


def parse_seeds(text: str) -> list[int]:
    """The integer seeds of a ``--seeds`` value, duplicates removed, order kept; each a whole
    number written in ASCII digits, 0 <= seed <= 2^63 - 1."""
    seeds = []
    for item in comma_list(text, "seed", "--seeds 0,1,2"):
        if not _INTEGER.fullmatch(item):
            raise UsageError(f"Seed {item!r} is not an integer: write e.g. --seeds 0,1,2.")
        digits = item.lstrip("-").lstrip("0") or "0"  # int() refuses over 4300 digits
        if item.startswith("-") and digits != "0" or len(digits) > 19 or int(digits) > MAX_SEED:
            raise UsageError(f"Seed {item} is out of range: seeds are whole numbers from 0 to "
                             f"2^63 - 1 ({MAX_SEED}); write e.g. --seeds 0,1,2.")  # fmt: skip
        seeds.append(int(digits))
    return list(dict.fromkeys(seeds))


def non_default(model: BaseModel, defaults: dict[str, Any] | None = None) -> dict[str, Any]:
    """The fields of a config or options model that differ from their defaults; ``defaults``:
    values that stand in for the model's (an environment's run defaults, which new runs
    take in place of the model's)."""
    # Every field's value, as JSON: a tuple default and the list it is read back as are the
    # same value, and a field a model leaves out of its dump at its default (so that earlier
    # runs keep their ids) still compares with what stands in for its default.
    base = _values(type(model).model_validate(defaults or {}))
    return {
        k: v
        for k, v in _values(model).items()
        if v != base[k] and not (hasattr(v, "__len__") and v == [])
    }


def _values(model: BaseModel) -> dict[str, Any]:
    """Every field's value as the dump gives it; the value itself where the dump leaves the
    field out."""
    dumped = model.model_dump(mode="json")
    return {
        k: dumped[k] if k in dumped else to_jsonable_python(getattr(model, k))
        for k in type(model).model_fields
    }


def display_label(
    name: str,
    values: dict[str, Any],
    model: type[BaseModel],
    defaults: dict[str, Any] | None = None,
) -> str:
    """'bc' or 'bc (arch=lc)': the name plus whatever differs from the defaults (``defaults``
    as :func:`non_default` takes them)."""
    diff = non_default(model.model_validate(values), defaults)
    return f"{name} ({', '.join(f'{k}={v}' for k, v in sorted(diff.items()))})" if diff else name


def flag_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)
