"""Sweep -> checked RunSpecs. Every mistake a user can make is found here, before any run.

Planning has two steps. :func:`resolve` is pure: names, environment options, method configs,
architectures and the step parity of every method's stages are checked, and each run's spec
gets its task's protocol fingerprint and its plugins' versions, without reading a file or
needing a simulator. :func:`prepare` then builds or verifies the datasets, checks the label
budgets against their sizes and the simulators the rollouts need, and gives each spec its
dataset's fingerprint. A sweep either starts with every run well-formed or stops with one
clear message and nothing recorded. A worker needs nothing but the prepared specs: it
rebuilds what it needs from them with :meth:`SweepPlan.of`.
"""

from __future__ import annotations

import json
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ssilbench.api import ARCHITECTURE, Environment, EnvSpec, Method, OptionsOf, Stage, Task
from ssilbench.data.datasets import DatasetNotBuilt, TransitionStore, read_only, task_dataset
from ssilbench.data.split import available_items, resolve_budget
from ssilbench.errors import (
    ConfigError,
    DatasetError,
    PreflightError,
    SsilbenchError,
    UsageError,
    did_you_mean,
    unknown,
)
from ssilbench.planning.problems import Problem, describe_problems
from ssilbench.planning.protocol import experiment
from ssilbench.planning.values import run_options, validate_model
from ssilbench.plugins import Plugins
from ssilbench.registry import split_env_id
from ssilbench.runs.identity import (
    dataset_fingerprint,
    plugin_code,
    plugin_versions,
    protocol_fingerprint,
)
from ssilbench.runs.spec import (
    SPEC_VERSION,
    RunSpec,
    Sweep,
)
from ssilbench.stages import StepParityError, check_stages


def architecture_options_fields(config_model: type[BaseModel]) -> dict[str, str]:
    """Config fields marked :class:`~ssilbench.api.OptionsOf` -> the architecture field
    whose options they hold."""
    hints = typing.get_type_hints(config_model, include_extras=True)
    return {
        name: marker.field
        for name in config_model.model_fields
        for marker in getattr(hints.get(name), "__metadata__", ())
        if isinstance(marker, OptionsOf)
    }


def architecture_fields(config_model: type[BaseModel]) -> list[str]:
    hints = typing.get_type_hints(config_model, include_extras=True)
    return [
        name
        for name in config_model.model_fields
        if ARCHITECTURE in getattr(hints.get(name), "__metadata__", ())
    ]


@dataclass
class TaskInfo:
    """One configured task with its dataset (shared by all runs on it). The dataset is None
    until :func:`prepare` opens it, and stays None in a plan prepared with
    ``datasets="read"`` (a dry run) where it is not built yet."""

    env: str
    options: BaseModel
    task: Task
    dataset: TransitionStore | None = None
    unavailable: DatasetError | None = None
    """Why a dry run has no dataset for the task: DatasetNotBuilt (a run builds it) or the
    error a run would stop with (not imported, damaged)."""
    environment: Environment | None = None
    """The family the task belongs to (what it publishes for download, for the messages)."""

    @property
    def spec(self) -> EnvSpec:
        return self.task.spec


@dataclass
class MethodInfo:
    name: str
    cls: type[Method]
    config: BaseModel


