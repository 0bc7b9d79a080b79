"""Values as the code reads them, over hand-picked and generated input.

The run identity: distinct configs never share a run id, a spec reads back from its JSON with
the same id, the planner gives each value its field's type, and a sweep's steps are bounded.
Then properties of the value parsers over generated input (Hypothesis), and the message for a
misspelt named value. What the command line refuses is tested in test_input_validation.py.
"""

from __future__ import annotations

import json
import math
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from ssilbench.data.split import parse_budget, parse_budgets
from ssilbench.errors import ConfigError, SsilbenchError, UsageError
from ssilbench.planning.plan import resolve
from ssilbench.planning.values import comma_list, parse_assignments, parse_seeds, parse_value
from ssilbench.plugins import load_plugins
from ssilbench.runs.settings import MAX_SEED, MAX_STEPS
from ssilbench.runs.spec import RunSpec, Sweep

FAST = settings(max_examples=200, deadline=None)


# --- run identity -----------------------------------------------------------------------

NFC, NFD = unicodedata.normalize("NFC", "é"), unicodedata.normalize("NFD", "é")
# Each class holds values that are one config; values of different classes are different
# configs. 1, 1.0 and true are three classes in a spec's free-form dict (the planner gives
# each value its field's type first: see test_the_planner_gives_each_value_its_fields_type).
SAME = [
    [0.0, -0.0], [0], [1], [1.0], [True], [False], [None], ["1"], [""], [NFC], [NFD],
    [[1, 2], (1, 2)], [[2, 1]], [[]], [{}], [[[]]], [[None]],
    [{"a": 1, "b": [1.5, "x"]}, {"b": (1.5, "x"), "a": 1}],
    [{"a": {"x": -0.0, "y": [1, {"z": None}]}}, {"a": {"y": ((1, {"z": None})), "x": 0.0}}],
    [{"a": {"x": 0.0, "y": [1, {"z": False}]}}],
    [2**63 - 1], [-(2**63) + 1], [1e-300], [5e-324], [0.1 + 0.2], [0.3],
    [2**63], [2**70], [-(2**63) - 1],  # refused as input, but a recorded spec must read
]  # fmt: skip
REFUSED = [
    math.inf, -math.inf, math.nan, 1e400, [1.0, math.nan], {"a": {"b": math.inf}},
    {1: "x"}, {"a": {2: 3}}, b"x", {1, 2}, "\ud800", object(),
]  # fmt: skip


def _spec(**changes) -> RunSpec:
    values = dict(method="bc", config={}, env="maze:10x10", options={}, budget="16", seed=0,
                  steps=20, eval_every=10)  # fmt: skip
    return RunSpec(**{**values, **changes})


@pytest.mark.parametrize("field", ["config", "options"])
def test_distinct_configs_never_share_a_run_id(field):
    ids = []
    for same in SAME:
        found = {_spec(**{field: {"k": value}}).run_id for value in same}
        assert len(found) == 1, same
        ids.append(found.pop())
    assert len(set(ids)) == len(ids)
    for value in REFUSED:
        with pytest.raises(ValidationError):
            _spec(**{field: {"k": value}})


def test_a_spec_reads_back_from_its_json_with_the_same_id():
    for same in SAME:
        spec = _spec(config={"k": same[-1]}, options={"o": same[0]})
        again = RunSpec.model_validate_json(spec.model_dump_json())
        assert again.run_id == spec.run_id and again.canonical_json() == spec.canonical_json()


def test_the_planner_gives_each_value_its_fields_type():
    plugins = load_plugins()

    def run_id(config=None, options=None) -> str:
        sweep = Sweep(methods=["bc"], envs=["maze:10x10"], budgets=["16"], seeds=[0], steps=20,
                      config=config or {}, options=options or {})  # fmt: skip
        [spec] = resolve(plugins, sweep)
        return spec.run_id

    # A float field: 1 and 1.0 are one value; an integer field: 64 and 64.0 are one value.
    assert run_id({"lr": 1}) == run_id({"lr": 1.0}) == run_id({"lr": parse_value("1e0")})
    assert run_id({"batch_size": 64}) == run_id({"batch_size": 64.0})
    assert run_id({"lr": 0.001}) != run_id() != run_id({"lr": 0.002})
    # -0.0, 0 and 0.0 for a float option: one value (0.0), whatever the spelling.
    zeros = {run_id(options={"noop": z}) for z in (0, 0.0, -0.0, parse_value("-0.0"))}
    assert zeros == {run_id(options={"noop": 0.0})}
    assert run_id(options={"noop": "-0"}) == run_id(options={"noop": 0.0})  # pydantic's "-0"
    for config, message in [
        ({"batch_size": True}, "'batch_size' takes a number, not true"),
        ({"lr": "inf"}, "'lr' is inf"),
        ({"lr": "NaN"}, "'lr'"),
        ({"batch_size": str(2**64)}, "out of range"),  # pydantic reads the text as 2^64
    ]:
        with pytest.raises(ConfigError, match=message):
            run_id(config)
    with pytest.raises(ValidationError):
        Sweep(methods=["bc"], envs=["maze:10x10"], budgets=["16"], seeds=[True])


def test_sweep_steps_are_bounded():
    sweep = Sweep(methods=["bc"], envs=["e"], budgets=["16"], seeds=[0], steps_scale=10.0)
    assert sweep.total_steps(1000) == 10000
    with pytest.raises(UsageError, match="a run may train at most 1,000,000,000"):
        sweep.total_steps(MAX_STEPS)
    for bad in ({"steps": MAX_STEPS + 1}, {"steps_scale": math.inf}, {"seeds": [MAX_SEED + 1]},
                {"eval_every": 0}, {"steps": "20"}):  # fmt: skip
        with pytest.raises(ValidationError):
            Sweep(**{"methods": ["bc"], "envs": ["e"], "budgets": ["16"], "seeds": [0], **bad})


