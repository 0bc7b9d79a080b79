"""Every value a user types or writes is checked before anything runs.

Through the command line (exit code 2, one message, the results store neither created nor
changed): seeds, step counts and scales, non-finite and out-of-range config and option
values, empty list items, sweep files (encoding, values, ``[quick]``) and damaged dataset
manifests. The run identity and the properties of the value parsers are tested in
test_input_validation_values.py.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import textwrap
from pathlib import Path

import pytest

from ssilbench.cli import main
from ssilbench.data.datasets import TransitionStore
from ssilbench.errors import DatasetError, UsageError
from ssilbench.planning.options import RunOptions
from ssilbench.planning.sweepfile import load_sweep_file
from ssilbench.testing import cli_exit_code

RUN = ["--method", "bc", "--env", "maze:10x10", "--budgets", "16", "--seeds", "0"]


def _cli(capsys, *args: str) -> tuple[int, str]:
    return cli_exit_code(*args), capsys.readouterr().err


def _snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` and its sha256: what 'unchanged' compares."""
    if not folder.exists():
        return {}
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> tuple[Path, Path]:
    """A results store holding one tiny run (default lr), and the data root it used."""
    root = tmp_path_factory.mktemp("recorded")
    results, data = root / "results", root / "data"
    try:
        main(["run", *RUN, "--steps", "20", "--results", str(results), "--data-root",
              str(data), "-q"])  # fmt: skip
    except SystemExit as exc:
        assert exc.code == 0
    assert (results / "results.sqlite").is_file()
    return results, data


def _refused(capsys, results: Path, data: Path, *args: str) -> str:
    """Run with ``args``; it must exit 2 and leave the results store as it was."""
    before = _snapshot(results)
    code, err = _cli(capsys, "run", *args, "--results", str(results), "--data-root", str(data),
                     "-q")  # fmt: skip
    assert code == 2, err
    assert "Traceback" not in err
    assert _snapshot(results) == before
    return err


# --- the command line -------------------------------------------------------------------

FLAG_CASES = [
    (["--seeds", "-1"], "Seed -1 is out of range: seeds are whole numbers from 0 to 2^63 - 1"),
    (["--seeds", str(2**63)], f"Seed {2**63} is out of range"),
    (["--seeds", "0,,1"], "The seed list '0,,1' has an empty item"),
    (["--seeds", "1e3"], "Seed '1e3' is not an integer"),
    (["--budgets", "16,,64"], "The budget list '16,,64' has an empty item"),
    (["--budgets", str(2**70)], "is out of range: a count is at most"),
    (
        ["--steps-scale", "inf"],
        "--steps-scale inf is too large: a run trains at most 1,000,000,000 (10^9) steps",
    ),  # fmt: skip
    (["--steps-scale", "nan"], "--steps-scale must be a positive fraction"),
    (["--steps-scale", "1e300"], "is too large"),
    (["--steps-scale", "1000000"], "--steps-scale 1e+06 asks for 1.5e+09 steps per run"),
    (
        ["--steps", "99999999999999999999"],
        "--steps 99999999999999999999 is over the limit of 1,000,000,000 (10^9) training steps "
        "per run",
    ),  # fmt: skip
    (["--steps", "20", "--eval-every", str(10**12)], "--eval-every 1000000000000 is over the"),
    (
        ["--steps", "20", "-c", "lr=Infinity"],
        "--config lr=Infinity: it is Infinity, and only finite numbers are accepted.",
    ),
    (["--steps", "20", "-c", "lr=-Infinity"], "only finite numbers are accepted"),
    (["--steps", "20", "-c", "lr=NaN"], "only finite numbers are accepted"),
    (["--steps", "20", "-c", "lr=1e400"], "it is inf, and only finite numbers are accepted"),
    (
        ["--steps", "20", "-c", "lr=inf"],
        "Invalid config of method 'bc': 'lr' is inf, and only finite numbers are accepted.",
    ),
    (["--steps", "20", "-c", "batch_size=99999999999999999999"], "out of range"),
    (["--steps", "20", "-c", "batch_size=true"], "'batch_size' takes a number, not true"),
    (["--steps", "20", "-c", 'arch_options={"a": 1, "a": 2}'], "gives the key 'a' twice"),
    (["--steps", "20", "-c", "arch_options=" + "[" * 40 + "]" * 40], "nested more than"),
    (["--steps", "20", "-c", "lr=0.1", "-c", "lr=0.2"], "--config gives lr twice"),
    (["--steps", "20", "-o", "noop=NaN"], "--option noop=NaN: it is NaN"),
    (["--steps", "20", "-o", "noop=inf"], "options of environment 'maze': 'noop'"),
    (["--steps", "20", "-o", "maze_seed=-1"], "'maze_seed'"),
]