@dataclass
class SweepPlan:
    """Checked runs plus the resolved objects a worker needs for them."""

    runs: list[RunSpec]
    tasks: dict[str, TaskInfo] = field(default_factory=dict)
    methods: dict[str, MethodInfo] = field(default_factory=dict)  # by method_key
    stages: dict[str, list[Stage]] = field(default_factory=dict)  # by run id
    data_root: Path | None = None  # where prepare() looked for the datasets
    notes: list[str] = field(default_factory=list)
    """What planning chose for the user (a family's paper protocol), to say before it runs."""

    @staticmethod
    def task_key(spec: RunSpec) -> str:
        return spec.env + json.dumps(spec.options, sort_keys=True)

    @staticmethod
    def task_key_of(task: TaskInfo) -> str:
        """:meth:`task_key` of a resolved task."""
        return task.env + json.dumps(task.options.model_dump(mode="json"), sort_keys=True)

    @staticmethod
    def method_key(name: str, config: dict[str, Any]) -> str:
        return name + json.dumps(config, sort_keys=True)

    def task_of(self, spec: RunSpec) -> TaskInfo:
        return self.tasks[self.task_key(spec)]

    def method_of(self, spec: RunSpec) -> MethodInfo:
        return self.methods[self.method_key(spec.method, spec.config)]

    def extend(self, other: SweepPlan) -> None:
        """Add another plan's runs (a sweep file's blocks become one plan); runs that both
        contain are kept once."""
        seen = {spec.run_id for spec in self.runs}
        self.runs += [spec for spec in other.runs if spec.run_id not in seen]
        for key, task in other.tasks.items():
            if self.tasks.get(key) is None or self.tasks[key].dataset is None:
                self.tasks[key] = task
        self.methods.update(other.methods)
        self.stages.update(other.stages)
        self.notes += [note for note in other.notes if note not in self.notes]

    @classmethod
    def of(cls, plugins: Plugins, specs: list[RunSpec]) -> SweepPlan:
        """The plan of runs given as specs alone (what a worker receives): their methods,
        tasks and stages, rebuilt from the specs without touching a file. A spec resolved by
        another installation (another version of a plugin, another protocol) is refused."""
        plan = cls(runs=[])
        for spec in specs:
            plan.add(plugins, spec)
        return plan

    def add(self, plugins: Plugins, spec: RunSpec) -> None:
        """Add one run given by its spec (see :meth:`of`)."""
        method_key, task_key = self.method_key(spec.method, spec.config), self.task_key(spec)
        if method_key not in self.methods:
            method_cls = plugins.methods.load(spec.method)
            config = validate_model(method_cls.Config, spec.config, f"config of '{spec.method}'")
            self.methods[method_key] = MethodInfo(spec.method, method_cls, config)
        if task_key not in self.tasks:
            family, task_name = split_env_id(spec.env)
            environment: Environment = plugins.environments.create(family)
            options = validate_model(environment.Options, spec.options, f"options of '{family}'")
            task = environment.load(task_name, options)
            self.tasks[task_key] = TaskInfo(spec.env, options, task, environment=environment)
        method, task = self.methods[method_key], self.tasks[task_key]
        _check_identity(spec, identify(plugins, method, task))
        self.stages[spec.run_id] = method.cls().stages(
            method.config, spec.steps, task.spec, task.task.video_model() is not None
        )
        self.runs.append(spec)


def expand_envs(
    plugins: Plugins, env_ids: list[str], options: dict[str, Any] | None = None
) -> list[tuple[str, str]]:
    """``(family, task)`` of each id, ``family:all`` expanded to every task. A family whose
    ``all`` depends on its options (LIBERO-10: one multitask task, or its ten tasks) has a
    method ``expand_all(options) -> task names``; ``options`` are the sweep's (None: the
    defaults). The names it returns need not be in ``tasks()``: ``load`` takes them."""
    out: list[tuple[str, str]] = []
    for env_id in env_ids:
        family, task = split_env_id(env_id)
        environment: Environment = plugins.environments.create(family)
        tasks = environment.tasks()
        chosen = tasks if task == "all" else [task]
        expand_all = getattr(environment, "expand_all", None)
        if task == "all" and expand_all is not None:
            values = validate_model(
                environment.Options, options or {}, f"options of environment '{family}'"
            )
            chosen = list(expand_all(values))
            tasks = [*tasks, *chosen]
        # What the family calls its tasks ("procgen game"), as Environment.task_kind says.
        kind = environment.task_kind if environment.task_kind != "task" else f"task of '{family}'"
        for t in chosen:
            if t not in tasks:
                raise unknown(kind, t, tasks, f" Or use '{family}:all'.")
            if (family, t) not in out:
                out.append((family, t))
    return out