# --- properties of the value parsers ----------------------------------------------------

TRICKY = '0123456789,.-+e E_aIlnfNy[]{}":=٣²\t\u00a0\ud800é'
texts = st.one_of(st.text(), st.text(alphabet=TRICKY), st.text(st.characters(codec=None)))
finite = st.floats(allow_nan=False, allow_infinity=False)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63) + 1, 2**63 - 1) | finite | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


def _json_equal(a, b) -> bool:
    """Equal as JSON data: 1, 1.0 and true differ; -0.0 is 0.0; tuples are lists."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, float) and isinstance(b, float) and a == b
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(map(_json_equal, a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _is_finite(value) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return abs(value) < 2**63
    if isinstance(value, list):
        return all(map(_is_finite, value))
    if isinstance(value, dict):
        return all(isinstance(k, str) for k in value) and all(map(_is_finite, value.values()))
    return value is None or isinstance(value, bool | str)


@FAST
@given(texts)
def test_parse_value_accepts_only_finite_json_that_round_trips(text):
    try:
        value = parse_value(text)
    except SsilbenchError:
        return
    assert _is_finite(value)
    assert _json_equal(parse_value(json.dumps(value)), value)


@FAST
@given(json_values)
def test_parse_value_reads_back_what_json_writes(value):
    assert _json_equal(parse_value(json.dumps(value)), value)


@FAST
@given(st.one_of(st.just(math.inf), st.just(-math.inf), st.just(math.nan), st.just(1e400)),
       json_values)  # fmt: skip
def test_parse_value_refuses_non_finite_numbers_anywhere(bad, value):
    with pytest.raises(UsageError, match="only finite numbers"):
        parse_value(json.dumps([value, bad]))


@FAST
@given(st.lists(texts, max_size=4), st.sampled_from(["--config", "--option"]))
def test_parse_assignments_accepts_only_clean_keys_and_finite_values(items, flag):
    try:
        out = parse_assignments(items, flag)
    except SsilbenchError:
        return
    assert all(key and key == key.strip() for key in out)
    assert _is_finite(out)
    again = parse_assignments([f"{k}={json.dumps(v)}" for k, v in out.items()], flag)
    assert _json_equal(again, out)


@FAST
@given(texts)
def test_parse_seeds_accepts_only_seeds_in_range_and_round_trips(text):
    try:
        seeds = parse_seeds(text)
    except SsilbenchError:
        return
    assert seeds and all(0 <= s <= MAX_SEED for s in seeds) and len(set(seeds)) == len(seeds)
    assert parse_seeds(",".join(map(str, seeds))) == seeds


@FAST
@given(st.lists(st.integers(-(2**70), 2**70), min_size=1, max_size=5))
def test_parse_seeds_takes_exactly_the_integers_in_range(numbers):
    text = ",".join(map(str, numbers))
    if all(0 <= n <= MAX_SEED for n in numbers):
        assert parse_seeds(text) == list(dict.fromkeys(numbers))
    else:
        with pytest.raises(UsageError, match="out of range"):
            parse_seeds(text)


@FAST
@given(texts)
def test_parse_budgets_gives_labels_that_parse_back_to_themselves(text):
    try:
        labels = parse_budgets(text)
    except SsilbenchError:
        return
    assert labels and len(set(labels)) == len(labels)
    for label in labels:
        assert parse_budget(label) == label
        assert label == "all" or label.isdigit() or 0 < float(label) <= 1
    assert parse_budgets(",".join(labels)) == labels


@FAST
@given(texts)
def test_comma_list_gives_clean_items_that_round_trip(text):
    try:
        items = comma_list(text, "method", "--method bc")
    except SsilbenchError:
        return
    assert items and all(i and i == i.strip() and "," not in i for i in items)
    assert len(set(items)) == len(items)
    assert comma_list(",".join(items), "method", "--method bc") == items


@FAST
@given(json_values, json_values)
def test_run_ids_are_equal_exactly_when_the_configs_are(a, b):
    first, second = _spec(config={"k": a}), _spec(config={"k": b})
    assert (first.run_id == second.run_id) == _json_equal(a, b)
    assert RunSpec.model_validate_json(first.model_dump_json()).run_id == first.run_id


def test_a_misspelt_named_value_gets_the_closest_and_a_union_one_problem():
    from typing import Annotated, Literal

    from pydantic import BaseModel, ConfigDict, Field

    from ssilbench.planning.values import validate_model

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid")
        layout: Literal["suite", "paper"] = "suite"
        seed: Literal["maze"] | Annotated[int, Field(ge=0, strict=True)] = "maze"

    with pytest.raises(ConfigError) as info:
        validate_model(Options, {"layout": "papr", "seed": "maz"}, "options of 'm'")
    assert str(info.value) == (
        "Invalid options of 'm': 'layout': Input should be 'suite' or 'paper' (got 'papr'). "
        "Did you mean 'paper'? 'seed' takes maze | integer: Input should be a valid integer "
        "(got 'maz'). Did you mean 'maze'? Valid keys: layout, seed."
    )
    with pytest.raises(ConfigError, match=r"'seed' takes maze \| integer: Input should be "
                       r"greater than or equal to 0 \(got -1\)\. Valid keys"):  # fmt: skip
        validate_model(Options, {"seed": -1}, "options of 'm'")