@pytest.mark.parametrize(
    ("args", "message"), FLAG_CASES, ids=[" ".join(a)[:40] for a, _ in FLAG_CASES]
)
def test_the_run_flags_refuse_bad_values_before_anything_is_written(
    recorded, capsys, args, message
):
    results, data = recorded
    # A flag given twice takes its last value, so args override RUN's seeds and budgets.
    extra = [] if "--steps" in args or "--steps-scale" in args else ["--steps", "20"]
    err = _refused(capsys, results, data, *RUN, *args, *extra)
    assert message in err


def test_a_fresh_results_folder_gets_no_store(tmp_path, capsys, recorded):
    _, data = recorded
    err = _refused(capsys, tmp_path / "new", data, *RUN, "--steps", "20", "-c", "lr=Infinity")
    assert "only finite numbers" in err
    assert not (tmp_path / "new" / "results.sqlite").exists()
    # A config the planner refuses (resolved before the results folder is made) leaves no
    # folder behind at all.
    err = _refused(capsys, tmp_path / "other", data, *RUN, "--steps", "20", "-c", "lr=oops")
    assert "'lr'" in err and not (tmp_path / "other").exists()


def test_infinity_is_not_the_default_run(recorded, capsys):
    """The old failure: lr=Infinity was written as null and took the default run's id."""
    results, data = recorded
    _refused(capsys, results, data, *RUN, "--steps", "20", "-c", "lr=Infinity")
    code, err = _cli(capsys, "run", *RUN, "--steps", "20", "--results", str(results),
                     "--data-root", str(data), "-q")  # fmt: skip
    assert code == 0 and "0 run(s) done, 1 already recorded" in err


def test_run_options_check_every_number_when_made(tmp_path):
    def options(**flags):
        return RunOptions.of(results=tmp_path / "r", data_root=tmp_path / "d", **flags)

    sweep = {"methods": "bc", "envs": "maze:10x10", "budgets": "16"}
    for flags, message in [
        ({"workers": 10**6}, "--workers 1000000 is over the limit"),
        ({"threads": 0}, "--threads must be a positive integer"),
        ({"steps": True}, "--steps must be a whole number"),
        ({"checkpoint_every": 10**10}, "--checkpoint-every 10000000000 is over"),
        ({"seeds": "-3"}, "Seed -3 is out of range"),
        ({"config": ("lr=NaN",)}, "only finite numbers"),
    ]:
        with pytest.raises(UsageError, match=message):
            options(**sweep, **flags)
    assert not (tmp_path / "r").exists()


# --- sweep files ------------------------------------------------------------------------

SWEEP_FILE = """
name = "tiny"

[[block]]
panel = "positions"
methods = ["bc"]
envs = ["maze:10x10"]
options = { data = "states", noop = [0.0, 0.5] }
budgets = [16]
seeds = [0]
steps = 20

[quick]
seeds = [0]
budgets = [1.0]
"""