def _method_config(
    name: str, cls: type[Method], sweep: Sweep, classes: list[type[Method]]
) -> BaseModel:
    """Config of one method: unscoped keys apply to every method that has them (an unscoped
    key no method of the sweep has is an error); ``method.key`` applies to that method."""
    fields = cls.Config.model_fields
    values: dict[str, Any] = {}
    for key, value in sweep.config.items():
        scope, dot, sub = key.partition(".")
        if dot:
            if scope not in sweep.methods:
                raise UsageError(
                    f"Config key '{key}' is scoped to method '{scope}', which is not in this "
                    f"sweep ({', '.join(sweep.methods)})."
                )
            if scope == name:
                values[sub] = value
        elif key in fields:
            values[key] = value
        elif not any(key in m.Config.model_fields for m in classes):
            known = sorted({f for m in classes for f in m.Config.model_fields})
            raise ConfigError(
                f"Config key '{key}' is not an option of any method in this sweep "
                f"({', '.join(sweep.methods)}).{did_you_mean(key, known)} "
                f"Valid keys: {', '.join(known) or '(none)'}."
            )
    return validate_model(cls.Config, values, f"config of method '{name}'")


def architecture_names(info: MethodInfo, spec: EnvSpec) -> list[str]:
    """The architectures the method's config names (unset fields: the task's default)."""
    return [
        getattr(info.config, f) or spec.default_arch for f in architecture_fields(info.cls.Config)
    ]


def _check_architectures(info: MethodInfo, spec: EnvSpec, plugins: Plugins) -> None:
    for fname in architecture_fields(info.cls.Config):
        arch_name = getattr(info.config, fname) or spec.default_arch
        arch = plugins.architectures.load(arch_name)
        if spec.obs_kind not in arch.input_kinds:
            raise ConfigError(
                f"Method '{info.name}': {fname}={arch_name} takes {'/'.join(arch.input_kinds)} "
                f"inputs, but {spec.env_id} gives {spec.obs_kind} observations. Choose another "
                f"architecture ({', '.join(plugins.architectures.names())})."
            )
        problem = arch().input_problem(tuple(spec.obs_shape))
        if problem:
            raise ConfigError(
                f"Method '{info.name}': {fname}={arch_name} {problem} on {spec.env_id}. "
                f"Choose another architecture ({', '.join(plugins.architectures.names())}) "
                f"with -c {fname}=NAME, or observations it takes."
            )
        if spec.action_kind not in arch.action_kinds:
            raise ConfigError(
                f"Method '{info.name}': {fname}={arch_name} predicts "
                f"{'/'.join(arch.action_kinds)} actions, but {spec.env_id} has "
                f"{spec.action_kind} actions. Leave {fname} unset for the environment's default "
                f"({spec.default_arch}) or choose an architecture for {spec.action_kind} actions."
            )
        if spec.extra_obs and not arch.unified:  # build() takes one input shape
            raise ConfigError(
                f"Method '{info.name}': {fname}={arch_name} builds networks of one input, but "
                f"{spec.env_id}'s observations also hold {', '.join(spec.extra_obs)}, which only "
                f"a unified architecture takes. Leave {fname} unset for the environment's "
                f"default ({spec.default_arch})."
            )
    for fname, target in architecture_options_fields(info.cls.Config).items():
        arch_name = getattr(info.config, target) or spec.default_arch
        arch = plugins.architectures.load(arch_name)
        options = getattr(info.config, fname)
        if arch.unified:
            checked = validate_model(arch.Options, options, f"{fname} of {arch_name}")
            arch().check(spec, checked)
        elif options:
            raise ConfigError(
                f"Method '{info.name}': {fname} apply to unified architectures only, and "
                f"{target}={arch_name} is not one; remove -c {fname}=..."
            )


def identify(plugins: Plugins, method: MethodInfo, task: TaskInfo) -> dict[str, Any]:
    """The spec fields that identify what the installed plugins make of a run: the task's
    protocol fingerprint, and the versions and code fingerprints of the plugins it uses."""
    family = task.env.split(":", 1)[0]
    used = [(plugins.methods, method.name), (plugins.environments, family)]
    used += [(plugins.architectures, a) for a in architecture_names(method, task.spec)]
    return {"protocol": protocol_fingerprint(task.spec), "plugins": plugin_versions(used),
            "code": plugin_code(used)}  # fmt: skip


