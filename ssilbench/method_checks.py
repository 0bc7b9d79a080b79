"""Conformance of a method (``ssilbench.testing.check_method``): what every comparison in
the suite relies on, checked on one task with a tiny budget.

- Its stages add up to the step budget (step parity), with unique names, and the fit
  spends exactly the steps each stage declares.
- The same seed gives the same policy: two fits of one run act identically, and a
  discrete-action policy gives the same action probabilities, bit for bit (a greedy action
  on a few observations can agree by chance where the weights differ).
- A method that stacks runs (``batched = True``) gives each run of a stacked fit the
  policy it gets alone (the same actions and probabilities).
- ``act`` returns actions of the task's action space (integers below ``num_actions``; or
  vectors, or chunks of them, within the bounds), which the task's vector environment
  takes.

Runs are set up exactly as a sweep sets them up (:func:`ssilbench.runner.worker.set_up_run`:
the split, the stage plan, the context), without a stage cache (each fit trains) and
without rollouts (the evaluations score the test set only, where the task has one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from ssilbench.api import Method, Policy, Task, TransitionStore
from ssilbench.conformance import ConformanceError
from ssilbench.errors import SsilbenchError


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConformanceError(message)


def check_method(
    method: Method | type[Method],
    task: Task,
    root: Path,
    *,
    config: dict[str, Any] | None = None,
    steps: int = 12,
    budget: str = "8",
    seeds: tuple[int, int] = (0, 1),
    data: TransitionStore | None = None,
    plugins: Any = None,
) -> None:
    """Check ``method`` (an instance or its class) on ``task`` with runs of ``steps`` steps
    at label budget ``budget`` and two ``seeds``; raise :class:`ConformanceError`
    naming the first property that fails. ``config``: the method's config values (the rest
    are its defaults). The data: ``data``, or the task's dataset under ``root``
    (``ssilbench.testing.random_store(task.spec, folder)`` gives one of the task's shape).
    ``plugins``: where architectures are looked up (default: the installed plugins)."""
    from ssilbench.planning.plan import MethodInfo, TaskInfo
    from ssilbench.planning.values import validate_model
    from ssilbench.plugins import load_plugins
    from ssilbench.stages import StepParityError, check_stages

    cls = method if isinstance(method, type) else type(method)
    name = cls.__name__
    cfg = validate_model(cls.Config, config or {}, f"config of method '{name}'")
    plugins = plugins if plugins is not None else load_plugins()
    info = MethodInfo(name, cls, cfg)
    store = data if data is not None else task.dataset(Path(root))
    task_info = TaskInfo(task.spec.env_id, None, task, store)
    has_vm = task.video_model() is not None
    try:
        check_stages(cls().stages(cfg, steps, task.spec, has_vm), steps, name)
    except StepParityError as exc:
        raise ConformanceError(str(exc)) from None

    def fit(seeds_: tuple[int, ...], stacked: bool) -> list[Policy]:
        runs = [_set_up(info, task_info, plugins, budget, s, steps) for s in seeds_]
        try:
            contexts = [r.ctx for r in runs]
            policies = cls().fit_many(contexts) if stacked else [cls().fit(contexts[0])]
            _require(
                len(policies) == len(runs),
                f"{name}.fit_many returned {len(policies)} policies for {len(runs)} runs",
            )
            for run in runs:
                try:
                    run.ctx.plan.check_spent()
                except (StepParityError, SsilbenchError) as exc:
                    raise ConformanceError(f"{name}: {exc}") from None
        finally:
            for run in runs:
                run.abort()
        return policies

    first, again = fit(seeds[:1], False)[0], fit(seeds[:1], False)[0]
    observations = _observations(task, seeds[0])
    actions = _actions(first, observations, task)
    _require(
        _same_policy(first, again, observations, task),
        f"{name}: two fits of the same run (seed {seeds[0]}) act differently: build networks "
        "inside ctx.seeded() and draw randomness from ctx.generator(NAME) / "
        "ctx.stream_seed(NAME)",
    )
    _check_valid(actions, task, name)
    if cls.batched:
        other = fit(seeds[1:2], False)[0]
        stacked = fit(seeds[:2], True)
        for seed, lone, together in zip(seeds[:2], [first, other], stacked, strict=True):
            _require(
                _same_policy(lone, together, observations, task),
                f"{name}: the run of seed {seed} acts differently fitted alone and stacked "
                "with another run (fit_many): a run's result must not depend on its unit",
            )


def _set_up(info, task_info, plugins, budget: str, seed: int, steps: int):
    from ssilbench.runner.worker import set_up_run
    from ssilbench.runs.spec import RunSpec

    spec = RunSpec(method=info.name, config=info.config.model_dump(mode="json"),
                   env=task_info.env, options={}, budget=budget, seed=seed, steps=steps,
                   eval_every=steps, rollouts=False)  # fmt: skip
    return set_up_run(spec, info, task_info, plugins, torch.device("cpu"), overlap_eval=False)


def _observations(task: Task, seed: int, num_envs: int = 4):
    """What a rollout's policy sees first: the reset observations of the task's vector
    environment, as model input."""
    from ssilbench.eval.rollout import observation_input

    venv = task.make_vec_env(num_envs, seed=seed)
    try:
        obs, _ = venv.reset(seed=seed)
    finally:
        venv.close()
    return observation_input(obs, torch.device("cpu"))


def _actions(policy: Policy, observations, task: Task) -> torch.Tensor:
    greedy = task.spec.action_selection == "greedy"
    generator = torch.Generator().manual_seed(0)
    out = policy.act(observations, greedy=greedy, generator=generator)
    return torch.as_tensor(out).detach().cpu()


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b))


def _probs(policy: Policy, observations) -> torch.Tensor:
    with torch.no_grad():
        return torch.as_tensor(policy.probs(observations)).detach().cpu()


def _same_policy(a: Policy, b: Policy, observations, task: Task) -> bool:
    """The two policies act alike on ``observations`` and, with discrete actions, give the
    same probabilities: any difference in their weights shows there, where the argmax of a
    few observations can hide it."""
    if not _same(_actions(a, observations, task), _actions(b, observations, task)):
        return False
    if task.spec.action_kind != "discrete":
        return True  # continuous actions are compared as floats already
    return _same(_probs(a, observations), _probs(b, observations))


def _check_valid(actions: torch.Tensor, task: Task, name: str) -> None:
    """The actions fit the task's action space, and its vector environment takes them."""
    spec, n = task.spec, 4
    if spec.action_kind == "discrete":
        _require(
            not actions.is_floating_point() and tuple(actions.shape) == (n,),
            f"{name}: act gave {actions.dtype} actions of shape {tuple(actions.shape)}; "
            f"{spec.env_id} wants {n} integers",
        )
        _require(
            bool(((actions >= 0) & (actions < spec.num_actions)).all()),
            f"{name}: act gave actions outside 0..{spec.num_actions - 1}: {actions.tolist()}",
        )
        first = actions.numpy()
    else:
        shapes = [(n, spec.num_actions)] + (
            [(n, spec.action_chunk, spec.num_actions)] if spec.action_chunk > 1 else []
        )
        _require(
            actions.is_floating_point() and tuple(actions.shape) in shapes,
            f"{name}: act gave {actions.dtype} actions of shape {tuple(actions.shape)}; "
            f"{spec.env_id} wants floats of shape {' or '.join(map(str, shapes))}",
        )
        low, high = np.asarray(spec.action_low), np.asarray(spec.action_high)
        values = actions.numpy()
        inside = (values >= low - 1e-6) & (values <= high + 1e-6)
        _require(
            bool(np.isfinite(values).all() and inside.all()),
            f"{name}: act gave actions outside [{spec.action_low}, {spec.action_high}]",
        )
        first = (values[:, 0] if values.ndim == 3 else values).astype(np.float32)
    venv = task.make_vec_env(n, seed=0)
    try:
        venv.reset(seed=0)
        venv.step(first)
    except Exception as exc:  # noqa: BLE001 - the environment's refusal is the finding
        raise ConformanceError(
            f"{name}: {spec.env_id}'s vector environment refuses the actions act gave: "
            f"{type(exc).__name__}: {exc}"
        ) from None
    finally:
        venv.close()