SWEEP_CASES = [
    (
        ("seeds = [0]\nsteps", "seeds = [-1]\nsteps"),
        "'block[1].seeds[1]': Input should be greater than or equal to 0",
    ),
    (("seeds = [0]\nsteps", "seeds = [true]\nsteps"), "'block[1].seeds[1]': Input should be"),
    (("seeds = [0]\nsteps", f"seeds = [{2**63}]\nsteps"), "'block[1].seeds[1]'"),
    (
        ("steps = 20", "steps = 99999999999999999999"),
        "'block[1].steps': Input should be less than or equal to 1000000000",
    ),
    (("steps = 20", "steps_scale = inf"), "'block[1].steps_scale': Input should be a finite"),
    (("steps = 20", "steps_scale = nan"), "'block[1].steps_scale'"),
    (
        ("noop = [0.0, 0.5]", "noop = [0.0, nan]"),
        "'block[1].options': option 'noop' is nan, and only finite numbers are accepted",
    ),
    (("noop = [0.0, 0.5]", "noop = -inf"), "option 'noop' is -inf"),
    (('data = "states"', "data = { x = 1 }"), "option 'data' must be a string, a number"),
    (
        ('panel = "positions"', 'panel = "positions"\nconfig = { lr = inf }'),
        "'block[1].config': config 'lr' is inf",
    ),
    (
        ('panel = "positions"', 'panel = "positions"\nconfig = { arch_options = { w = nan } }'),
        "'block[1].config': config 'arch_options'.w is nan",
    ),
    (("budgets = [16]", "budgets = [inf]"), "'block[1].budgets': Label budget 'inf'"),
    (("budgets = [16]", "budgets = [true]"), "'block[1].budgets': Label budget True"),
    (('methods = ["bc"]', 'methods = [""]'), "'block[1].methods': names must not be empty"),
    (("[quick]\nseeds = [0]", "[quick]\nseeds = [-1]"), "'quick.seeds[1]'"),
    (("budgets = [1.0]", "budgets = [2.5]"), "'quick.budgets': Label budget '2.5'"),
    (
        ("budgets = [1.0]", 'budgets = [1.0]\nsteps = "500"'),
        "'quick.steps': Input should be a valid integer (got '500')",
    ),
    (("budgets = [1.0]", "budgets = [1.0]\nsteps = 0"), "'quick.steps'"),
    (("budgets = [1.0]", "budgets = [1.0]\neval_every = 1e400"), "'quick.eval_every'"),
    (
        ("budgets = [1.0]", "budgets = [1.0]\noptions = { noop = [] }"),
        "'quick.options': option 'noop' is an empty list",
    ),
    (("budgets = [1.0]", "budgets = [1.0]\noptions = { noop = nan }"), "'quick.options'"),
    (("budgets = [1.0]", "budgets = [1.0]\nstepz = 5"), "unknown key 'quick.stepz'"),
]


@pytest.mark.parametrize(("edit", "message"), SWEEP_CASES,
                         ids=[e[1].replace("\n", " ") for e, _ in SWEEP_CASES])  # fmt: skip
@pytest.mark.parametrize("quick", [False, True])
def test_sweep_files_refuse_bad_values_with_one_message(
    recorded, tmp_path, capsys, edit, message, quick
):
    results, data = recorded
    assert edit[0] in SWEEP_FILE
    path = tmp_path / "study.toml"
    path.write_text(textwrap.dedent(SWEEP_FILE.replace(*edit, 1)))
    err = _refused(capsys, results, data, "--sweep", str(path), *(["--quick"] * quick))
    assert f"Sweep file {path}" in err and message in err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (SWEEP_FILE.replace("positions", "posi\xe9tions").encode("latin-1"),
         "is not UTF-8 text (byte 0xe9 at offset"),
        (b"\xff\xfe" + SWEEP_FILE.encode("utf-16-le"), "is not UTF-8 text (byte 0xff at offset 0)"),
        (b"name = " + b"[" * 5000, "nests tables or arrays too deeply"),
        (b"name = 'x'\n[[block]\n", "is not valid TOML"),
    ],
)  # fmt: skip
def test_unreadable_sweep_files_name_the_file(recorded, tmp_path, capsys, content, message):
    results, data = recorded
    path = tmp_path / "study.toml"
    path.write_bytes(content)
    err = _refused(capsys, results, data, "--sweep", str(path))
    assert f"Sweep file {path}" in err and message in err


def test_a_utf8_byte_order_mark_and_exponent_budgets_are_fine(tmp_path):
    path = tmp_path / "study.toml"
    path.write_bytes(b"\xef\xbb\xbf" + SWEEP_FILE.replace("[16]", "[1e-05, 16]").encode())
    [block] = load_sweep_file(path).blocks()
    assert block.budgets == ["1e-05", "16"]
    assert [s.options["noop"] for s in block.sweeps()] == [0.0, 0.5]


