"""`results merge` cannot poison the results store.

Every line that `results merge` receives is checked before anything is written, all files go
in one transaction, and received unfinished runs are never live claims. A property test
generates received lines: each is refused cleanly, or it merges and reads everywhere.
"""

from __future__ import annotations

import json
import math
import os
import socket
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from ssilbench.errors import ResultsStoreError, SsilbenchError, UsageError
from ssilbench.runs.records import RunRecord
from ssilbench.runs.spec import run_id_of
from ssilbench.runs.store import ResultsStore

from .small_stores import DEAD_PID, OUTCOME, cli, files, make_store, spec

# --- results merge: every line checked before anything is written -------------------------


@pytest.fixture
def exported(tmp_path) -> Path:
    from ssilbench.runs.exchange import export_results

    path = tmp_path / "runs.jsonl"
    with ResultsStore(make_store(tmp_path / "source")) as store:
        export_results(store, path, ("done", "running"))
    return path


@pytest.fixture
def target(tmp_path) -> Path:
    """A store with runs of its own (seed 5), which a refused merge must leave as it is."""
    directory = tmp_path / "target"
    with ResultsStore(directory) as store:
        store.start(spec(5), "bc", "maze:10x10", "cpu", {})
        store.finish(spec(5).run_id, OUTCOME, wall_time=1.0)
    return directory


def _edit(path: Path, name: str, line: int, **changes) -> Path:
    lines = path.read_text().splitlines()
    row = json.loads(lines[line - 1])
    row.update(changes)
    lines[line - 1] = json.dumps(row)
    out = path.with_name(name)
    out.write_text("\n".join(lines) + "\n")
    return out


def _respec(row_spec: dict, **changes) -> dict:
    """A spec edited and a run id made to match it, as a careful forger would."""
    doc = {**row_spec, **changes}
    return {"spec": doc, "run_id": run_id_of(doc)}


BAD_FIELDS = [
    ({"score": "abc"}, "'score': Input should be a valid number"),
    ({"score": 1e308}, "'score': Input should be less than or equal to 1000000000000000"),
    ({"score": {"a": 1}}, "'score'"),
    ({"score": True}, "'score'"),
    ({"final_score": float("nan")}, "'final_score': Input should be a finite number"),
    ({"budget": "abc"}, "'budget': Label budget 'abc' is not a positive count"),
    ({"budget": 16}, "'budget': Input should be a valid string"),
    ({"budget": "32"}, "'budget' is \"32\" but its spec says \"16\""),
    ({"seed": 7}, "'seed' is 7 but its spec says"),
    ({"seed": "0"}, "'seed': Input should be a valid integer"),
    ({"method": "vm_idm"}, "'method' is \"vm_idm\" but its spec says \"bc\""),
    ({"env": "maze:20x20"}, "'env' is \"maze:20x20\" but its spec says"),
    ({"metrics": [1, 2]}, "'metrics': Input should be a valid dictionary"),
    ({"metrics": {"acc": "high"}}, "'metrics.acc': Input should be a valid number"),
    ({"metrics": {"acc": 1e300}}, "'metrics.acc'"),
    ({"timeline": {"step": 1}}, "'timeline': Input should be a valid list"),
    ({"timeline": [1, 2]}, "'timeline[0]': Input should be a valid dictionary"),
    ({"timeline": [{"score": 1e300}]}, "'timeline[0]': a value (1e+300) lies"),
    ({"normaliser": [0, 1]}, "'normaliser': Input should be a valid dictionary"),
    ({"normaliser": {"name": "x", "low": "0", "high": 1}},
     "'normaliser.low': Input should be a valid number"),
    ({"stages": "all"}, "'stages': Input should be a valid dictionary"),
    ({"versions": {"torch": json.loads("[" * 40 + "]" * 40)}},
     "nested more than 32 levels deep"),
    ({"started_at": "yesterday"}, "'started_at': Input should be a valid number"),
    ({"finished_at": -1.0}, "'finished_at': Input should be greater than or equal to 0"),
    ({"wall_time": float("inf")}, "'wall_time': Input should be a finite number"),
    ({"pid": "x"}, "'pid': Input should be a valid integer"),
    ({"pid": -1}, "'pid': Input should be greater than or equal to 0"),
    ({"pid": 2**40}, "'pid': Input should be less than or equal to 2147483647"),
    ({"attempts": 1.5}, "'attempts': Input should be a valid integer"),
    ({"n_labeled": 10**30}, "'n_labeled': Input should be less than or equal to"),
    ({"status": "zombie"}, "'status': Input should be 'running', 'done', 'failed' or"),
    ({"host": "\ud800"}, "'host': not valid Unicode text"),
    ({"method_label": ""}, "'method_label': String should have at least 1 character"),
    ({"report": 3}, "'report': Input should be a valid string"),
    ({"colour": "red"}, "unknown field 'colour'"),
]  # fmt: skip


