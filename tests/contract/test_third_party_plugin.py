"""The example plugin in docs/plugin-example works as a separately installed distribution.

It is copied, pip-installed into a private folder (no network, nothing changed in the
environment running the tests) and driven through the CLI in subprocesses that have that
folder on PYTHONPATH, so its entry point is discovered exactly as after ``pip install``. Its
environment is also checked in-process from a copy of the sources.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ssilbench.errors import DatasetError

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "docs" / "plugin-example"
CLI = [sys.executable, "-c", "from ssilbench.cli import main; main()"]
IGNORE = shutil.ignore_patterns("build", "*.egg-info", "__pycache__")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """A folder holding the installed example distribution (package and .dist-info)."""
    pytest.importorskip("setuptools", reason="building the example plugin needs setuptools")
    base = tmp_path_factory.mktemp("plugin")
    source = base / "src"
    shutil.copytree(EXAMPLE, source, ignore=IGNORE)
    target = base / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--quiet",
            "--target",
            str(target),
            str(source),
        ],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
        timeout=120,
    )
    return target


def ssilbench(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SSILBENCH_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    return subprocess.run(
        [*CLI, *args],
        cwd=site.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def entries(site: Path, *flags: str) -> dict[tuple[str, str], dict]:
    out = ssilbench(site, *flags, "list", "--json")
    assert out.returncode == 0, out.stderr
    return {(e["kind"], e["name"]): e for e in json.loads(out.stdout)["entries"]}


def test_list_shows_the_example_with_its_distribution(site):
    found = entries(site)
    for key in [("method", "nearest_idm"), ("environment", "corridor")]:
        assert key in found, sorted(found)
        entry = found[key]
        assert entry["plugin"] == "example"
        assert entry["distribution"] == "ssilbench-example"
        assert entry["version"] == "0.2.0"
    # The built-ins are still there next to it.
    assert ("method", "bc") in found and ("environment", "maze") in found


def test_discovery_imports_neither_torch_nor_gymnasium(site):
    code = (
        "import sys; from ssilbench.plugins import load_plugins; p = load_plugins(); "
        "assert 'corridor' in p.environments, p.broken; "
        "print(sorted(m for m in ('torch', 'gymnasium') if m in sys.modules))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SSILBENCH_")}
    env["PYTHONPATH"] = str(site)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_run_and_leaderboard_with_example_and_builtin_method(site, tmp_path):
    results, data = tmp_path / "results", tmp_path / "data"
    run = ssilbench(
        site,
        "-q",
        "run",
        "--method",
        "nearest_idm,bc",
        "--env",
        "corridor:short",
        "--budgets",
        "4",
        "--seeds",
        "0,1",
        "--steps",
        "20",
        "--results",
        str(results),
        "--data-root",
        str(data),
    )
    assert run.returncode == 0, run.stderr
    assert "4 run(s) done" in run.stderr
    assert (data / "corridor" / "short").is_dir()

    board = ssilbench(site, "leaderboard", "--export", "json", "--results", str(results))
    assert board.returncode == 0, board.stderr
    tables = {t["env"]: t for t in json.loads(board.stdout)["tables"]}
    assert set(tables["corridor:short"]["methods"]) == {"bc", "nearest_idm"}
    for method in ("bc", "nearest_idm"):
        cell = tables["corridor:short"]["cells"][method]["4"]
        assert cell["n"] == 2 and 0.0 <= cell["mean"] <= 1.0


def test_blocking_the_example_removes_its_names(site, tmp_path):
    found = entries(site, "-p", "no:example")
    assert ("method", "nearest_idm") not in found
    assert ("environment", "corridor") not in found
    assert ("method", "bc") in found

    common = ["--budgets", "4", "--seeds", "0", "--results", str(tmp_path / "r")]
    common += ["--data-root", str(tmp_path / "d")]
    method = ssilbench(
        site, "-p", "no:example", "run", "--method", "nearest_idm", "--env", "maze:10x10", *common
    )
    assert method.returncode == 2, method.stderr
    assert "Unknown method 'nearest_idm'" in method.stderr
    assert "Traceback" not in method.stderr

    env = ssilbench(
        site, "-p", "no:example", "run", "--method", "bc", "--env", "corridor:short", *common
    )
    assert env.returncode == 2, env.stderr
    assert "Unknown environment 'corridor'" in env.stderr


# In-process checks of the environment, imported from a copy of the sources.


@pytest.fixture(scope="module")
def corridor(tmp_path_factory):
    source = tmp_path_factory.mktemp("example-src") / "plugin-example"
    shutil.copytree(EXAMPLE, source, ignore=IGNORE)
    sys.path.insert(0, str(source))
    try:
        import ssilbench_example.corridor as module

        yield module
    finally:
        sys.path.remove(str(source))
        for name in [m for m in sys.modules if m.split(".")[0] == "ssilbench_example"]:
            del sys.modules[name]


def load(corridor, task: str = "short", **options):
    environment = corridor.CorridorEnvironment()
    return environment.load(task, corridor.CorridorEnvironment.Options(**options))


def play(venv, actions: np.ndarray, seed: int) -> list[np.ndarray]:
    """Every array the vector env returns while it plays ``actions`` (steps x envs)."""
    obs, _ = venv.reset(seed=seed)
    out = [obs]
    for step_actions in actions:
        obs, reward, terminated, truncated, _ = venv.step(step_actions)
        out += [obs, reward, terminated, truncated]
    return out


@pytest.mark.parametrize("task", ["short", "long"])
def test_vec_env_is_seed_deterministic(corridor, task):
    spec = load(corridor, task).spec
    actions = np.random.default_rng(0).integers(2, size=(3 * spec.horizon, 5))
    first = play(load(corridor, task).make_vec_env(5, seed=7), actions, seed=7)
    again = play(load(corridor, task).make_vec_env(5, seed=7), actions, seed=7)
    other = play(load(corridor, task).make_vec_env(5, seed=8), actions, seed=8)
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other, strict=True))
    assert first[0].shape == (5, *spec.obs_shape) and first[0].dtype == np.float32


def test_vec_env_terminates_at_goal_and_truncates_at_horizon(corridor):
    task = load(corridor, "short")
    horizon = task.spec.horizon
    venv = task.make_vec_env(4, seed=0)
    venv.reset(seed=0)
    for t in range(1, horizon + 1):  # always left: never reaches the goal
        _, reward, terminated, truncated, _ = venv.step(np.zeros(4, dtype=np.int64))
        assert not terminated.any() and not reward.any()
        assert truncated.all() == (t == horizon)
    venv.reset(seed=0)
    done = np.zeros(4, dtype=bool)
    for _ in range(task.length - 1):  # always right: every start reaches the goal
        obs, reward, terminated, _, _ = venv.step(np.ones(4, dtype=np.int64))
        assert np.array_equal(reward, terminated.astype(float))
        assert (obs[terminated, 0] == task.length - 1).all()
        done |= terminated
    assert done.all()


def test_dataset_is_cached_and_verified(corridor, tmp_path):
    task = load(corridor, "short")
    store = task.dataset(tmp_path)
    assert store.root.is_relative_to(tmp_path / "corridor" / "short")
    obs_file = store.root / "obs.npy"
    written = obs_file.stat().st_mtime_ns
    again = task.dataset(tmp_path)
    assert again.root == store.root and obs_file.stat().st_mtime_ns == written
    assert again.manifest["files"] == store.manifest["files"]

    # Built elsewhere, the same options give the same bytes; other options a new folder.
    elsewhere = load(corridor, "short").dataset(tmp_path / "elsewhere")
    assert elsewhere.manifest["files"] == store.manifest["files"]
    assert load(corridor, "short", episodes=5).dataset(tmp_path).root != store.root

    data = bytearray(obs_file.read_bytes())
    data[-1] ^= 0xFF
    obs_file.write_bytes(bytes(data))
    with pytest.raises(DatasetError, match="does not match its manifest"):
        task.dataset(tmp_path)


@pytest.mark.parametrize("task_name", ["short", "long"])
def test_expert_dataset_obeys_the_dynamics(corridor, tmp_path, task_name):
    task = load(corridor, task_name, expert_noise=0.3)
    store = task.dataset(tmp_path)
    goal = task.length - 1
    cells = np.asarray(store.obs)[:, 0]
    i = store.transition_indices()
    step = np.where(np.asarray(store.actions)[i] == 1, 1, -1)
    assert np.array_equal(cells[i + 1], np.clip(cells[i] + step, 0, goal))
    assert np.array_equal(np.asarray(store.rewards)[i], (cells[i + 1] == goal).astype(np.float32))
    assert set(np.unique(np.asarray(store.actions)[i])) == {0, 1}  # noise: both actions

    starts = np.concatenate([[0], store.episode_ends[:-1]])
    lengths = store.episode_ends - starts - 1
    assert (cells[starts] != goal).all()
    assert not (cells[i] == goal).any()  # the goal only ever ends an episode
    ended_at_goal = cells[store.episode_ends - 1] == goal
    assert (ended_at_goal | (lengths == task.spec.horizon)).all()
    assert store.num_episodes == task.options.episodes


def test_video_model_is_one_step_right(corridor):
    import torch

    task = load(corridor, "long")
    obs = torch.arange(task.length, dtype=torch.float32)[:, None]
    expected = torch.clamp(obs + 1, max=task.length - 1)
    assert torch.equal(task.video_model().predict(obs), expected)


@pytest.mark.parametrize("task_name", ["short", "long"])
def test_example_tasks_pass_the_core_conformance_check(corridor, tmp_path, task_name):
    from ssilbench.testing import check_task

    check_task(load(corridor, task_name), tmp_path)
