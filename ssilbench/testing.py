"""What a plugin's tests use: conformance checks, and the harness that runs and scores.

Conformance checks every plugin must pass (the core's test suite runs them on every
registered environment and method; plugin authors run them in their own tests), each
raising :class:`ConformanceError` naming what is wrong:

- ``check_task(task, root)``: a task's spec, vector environment and dataset agree with each
  other and rollouts are seed-deterministic, the property every comparison relies on
  (``check_vector_env`` and ``check_dataset`` are its two halves);
- ``check_method(method, task, root, config=None, steps=12, budget="8")``: the method's
  stages add up to the budget and are spent, the same seed gives the same policy, a
  stacked fit equals lone fits where the method stacks, and ``act`` returns valid actions
  (``ssilbench.method_checks``);
- ``check_stages(stages, total, method)``: step parity of a list of stages alone;
- ``check_stacked_paths(...)``: an architecture's stacked fast path against the plain one.

A test obtains what it checks from the installed plugins by name:
``plugins = load_plugins()``, ``task = plugins.environments.create("maze").load("10x10")``
(with options: ``env.load("10x10", env.Options(state="image"))``) and
``method = plugins.methods.create("bc")``.

The harness, for tests that drive a plugin the way a sweep does (each name is imported from
the core module that defines it on first access, so this module stays light):

- ``load_plugins()``: the installed plugins' registries (``.methods``, ``.environments``,
  ``.architectures``);
- ``Sweep``, ``build_plan(plugins, sweep, data_root)``, ``execute(spec, method, task,
  plugins, device, storage=None)``, ``execute_many`` and ``RunStorage``: plan and run
  sweeps in this process; ``check_stages(stages, total, method)``: step parity;
- ``split(store, budget, seed, unit)`` and ``StageCache(root)``: a split's views and a stage
  cache, to build a :class:`ssilbench.api.RunContext` by hand;
- ``rollout_returns``, ``run_episodes`` and ``Evaluator``: rollouts as the evaluation does
  them; ``TestSetScorer(test_set, device)(policy)``: the test-set metrics;
- ``partial_path(root)``: where a store is written before it is complete;
- ``random_store(spec, root)``: a small store of random frames and actions of a task's
  shape, for testing a method or an architecture on a task without its data;
  ``offline_context(spec, folder)``: a ``RunContext`` on such a store (its split, a stage
  plan that never evaluates, the installed architectures), with the store;
- ``run_records(results)``: the runs a results folder records, as dicts of their columns
  (after ``ssilbench run`` in a subprocess, say); ``usage_error(result)``: the one-line
  message of a command that refused its input (exit code 2, no traceback);
  ``cli_exit_code(*args)``: run the command in this process, for its exit code;
- ``imported_after(statement, modules)``: which of ``modules`` a fresh interpreter has
  imported once it ran ``statement`` (loading a task imports no simulator, no torch);
- ``Stacked(nets, context=None)``: copies of a module run as one, through the module's
  ``stacked_forward`` fast path when given its ``stacked_encode`` context, else ``vmap``
  (test an architecture's fast path against the plain one, with
  ``check_stacked_paths(fast, plain, fast_inputs, plain_inputs, targets)``);
- ``LocalServer(root)``: a folder served on 127.0.0.1 with Range requests (and dropped
  connections, ignored ranges or quota pages on request), to test a ``downloads.toml``
  with ``ssilbench data download FAMILY --from-url``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ssilbench.api import EnvSpec, Task
from ssilbench.conformance import ConformanceError
from ssilbench.registry import lazy_attributes

if TYPE_CHECKING:
    from ssilbench.data.dataset_writer import partial_path
    from ssilbench.data.datasets import TransitionStore
    from ssilbench.data.local_server import LocalServer
    from ssilbench.data.split import split
    from ssilbench.eval.diagnostics import TestSetScorer
    from ssilbench.eval.rollout import Evaluator, rollout_returns, run_episodes
    from ssilbench.method_checks import check_method
    from ssilbench.planning.plan import build_plan
    from ssilbench.plugins import load_plugins
    from ssilbench.runner.worker import RunStorage, execute, execute_many
    from ssilbench.runs.spec import Sweep
    from ssilbench.stages import check_stages
    from ssilbench.train.memo import StageCache
    from ssilbench.train.stacking import Stacked

__all__ = [
    "ConformanceError",
    "LocalServer",
    "Evaluator",
    "RunStorage",
    "StageCache",
    "Stacked",
    "Sweep",
    "TestSetScorer",
    "build_plan",
    "check_dataset",
    "check_method",
    "check_stacked_paths",
    "check_stages",
    "check_task",
    "check_vector_env",
    "execute",
    "execute_many",
    "load_plugins",
    "partial_path",
    "random_store",
    "offline_context",
    "rollout_returns",
    "run_episodes",
    "imported_after",
    "run_records",
    "usage_error",
    "cli_exit_code",
    "split",
]

# The harness (see the module docstring): name -> defining module, imported on first access.
_HARNESS = {
    "load_plugins": "ssilbench.plugins",
    "Sweep": "ssilbench.runs.spec",
    "build_plan": "ssilbench.planning.plan",
    "execute": "ssilbench.runner.worker",
    "execute_many": "ssilbench.runner.worker",
    "RunStorage": "ssilbench.runner.worker",
    "check_stages": "ssilbench.stages",
    "check_method": "ssilbench.method_checks",
    "split": "ssilbench.data.split",
    "StageCache": "ssilbench.train.memo",
    "rollout_returns": "ssilbench.eval.rollout",
    "run_episodes": "ssilbench.eval.rollout",
    "Evaluator": "ssilbench.eval.rollout",
    "TestSetScorer": "ssilbench.eval.diagnostics",
    "partial_path": "ssilbench.data.dataset_writer",
    "Stacked": "ssilbench.train.stacking",
    "LocalServer": "ssilbench.data.local_server",
}


__getattr__ = lazy_attributes(globals(), _HARNESS)


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConformanceError(message)


def _random_actions(spec, rng: np.random.Generator, num_envs: int) -> np.ndarray:
    if spec.action_kind == "continuous":
        low, high = np.asarray(spec.action_low), np.asarray(spec.action_high)
        return rng.uniform(low, high, size=(num_envs, spec.num_actions)).astype(np.float32)
    return rng.integers(0, spec.num_actions, size=num_envs)


def _arrays(obs) -> tuple[np.ndarray, ...]:
    """An observation as a tuple of arrays (a dict observation key by key, sorted)."""
    if isinstance(obs, dict):
        return tuple(np.array(obs[key]) for key in sorted(obs))
    return (np.array(obs),)


def _rollout(task: Task, num_envs: int, seed: int, steps: int) -> list[tuple]:
    venv = task.make_vec_env(num_envs, seed=seed)
    try:
        rng = np.random.Generator(np.random.PCG64(seed))
        obs, _ = venv.reset(seed=seed)
        trace = [_arrays(obs)]
        for _ in range(steps):
            obs, reward, terminated, truncated, _ = venv.step(
                _random_actions(task.spec, rng, num_envs)
            )
            trace.append(
                (*_arrays(obs), np.array(reward), np.array(terminated), np.array(truncated))
            )
        return trace
    finally:
        venv.close()


def check_vector_env(task: Task, num_envs: int = 4, seed: int = 0) -> None:
    """Spaces match the spec, equal seeds replay equally, and episodes end by the horizon."""
    spec = task.spec
    venv = task.make_vec_env(num_envs, seed=seed)
    try:
        _require(venv.num_envs == num_envs, f"{spec.env_id}: num_envs is not {num_envs}")
        expected = _observation_layout(spec)
        space = venv.single_observation_space
        spaces = space.spaces if spec.extra_obs else {"obs": space}
        _require(
            sorted(spaces) == sorted(expected),
            f"{spec.env_id}: observation keys {sorted(spaces)} != {sorted(expected)}",
        )
        for key, (shape, dtype) in expected.items():
            _require(
                tuple(spaces[key].shape) == shape,
                f"{spec.env_id}: observation space {key!r} has shape {spaces[key].shape}, "
                f"the spec implies {shape}",
            )
            _require(
                np.dtype(spaces[key].dtype) == np.dtype(dtype),
                f"{spec.env_id}: observation {key!r} dtype {spaces[key].dtype} != {dtype}",
            )
        action_space = venv.single_action_space
        if spec.action_kind == "continuous":
            _require(
                tuple(action_space.shape) == (spec.num_actions,)
                and np.allclose(action_space.low, spec.action_low)
                and np.allclose(action_space.high, spec.action_high),
                f"{spec.env_id}: action space {action_space} is not a box of "
                f"{spec.num_actions} in [{spec.action_low}, {spec.action_high}]",
            )
        else:
            _require(
                getattr(action_space, "n", None) == spec.num_actions,
                f"{spec.env_id}: action space {action_space} has not {spec.num_actions} actions",
            )
        obs, _ = venv.reset(seed=seed)
        observed = obs if spec.extra_obs else {"obs": obs}
        for key, (shape, _) in expected.items():
            _require(
                np.shape(observed[key]) == (num_envs, *shape),
                f"{spec.env_id}: reset gives {key!r} of shape {np.shape(observed[key])}",
            )
    finally:
        venv.close()

    steps = spec.horizon + 1
    first, second = _rollout(task, num_envs, seed, steps), _rollout(task, num_envs, seed, steps)
    for t, (a, b) in enumerate(zip(first, second, strict=True)):
        for x, y in zip(a, b, strict=True):
            _require(
                np.array_equal(x, y),
                f"{spec.env_id}: two environments seeded {seed} diverge at step {t}",
            )
    ended = np.zeros(num_envs, dtype=bool)
    for entry in first[1:]:
        ended |= entry[-2] | entry[-1]
    _require(
        bool(ended.all()),
        f"{spec.env_id}: some episodes did not end within the horizon ({spec.horizon} steps)",
    )


def _observation_layout(spec) -> dict[str, tuple[tuple[int, ...], str]]:
    """What one sub-environment observes, key by key, frame-stack axis included."""
    stack = (spec.frame_stack,) if spec.frame_stack > 1 else ()
    layout = {"obs": (tuple(spec.obs_shape), spec.obs_dtype)}
    layout.update({name: (tuple(shape), dtype) for name, (shape, dtype) in spec.extra_obs.items()})
    return {key: ((*stack, *shape), dtype) for key, (shape, dtype) in layout.items()}


def check_dataset(task: Task, root: Path) -> None:
    """The dataset's frames and actions match the spec, and it reopens identically (cached)."""
    spec = task.spec
    store = task.dataset(root)
    _require(
        tuple(store.obs.shape[1:]) == tuple(spec.obs_shape),
        f"{spec.env_id}: dataset frames have shape {store.obs.shape[1:]}, spec {spec.obs_shape}",
    )
    _require(
        np.dtype(store.obs.dtype) == np.dtype(spec.obs_dtype),
        f"{spec.env_id}: dataset frames are {store.obs.dtype}, spec says {spec.obs_dtype}",
    )
    index = store.transition_indices()
    _require(len(index) > 0, f"{spec.env_id}: dataset has no transitions")
    actions = np.asarray(store.actions[index])
    if spec.action_kind == "continuous":
        _require(
            actions.shape[1:] == (spec.num_actions,)
            and bool(np.all(actions >= np.asarray(spec.action_low) - 1e-6))
            and bool(np.all(actions <= np.asarray(spec.action_high) + 1e-6)),
            f"{spec.env_id}: dataset actions of shape {actions.shape[1:]} or outside "
            f"[{spec.action_low}, {spec.action_high}]",
        )
    else:
        _require(
            actions.min() >= 0 and actions.max() < spec.num_actions,
            f"{spec.env_id}: dataset actions outside 0..{spec.num_actions - 1}",
        )
    for name, (shape, dtype) in spec.extra_obs.items():
        array = store.extras.get(name)
        _require(
            array is not None
            and tuple(array.shape) == (store.num_frames, *shape)
            and np.dtype(array.dtype) == np.dtype(dtype),
            f"{spec.env_id}: dataset lacks the extra observation {name!r} {shape} {dtype}",
        )
    again = task.dataset(root)
    _require(
        again.manifest["files"] == store.manifest["files"],
        f"{spec.env_id}: building the dataset twice gave different files (not deterministic "
        "or not cached)",
    )