@pytest.mark.parametrize("changes, message", BAD_FIELDS)
def test_a_bad_field_is_refused_naming_file_line_and_field(
    capsys, exported, target, changes, message
):
    bad = _edit(exported, "bad.jsonl", 3, **changes)
    before = files(target)
    # A good file first is not half-merged: every line of every file is checked first.
    code, _, err = cli(capsys, "results", "merge", str(exported), str(bad),
                       "--results", str(target))  # fmt: skip
    assert code == 2, err
    assert f"{bad}, line 3: " in err and message in err, err
    assert err.count("error:") == 1 and "Traceback" not in err
    assert files(target) == before


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"steps": "60"}, 'spec.steps is "60", read as 60'),
        ({"seed": 0.0}, "spec.seed is 0.0, read as 0"),
        ({"config": {"lr": -0.0}}, 'spec.config is {"lr": -0.0}, read as {"lr": 0.0}'),
        ({"steps": "sixty"}, "does not match its spec"),
    ],
)
def test_a_spec_not_written_as_ssilbench_writes_it_is_refused(
    capsys, exported, target, changes, message
):
    # Each would read as a run the store may hold already, under a second run id.
    row = json.loads(exported.read_text().splitlines()[1])
    bad = _edit(exported, "bad.jsonl", 2, **_respec(row["spec"], **changes))
    before = files(target)
    code, _, err = cli(capsys, "results", "merge", str(bad), "--results", str(target))
    assert code == 2 and f"{bad}, line 2: " in err and message in err, err
    assert files(target) == before


@pytest.mark.parametrize(
    "line, message",
    [
        ("[1, 2]", "line 5: a list, not a run"),
        ("1" * 5000, "line 5: not valid JSON (Exceeds the limit"),
        ("[" * 100000 + "]" * 100000, "line 5: not valid JSON (nested too deeply)"),
        ('{"run_id": "x", "spec": {}, "method": "bc"}', "line 5: a run without method_label"),
    ],
)
def test_lines_that_are_not_runs_are_refused(capsys, exported, target, line, message):
    bad = exported.with_name("bad.jsonl")
    bad.write_text(exported.read_text() + line + "\n")
    before = files(target)
    code, _, err = cli(capsys, "results", "merge", str(bad), "--results", str(target))
    assert code == 2 and f"{bad}, {message}" in err, err[:500]
    assert files(target) == before


def test_all_files_go_in_one_transaction(capsys, exported, target, tmp_path, monkeypatch):
    # A second file with a run of its own and a copy of the first's: one commit, or none.
    other = tmp_path / "other.jsonl"
    with ResultsStore(tmp_path / "third") as store:
        store.start(spec(9), "bc", "maze:10x10", "cpu", {})
        store.finish(spec(9).run_id, OUTCOME, wall_time=1.0)
    with ResultsStore.open_read_only(tmp_path / "third") as store:
        from ssilbench.runs.exchange import export_results

        export_results(store, other)
    commits = []
    real = ResultsStore.put_rows

    def counted(self, records, *curves):
        commits.append(len(records))
        return real(self, records, *curves)

    monkeypatch.setattr(ResultsStore, "put_rows", counted)
    code, _, err = cli(capsys, "results", "merge", str(exported), str(other), str(exported),
                       "--results", str(target))  # fmt: skip
    assert code == 0, err
    assert commits == [4]  # seeds 0, 1, 2 and 9, in one put_rows: one transaction
    assert f"{exported}: 3 added" in err and f"{other}: 1 added" in err
    assert f"{exported}: 0 added" in err and "2 already here" in err


