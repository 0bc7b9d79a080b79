"""The checks every value a user gives must pass, whichever way it comes in (flags, sweep
files, a library caller, a received export): config and option values as canonical JSON
(:func:`check_json`), finite numbers within ±2^63, and JSON text read strictly."""

from __future__ import annotations

import json
import math
from typing import Any

MAX_INT = 2**63 - 1
"""Integers in configs and options lie within ±MAX_INT: numpy, torch and the results store
hold nothing larger."""


MAX_DEPTH = 32  # lists and tables nested deeper than this are a mistake, not a setting


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