def _check_identity(spec: RunSpec, here: dict[str, Any]) -> None:
    if spec.version != SPEC_VERSION:
        raise ConfigError(
            f"Run {spec.run_id} was planned by spec version {spec.version}, and this "
            f"installation plans version {SPEC_VERSION}: plan the sweep again here."
        )
    for name, value in here.items():
        if getattr(spec, name) != value:
            raise ConfigError(
                f"Run {spec.run_id} ({spec.method} on {spec.env}) was planned with {name} "
                f"{getattr(spec, name)}, but the plugins installed here give {value}: install "
                "the same plugin versions and code everywhere the sweep runs, then plan it "
                "again."
            )


def resolve(plugins: Plugins, sweep: Sweep) -> list[RunSpec]:
    """The sweep's runs, checked: names, environment options, method configs, architectures
    and the step parity of every method's stages. Pure: it reads no file and needs no
    simulator, so drawing a figure or a status from the results store can call it. Raises
    an SsilbenchError on the first problem found. The specs' ``data`` is filled in by
    :func:`prepare`."""
    return resolve_plan(plugins, sweep).runs


def resolve_plan(plugins: Plugins, sweep: Sweep) -> SweepPlan:
    """:func:`resolve`, with the methods, tasks and stages it resolved on the way."""
    plan = SweepPlan(runs=[])
    classes = [plugins.methods.load(name) for name in sweep.methods]
    methods = {
        name: MethodInfo(name, cls, _method_config(name, cls, sweep, classes))
        for name, cls in zip(sweep.methods, classes, strict=True)
    }
    for m in methods.values():
        plan.methods[SweepPlan.method_key(m.name, m.config.model_dump(mode="json"))] = m

    for family, task_name in expand_envs(plugins, sweep.envs, sweep.options):
        environment = plugins.environments.create(family)
        given = run_options(environment, family, sweep.options)
        info = _task_info(environment, family, task_name, given)
        spec = info.spec
        has_vm = info.task.video_model() is not None
        default = spec.default_steps
        budgets, seeds, steps = experiment(sweep, family, environment, default, plan.notes)
        stages = {}
        for m in methods.values():
            _check_architectures(m, spec, plugins)
            stages[m.name] = m.cls().stages(m.config, steps, spec, has_vm)
            try:
                check_stages(stages[m.name], steps, m.name)
            except StepParityError as exc:
                raise ConfigError(
                    f"{exc}. Fix the method's stage split or the step budget."
                ) from None
        seeded = [k for k in environment.seeded_options(info.options) if k not in given]
        by_seed = {seed: _task_info(environment, family, task_name,
                                    {**given, **dict.fromkeys(seeded, seed)})
                   for seed in seeds} if seeded else dict.fromkeys(seeds, info)  # fmt: skip
        for task in by_seed.values():
            plan.tasks[SweepPlan.task_key_of(task)] = task
        for method_name in sweep.methods:
            method = methods[method_name]
            identities = {id(t): identify(plugins, method, t) for t in by_seed.values()}
            for budget in budgets:
                for seed in seeds:
                    task = by_seed[seed]
                    plan.runs.append(
                        run := RunSpec(
                            method=method_name,
                            config=methods[method_name].config.model_dump(mode="json"),
                            env=task.env,
                            options=task.options.model_dump(mode="json"),
                            budget=budget,
                            seed=seed,
                            steps=steps,
                            eval_every=sweep.eval_every or spec.eval_every,
                            stop_early=sweep.stop_early,
                            rollouts=sweep.rollouts,
                            seeded=seeded,
                            **identities[id(task)],
                        )
                    )
                    plan.stages[run.run_id] = stages[method_name]
    return plan


def _task_info(
    environment: Environment, family: str, task_name: str, options: dict[str, Any]
) -> TaskInfo:
    """The task ``family:task_name`` with ``options`` validated and applied."""
    values = validate_model(environment.Options, options, f"options of environment '{family}'")
    return TaskInfo(f"{family}:{task_name}", values, environment.load(task_name, values),
                    environment=environment)  # fmt: skip