def test_received_unfinished_runs_are_never_live_claims(capsys, tmp_path, target):
    # A run 'running' in a live process of this host (pid 1) and one of another host, as
    # a file may carry them: they arrive interrupted, and the next sweep runs them.
    source = tmp_path / "source"
    with ResultsStore(source) as store:
        for seed in (3, 4):
            store.start(spec(seed), "bc", "maze:10x10", "cpu", {})
        store.db.execute("UPDATE runs SET pid = 1, host = ? WHERE seed = 3",
                         (socket.gethostname(),))  # fmt: skip
        store.db.execute("UPDATE runs SET pid = 4242, host = 'elsewhere' WHERE seed = 4")
        from ssilbench.runs.exchange import export_results

        export_results(store, tmp_path / "running.jsonl", ("running",))
    code, _, err = cli(capsys, "results", "merge", str(tmp_path / "running.jsonl"),
                       "--results", str(target))  # fmt: skip
    assert code == 0, err
    assert "2 added" in err and "2 unfinished run(s) recorded as interrupted" in err
    with ResultsStore(target) as store:
        statuses = store.statuses()
        assert statuses[spec(3).run_id] == statuses[spec(4).run_id] == "interrupted"
        # What the next sweep does with each run it plans: both are claimed and run.
        for seed in (3, 4):
            assert store.start(spec(seed), "bc", "maze:10x10", "cpu", {})


def test_a_received_unfinished_copy_does_not_take_a_claim_of_this_store(capsys, tmp_path):
    target = tmp_path / "target"
    with ResultsStore(target) as store:
        store.start(spec(3), "bc", "maze:10x10", "cpu", {})  # a sweep here runs it now
    row = RunRecord.of(spec(3), status="interrupted", host="elsewhere", pid=7).to_row()
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps({"format": "ssilbench-results", "version": 1}) + "\n"
                    + json.dumps(row) + "\n")  # fmt: skip
    code, _, err = cli(capsys, "results", "merge", str(path), "--results", str(target))
    assert code == 0 and "1 kept" in err, err
    with ResultsStore(target) as store:
        assert store.status(spec(3).run_id) == "running"
        assert store.rows(None)[0].pid == os.getpid()


# --- Property: a received line is refused cleanly, or it reads everywhere ------------------


json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, -1, 0.5, 1e15, 1e16, -0.0, 2**31, 2**63]),
    st.text(max_size=8),
    st.sampled_from(["16", "all", "0.5", "bc", "maze:10x10", "done", "running", "\ud800", ""]),
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
FIELDS = ["method", "method_label", "env", "env_label", "budget", "seed", "status", "attempts",
          "started_at", "finished_at", "wall_time", "n_labeled", "score", "final_score",
          "max_score", "report", "normaliser", "timeline", "metrics", "stages", "versions",
          "device", "host", "pid", "error", "extra"]  # fmt: skip
SPEC_FIELDS = ["method", "env", "budget", "seed", "steps", "config", "options", "stop_early"]


def _base_row(status: str) -> dict:
    record = RunRecord.of(spec(), status=status, attempts=1, started_at=time.time(),
                          finished_at=time.time(), wall_time=2.0, device="cpu", host="h",
                          pid=DEAD_PID, **{k: getattr(OUTCOME, k) for k in (
                              "n_labeled", "score", "final_score", "max_score", "report",
                              "normaliser", "timeline", "metrics", "stages")})  # fmt: skip
    return record.to_row()


finite = st.floats(min_value=-1e15, max_value=1e15, allow_nan=False)
moment = st.floats(min_value=0, max_value=1e15, allow_nan=False)
small_dict = st.dictionaries(st.text(max_size=4), json_value, max_size=3)
# Values of the right type for each column (so that many lines merge), beside arbitrary ones.
PLAUSIBLE = {
    **dict.fromkeys(["method_label", "env_label", "report", "device", "host", "error"],
                    st.text(max_size=10)),
    **dict.fromkeys(["score", "final_score", "max_score"], st.none() | finite),
    **dict.fromkeys(["started_at", "finished_at", "wall_time"], st.none() | moment),
    **dict.fromkeys(["attempts", "n_labeled"], st.none() | st.integers(0, 2**63 - 1)),
    "pid": st.none() | st.integers(0, 2**31 - 1),
    "status": st.sampled_from(["running", "done", "failed", "interrupted"]),
    "metrics": st.dictionaries(st.text(max_size=5), finite, max_size=3),
    "normaliser": st.just({}) | st.fixed_dictionaries(
        {"name": st.text(max_size=5), "low": finite, "high": finite},
        optional={"source": st.text(max_size=5), "more": json_value}),
    "timeline": st.lists(small_dict, max_size=3),
    "stages": small_dict,
    "versions": small_dict,
}  # fmt: skip