def check_task(task: Task, root: Path, num_envs: int = 4, seed: int = 0) -> None:
    """Every conformance check on one task; raises ConformanceError on the first failure."""
    check_vector_env(task, num_envs=num_envs, seed=seed)
    check_dataset(task, root)


def random_store(
    spec: EnvSpec, root: Path, episodes: int = 3, length: int = 20, seed: int = 0
) -> TransitionStore:
    """A store of ``episodes`` episodes of ``length`` random frames of the task's shape
    (extra observations included) and random actions within its action space, written at
    ``root``: what a method or an architecture needs to train on a task without its data."""
    from ssilbench.data.datasets import TransitionStore

    rng = np.random.Generator(np.random.PCG64(seed))
    n = episodes * length

    def frames(shape: tuple[int, ...], dtype: str) -> np.ndarray:
        if dtype == "uint8":
            return rng.integers(0, 256, size=(n, *shape), dtype=np.uint8)
        return rng.standard_normal((n, *shape)).astype(dtype)

    if spec.action_kind == "continuous":
        low, high = np.asarray(spec.action_low), np.asarray(spec.action_high)
        actions = rng.uniform(low, high, size=(n, spec.num_actions)).astype(np.float32)
    else:
        actions = rng.integers(0, spec.num_actions, size=n)
    extras = {name: frames(shape, dtype) for name, (shape, dtype) in spec.extra_obs.items()}
    ends = np.arange(length, n + 1, length)
    return TransitionStore.write(
        root,
        frames(spec.obs_shape, spec.obs_dtype),
        actions,
        np.zeros(n, np.float32),
        ends,
        {"random_store": {"seed": seed}},
        extras=extras,
    )