def test_a_sweep_file_is_checked_before_the_results_folder_is_made(tmp_path, capsys):
    path = tmp_path / "study.toml"
    path.write_text(SWEEP_FILE.replace("seeds = [0]\nsteps", "seeds = [-1]\nsteps"))
    code, err = _cli(capsys, "run", "--sweep", str(path), "--results", str(tmp_path / "r"),
                     "--data-root", str(tmp_path / "d"))  # fmt: skip
    assert code == 2 and "'block[1].seeds[1]'" in err
    assert not (tmp_path / "r").exists() and not (tmp_path / "d").exists()


# --- damaged dataset manifests ----------------------------------------------------------


def _damage(manifest: Path, how: str) -> None:
    doc = json.loads(manifest.read_text())
    if how == "random bytes":
        manifest.write_bytes(bytes(range(256)) * 3)
    elif how == "not an object":
        manifest.write_text("[1, 2, 3]")
    elif how == "truncated":
        manifest.write_text(manifest.read_text()[:100])
    elif how.startswith("without "):
        del doc[how.removeprefix("without ")]
        manifest.write_text(json.dumps(doc))
    else:  # "KEY=JSON": a key of the wrong type
        key, value = how.split("=", 1)
        target = doc
        *path, last = key.split("/")
        for part in path:
            target = target[part]
        target[last] = json.loads(value)
        manifest.write_text(json.dumps(doc))


MANIFEST_CASES = [
    ("random bytes", "is not valid JSON"),
    ("truncated", "is not valid JSON"),
    ("not an object", "is not a JSON object"),
    ("format_version=true", "is not a ssilbench.transitions v1 manifest"),
    ("without frames", "lacks the key frames"),
    ("without files", "lacks the key files"),
    ('frames="2238"', 'has frames = "2238", which should be a whole number'),
    ("episodes=-1", "has episodes = -1, which should be a whole number"),
    ("obs_shape=[2.5]", "has obs_shape = [2.5], which should be a list of whole numbers"),
    ("files=[]", "has files = [], which should be an object"),
    ('files/obs.npy="x"', 'has files.obs.npy = "x", which should be an object'),
    ('files/obs.npy/bytes="12"', "has files.obs.npy"),
    ('extra_obs={"../x": {}}', "has extra_obs.../x"),
    ("metadata=3", "has metadata = 3, which should be an object"),
    ("transitions=1", "counts transitions that are not its frames minus its episodes"),
]


@pytest.mark.parametrize(("how", "message"), MANIFEST_CASES, ids=[h for h, _ in MANIFEST_CASES])
def test_a_damaged_manifest_is_a_dataset_error_naming_the_file(
    recorded, tmp_path, capsys, how, message
):
    results, data = recorded
    copy = tmp_path / "data"
    shutil.copytree(data, copy)
    [manifest] = copy.glob("maze/*/manifest.json")
    _damage(manifest, how)
    with pytest.raises(DatasetError) as info:
        TransitionStore.open(manifest.parent)
    assert info.value.root == manifest.parent
    assert str(manifest) in str(info.value) and message in str(info.value)
    assert "ssilbench data build ENV --rebuild" in str(info.value)
    err = _refused(capsys, results, copy, *RUN, "--steps", "20")
    assert str(manifest) in err and message in err


def test_a_damaged_manifest_is_rebuilt_by_data_build_rebuild(recorded, tmp_path, capsys):
    _, data = recorded
    copy = tmp_path / "data"
    shutil.copytree(data, copy)
    [manifest] = copy.glob("maze/*/manifest.json")
    _damage(manifest, "random bytes")
    code, err = _cli(capsys, "data", "build", "maze:10x10", "--data-root", str(copy))
    assert code == 2 and "is not valid JSON" in err
    code, err = _cli(capsys, "data", "build", "maze:10x10", "--rebuild", "--data-root", str(copy))
    assert code == 0, err
    assert TransitionStore.open(manifest.parent).num_episodes > 0


def test_arrays_that_disagree_with_the_manifest_counts_are_refused(recorded, tmp_path):
    _, data = recorded
    copy = tmp_path / "data"
    shutil.copytree(data, copy)
    [manifest] = copy.glob("maze/*/manifest.json")
    doc = json.loads(manifest.read_text())
    doc["frames"] += 1
    doc["transitions"] += 1
    manifest.write_text(json.dumps(doc))
    with pytest.raises(DatasetError, match="does not match its manifest .*obs.npy has"):
        TransitionStore.open(manifest.parent, verify=False)