SPEC_PLAUSIBLE = {
    "method": st.sampled_from(["bc", "vm_idm"]),
    "env": st.sampled_from(["maze:10x10", "maze:20x20"]),
    "budget": st.sampled_from(["16", "all", "0.5", "32", "016"]),
    "seed": st.integers(-(2**63), 2**63 - 1),
    "steps": st.integers(1, 10**9),
    "config": small_dict,
    "options": small_dict,
    "stop_early": st.booleans(),
}
OPTIONAL = [*PLAUSIBLE, "extra"]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    status=st.sampled_from(["done", "running", "failed", "interrupted"]),
    data=st.data(),
    mirror=st.booleans(),
    missing=st.lists(st.sampled_from(OPTIONAL * 4 + FIELDS), max_size=2),
)
def test_a_received_line_is_refused_cleanly_or_read_by_every_reader(status, data, mirror, missing):
    from ssilbench.cli.status import progress_lines
    from ssilbench.leaderboard.board import store_table
    from ssilbench.leaderboard.render import render
    from ssilbench.runs.exchange import merge_files, read_export

    row = _base_row(status)
    spec_changes = {
        key: data.draw(SPEC_PLAUSIBLE[key] | SPEC_PLAUSIBLE[key] | json_value)
        for key in data.draw(st.lists(st.sampled_from(SPEC_FIELDS), unique=True, max_size=2))
    }
    if spec_changes:
        try:
            row.update(_respec(row["spec"], **spec_changes))
        except (ValueError, TypeError):  # not hashable as JSON: the file could not hold it
            return
        if mirror:  # the run's columns changed with its spec
            row.update({k: v for k, v in spec_changes.items() if k in row})
    for key in data.draw(st.lists(st.sampled_from(OPTIONAL * 4 + FIELDS), unique=True,
                                  max_size=4)):  # fmt: skip
        plausible = PLAUSIBLE.get(key)
        row[key] = data.draw(
            json_value if plausible is None else plausible | plausible | json_value
        )
    for key in missing:
        row.pop(key, None)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "in.jsonl"
        try:
            line = json.dumps(row)
        except (ValueError, TypeError):
            return
        path.write_text(json.dumps({"format": "ssilbench-results", "version": 1}) + "\n"
                        + line + "\n")  # fmt: skip
        try:
            runs = read_export(path)
        except (UsageError, ResultsStoreError) as exc:
            event("refused: " + str(exc).split("line 2: ")[-1][:25])
            return  # a clean refusal
        event(f"merged ({status})")
        results = Path(tmp) / "results"
        with ResultsStore(results) as store:
            merge_files(store, [(str(path), runs)])
            store.mark_stale_interrupted()  # what every later sweep does first
            records = store.rows(None)
        with ResultsStore.open_read_only(results) as store:
            assert store.rows(None) == records
        (record,) = records
        assert record.status in ("done", "failed", "interrupted")
        assert RunRecord.from_row(record.to_row()) == record
        assert all(isinstance(line, str) for line in progress_lines(records, None, time.time()))
        for metric in ("score", "test_accuracy"):
            try:
                table = store_table(str(results), metric)
            except SsilbenchError:
                continue
            for fmt in ("md", "csv", "json", "tex", "html"):
                assert isinstance(render(table, fmt), str)
        for value in (record.score, record.final_score, record.wall_time):
            assert value is None or math.isfinite(value)


def test_the_property_test_sees_clean_rows_merge(tmp_path):
    # The unmutated row of the property test merges and reads (it is not refused).
    from ssilbench.runs.exchange import read_export

    path = tmp_path / "in.jsonl"
    path.write_text(textwrap.dedent(f"""\
        {json.dumps({"format": "ssilbench-results", "version": 1})}
        {json.dumps(_base_row("done"))}
        """))  # fmt: skip
    (record,) = read_export(path)
    assert record.run_id == spec().run_id and record.score == 0.75