def offline_context(
    spec: EnvSpec,
    folder: Path,
    *,
    episodes: int = 3,
    length: int = 20,
    seed: int = 0,
    budget: str = "1",
    stages: Iterable[Any] = (),
) -> tuple[Any, TransitionStore]:
    """A :class:`ssilbench.api.RunContext` on a :func:`random_store` of the task's shape
    written under ``folder`` (D_L the first ``budget`` demonstrations, D_U the rest), with a
    plan of ``stages`` that never evaluates, a stage cache under ``folder`` and the installed
    architectures; and the store. What a method's tests need to build its models by hand."""
    import torch

    from ssilbench.api import RunContext, StagePlan
    from ssilbench.data.split import split
    from ssilbench.plugins import load_plugins
    from ssilbench.train.memo import StageCache

    store = random_store(spec, Path(folder) / "data", episodes, length, seed)
    labeled, unlabeled = split(store, budget, 0, "demonstrations")
    plan = StagePlan(list(stages), eval_every=10**9, evaluate=lambda policy: None,
                     cache=StageCache(Path(folder) / "cache"))  # fmt: skip
    ctx = RunContext(config=None, spec=spec, labeled=labeled, unlabeled=unlabeled,
                     video_model=None, device=torch.device("cpu"), seed=0, plan=plan,
                     architectures=load_plugins().architectures.create,
                     evaluate=lambda policy: 0.0, log=lambda _: None)  # fmt: skip
    return ctx, store