def prepare(plan: SweepPlan, data_root: Path, datasets: str = "prepare") -> SweepPlan:
    """Open (building or verifying where needed) the dataset of every task of a resolved
    plan, check the label budgets against the datasets' sizes and the simulators that the
    rollouts need, and fill in each spec's ``data`` fingerprint; returns the prepared plan.

    This is the sweep's preflight: every task is checked before anything is reported, so a
    sweep that lacks several things (the datasets of 16 Procgen games, an extra) says so in
    one :class:`~ssilbench.errors.PreflightError` listing each with what to do, rather than
    one per try. A single problem raises its own error, unchanged.

    ``datasets="prepare"`` builds or opens every task's dataset; ``"read"`` only opens the
    ones already there and writes nothing (a task whose dataset is not built, imported or
    readable yet gets none and the reason in ``TaskInfo.unavailable``, its runs keep ``data``
    unset, and its budgets are checked when a run prepares it)."""
    root = Path(data_root)
    problems: list[Problem] = []
    # Simulators first: a check is quick, and a missing extra is what a new user meets first.
    for key in dict.fromkeys(SweepPlan.task_key(s) for s in plan.runs if s.rollouts):
        try:
            plan.tasks[key].task.check_rollouts()
        except SsilbenchError as exc:
            problems.append(Problem("simulator", plan.tasks[key].env, exc, plan.tasks[key]))
    out = SweepPlan(runs=[], methods=dict(plan.methods), data_root=root, notes=list(plan.notes))
    for key, info in plan.tasks.items():
        dataset, unavailable = info.dataset, None
        if dataset is None:
            try:
                dataset = _dataset(info.task, root, datasets)
            except DatasetNotBuilt as exc:  # a dry run: a run would build it
                unavailable = exc
            except DatasetError as exc:
                unavailable = exc
                if datasets == "prepare":
                    problems.append(Problem("dataset", info.env, exc, info))
        out.tasks[key] = TaskInfo(info.env, info.options, info.task, dataset, unavailable,
                                  info.environment)  # fmt: skip
    checked: set[tuple[str, str]] = set()
    for spec in plan.runs:
        task = out.tasks[SweepPlan.task_key(spec)]
        if task.dataset is not None:
            if (key := (SweepPlan.task_key(spec), spec.budget)) not in checked:
                checked.add(key)
                try:
                    available = available_items(task.dataset, task.spec.budget_unit)
                    resolve_budget(spec.budget, available, task.spec.budget_unit)
                except SsilbenchError as exc:
                    problems.append(Problem("budget", task.env, exc, task))
            prepared = spec.model_copy(update={"data": dataset_fingerprint(task.dataset)})
        else:
            prepared = spec
        out.runs.append(prepared)
        out.stages[prepared.run_id] = plan.stages[spec.run_id]
    if len(problems) == 1:
        raise problems[0].error
    if problems:
        raise PreflightError(describe_problems(problems, root), [p.error for p in problems])
    return out


def open_datasets(plan: SweepPlan, data_root: Path) -> None:
    """Open, without writing anything, the datasets of a plan rebuilt from prepared specs
    (:meth:`SweepPlan.of`, in a worker), and check that each is the one its runs were planned
    on: a dataset built or imported again since then is refused, not silently used."""
    for spec in plan.runs:
        task = plan.task_of(spec)
        if task.dataset is None:
            with read_only():
                task.dataset = task.task.dataset(Path(data_root))
        found = dataset_fingerprint(task.dataset)
        if spec.data != found:
            raise DatasetError(
                f"The dataset of {spec.env} is not the one run {spec.run_id} was planned on "
                f"(fingerprint {spec.data}, found {found}): it was built or imported again "
                "since. Run the sweep again to plan its runs on the data there now."
            )


def build_plan(
    plugins: Plugins, sweep: Sweep, data_root: Path, datasets: str = "prepare"
) -> SweepPlan:
    """Resolve and prepare a sweep (see :func:`resolve` and :func:`prepare`)."""
    return prepare(resolve_plan(plugins, sweep), data_root, datasets)


def _dataset(task: Task, root: Path, datasets: str) -> TransitionStore:
    """The task's dataset; with ``datasets="read"`` opened without writing anything (one
    not built yet raises DatasetNotBuilt, one not imported or damaged a DatasetError)."""
    if datasets == "prepare":
        return task_dataset(task, root)
    with read_only():
        return task_dataset(task, root)