def run_records(results: Path) -> list[dict[str, Any]]:
    """The runs recorded in the results folder ``results``, each a dict of its columns (JSON
    columns such as ``metrics`` and ``stages`` as text), ordered by method label."""
    import sqlite3

    db = sqlite3.connect(Path(results) / "results.sqlite")
    db.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in db.execute("SELECT * FROM runs ORDER BY method_label")]
    finally:
        db.close()


def usage_error(result: subprocess.CompletedProcess) -> str:
    """The last line of standard error, ``error: MESSAGE``, of a command that refused its
    input the way every user error is reported: exit code 2 and no traceback."""
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith("error: "), result.stderr
    return error


def cli_exit_code(*args: str) -> int:
    """Run ``ssilbench ARGS`` in this process (fast, for the many bad-input cases) and return
    its exit code (0 when it returned); read its output with pytest's ``capsys``."""
    from ssilbench.cli import main

    try:
        main(list(args))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    return 0


def imported_after(statement: str, modules: Iterable[str]) -> list[str]:
    """Which of ``modules`` a fresh interpreter has imported once it ran ``statement``
    (sorted): loading a task must import neither a simulator nor torch, so that listing and
    planning stay fast."""
    watched = sorted(modules)
    code = f"import sys\n{statement}\nprint(sorted(set({watched!r}) & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return ast.literal_eval(out.stdout.strip())


def check_stacked_paths(fast, plain, fast_inputs, plain_inputs, targets) -> None:
    """Two ``Stacked`` copies of the same networks, one on the fast path (``fast_inputs``:
    rows of its ``stacked_encode`` context) and one plain (``plain_inputs``), give the same
    outputs and the same gradients of the cross-entropy to ``targets`` (runs, batch)."""
    import torch
    import torch.nn.functional as F

    out_fast, out_plain = fast(fast_inputs), plain(plain_inputs)
    assert torch.allclose(out_fast, out_plain, atol=1e-12)
    for out in (out_fast, out_plain):
        F.cross_entropy(out.flatten(0, 1), targets.flatten()).backward()
    for a, b in zip(fast.parameters(), plain.parameters(), strict=True):
        assert a.grad.abs().sum() > 0
        assert torch.allclose(a.grad, b.grad, atol=1e-12)
