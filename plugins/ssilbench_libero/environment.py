"""The ``libero10`` environment family: the ten LIBERO-10 tasks, their options, evaluation
protocols and imported demonstrations."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ssilbench.api import (
    ChunkedControlOptions,
    DatasetError,
    Environment,
    EnvSpec,
    Normaliser,
    PaperProtocol,
    PluginError,
    Task,
    UsageError,
    unknown,
)
from ssilbench_libero.demo import DEMO_RUN
from ssilbench_libero.tasks import (
    ABSOLUTE_ACTION_HIGH,
    ABSOLUTE_ACTION_LOW,
    ABSOLUTE_ACTION_NAMES,
    ACTION_DIM,
    ACTION_LAYOUT,
    ACTION_NAMES,
    BY_BDDL,
    BY_ID,
    CAMERAS,
    IMAGE_SHAPE,
    NUM_INIT_STATES,
    PROPRIO_DIM,
    PROPRIO_LAYOUT,
    PROTOCOLS,
    SETTLE_STEPS,
    SUITE,
    TASK_IDS,
    TASKS,
)

if TYPE_CHECKING:
    from ssilbench.kit import TransitionStore
    from ssilbench_libero.episodes import EpisodeEnv
    from ssilbench_libero.vec_env import Libero10VectorEnv

# Training length of the UVA paper's runs (step parity between methods); a LIBERO
# evaluation takes long on a CPU, so only the final policy is evaluated by default.
DEFAULT_STEPS = 50_000
NORMALISER_SOURCE = "success rate over the evaluation episodes: already 0..1"
ABSOLUTE_ACTIONS_TEXT = (
    "goal position (3, metres) and goal orientation (3, axis-angle in radians), world frame, "
    "gripper (-1 open, +1 close); OSC_POSE controller with control_delta False, 20 Hz; the "
    "demonstrations' delta actions converted by replaying them"
)


class Libero10Options(ChunkedControlOptions):
    """Options of every LIBERO-10 task."""

    model_config = ConfigDict(extra="forbid")

    # The paper's four frames are UVA's t-12, t-8, t-4, t (its history stride 4): a stack of
    # 13 holds them.
    frame_stack: int = Field(
        13, ge=1, le=32,
        description="Frames of history per observation: 13 holds the paper's UVA history "
        "(4 frames at stride 4); 4 holds 4 consecutive frames (UVA history_stride=1).",
    )  # fmt: skip
    protocol: Literal["official", "paper", "uva", "smoke"] = Field(
        "paper",
        description="Evaluation protocol, per task. 'paper' (default): 10 fixed initial states "
        "per task, 600 steps (100 rollouts over the ten tasks, the paper's count); 'official': "
        "LIBERO's (the task's first 20 fixed initial states, 600 steps); 'uva': UVA's (3 seeded "
        "random placements, 500 steps); 'smoke': 2 episodes of 20 steps, for CI.",
    )
    episodes: int | None = Field(
        None, ge=1, description="Evaluation episodes; default: the protocol's (10, 20, 3 or 2)."
    )
    max_steps: int | None = Field(
        None, ge=1, description="Episode time limit; default: the protocol's (600, 500 or 20)."
    )
    first_init_state: int = Field(
        0, ge=0, lt=NUM_INIT_STATES,
        description="Fixed initial state of the first episode (LIBERO's evaluation: 0).",
    )  # fmt: skip
    multitask: bool = Field(
        True,
        description="libero10:all is one run of one model over the ten tasks, conditioned on "
        "each task's instruction (the paper's setup); false: ten per-task runs.",
    )
    tasks: tuple[str, ...] | None = Field(
        None,
        description="The tasks libero10:all covers (comma-separated ids, in suite order); "
        "unset: all ten.",
    )
    text_encoder: str | None = Field(
        None,
        description="Folder of a local CLIP text encoder (transformers format) that embeds "
        "the instructions of a multitask run; unset: condition on the task index (a learned "
        "embedding per task). Nothing is downloaded.",
    )
    text_dim: int = Field(
        512, ge=1, le=65536,
        description="Width of the text encoder's embeddings (CLIP ViT-B: 512).",
    )  # fmt: skip
    max_simulators: int = Field(
        5,
        ge=1,
        le=1000,
        description="Simulators alive at once during an evaluation: episodes are played in "
        "waves of at most this many (measured: 5 of the largest scene take 7.4 GB).",
    )
    control: Literal["delta", "absolute"] = Field(
        "delta",
        description="How the arm's OSC_POSE controller reads actions. 'delta': LIBERO's "
        "moves in [-1, 1] (the published demonstrations' actions); 'absolute': the goal pose "
        "(position in metres, axis-angle in radians, world frame; the UVA reference's), with "
        "the demonstrations' actions converted by replaying them at import (-o "
        "control=absolute on 'data import' too; stored beside the delta dataset).",
    )
    dataset: str = Field(
        "demos",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
        description="Name of the dataset under DATA_ROOT/libero10/: the one 'data import' "
        "wrote with the same -o dataset=NAME.",
    )

    @field_validator("tasks", mode="before")
    @classmethod
    def _task_ids(cls, value: object) -> object:
        if isinstance(value, str):
            value = [t.strip() for t in value.split(",") if t.strip()]
        if value is None:
            return None
        ids = list(value)  # type: ignore[call-overload]
        for t in ids:
            if t not in BY_ID:
                close = difflib.get_close_matches(str(t), TASK_IDS, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ValueError(f"unknown LIBERO-10 task {t!r}{hint} Known: {', '.join(TASK_IDS)}")
        if not ids:
            raise ValueError("tasks is empty: name at least one task, or leave it unset")
        return tuple(t for t in TASK_IDS if t in ids)  # suite order, each once


def dataset_dir(root: Path, name: str, task_id: str, control: str = "delta") -> Path:
    """DATA_ROOT/libero10/<dataset>/<task>: the imported store of one task (delta actions);
    DATA_ROOT/libero10/<dataset>/absolute/<task> with the actions converted to absolute poses,
    so that the two never stand in for each other."""
    base = Path(root) / "libero10" / name
    return base / task_id if control == "delta" else base / control / task_id


def data_flags(options: Libero10Options) -> str:
    """The -o flags a data command needs to write the dataset these options read."""
    flags = "" if options.dataset == "demos" else f" -o dataset={options.dataset}"
    return flags + ("" if options.control == "delta" else f" -o control={options.control}")


def libero_spec(env_id: str, options: Libero10Options, max_steps: int, episodes: int, *,
                extra_obs: dict, metadata: dict) -> EnvSpec:  # fmt: skip
    """The EnvSpec every LIBERO-10 task shares (cameras, 7-D actions, the success score),
    with its own id, horizon, evaluation episodes, extra observations and metadata.

    Every task's metadata also declares the action layout (``action_layout``); metadata is
    descriptive, outside the protocol fingerprint, so declaring it changed no run id."""
    metadata = {**metadata, "action_layout": {k: list(v) for k, v in ACTION_LAYOUT.items()}}
    absolute = options.control == "absolute"
    if absolute:
        # Under delta control the spec is byte-identical to before the option existed, so
        # fingerprints and run ids of delta runs are unchanged.
        # Lists of action dimensions only (what models read the layout as): the dimensions
        # that are absolute targets, the arm's pose; the gripper's command is as before.
        metadata["action_layout"]["absolute"] = [0, 1, 2, 3, 4, 5]
        metadata["control"] = "absolute"
        metadata["actions"] = ABSOLUTE_ACTIONS_TEXT
    return EnvSpec(
        env_id=env_id,
        obs_shape=IMAGE_SHAPE,
        obs_dtype="uint8",
        obs_kind="image",
        num_actions=ACTION_DIM,
        action_kind="continuous",
        action_low=ABSOLUTE_ACTION_LOW if absolute else (-1.0,) * ACTION_DIM,
        action_high=ABSOLUTE_ACTION_HIGH if absolute else (1.0,) * ACTION_DIM,
        action_names=ABSOLUTE_ACTION_NAMES if absolute else ACTION_NAMES,
        extra_obs=extra_obs,
        frame_stack=options.frame_stack,
        action_chunk=options.action_chunk,
        action_execute=options.action_execute,
        horizon=max_steps,
        eval_episodes=episodes,
        eval_every=DEFAULT_STEPS,
        action_selection="sample",
        default_steps=DEFAULT_STEPS,
        default_arch="uva",
        normaliser=Normaliser(name="success", low=0.0, high=1.0, source=NORMALISER_SOURCE),
        episode_score="return",
        budget_unit="demonstrations",
        report="final",
        metadata=metadata,
    )


class Libero10Task(Task):
    """One LIBERO-10 task with its options applied."""

    def __init__(self, task_id: str, options: Libero10Options) -> None:
        self.task = BY_ID[task_id]
        self.options = options
        self.env_id = f"libero10:{task_id}"
        self.protocol = PROTOCOLS[options.protocol]
        self.max_steps = options.max_steps or self.protocol.max_steps
        episodes = options.episodes or self.protocol.episodes
        _check_episodes(self.env_id, options.protocol, episodes)
        self.spec = libero_spec(
            self.env_id,
            options,
            self.max_steps,
            episodes,
            extra_obs={"wrist": (IMAGE_SHAPE, "uint8"), "proprio": ((PROPRIO_DIM,), "float32")},
            metadata={
                "suite": SUITE,
                "bddl": self.task.bddl,
                "scene": self.task.scene,
                "language_instruction": self.task.language,
                "cameras": dict(CAMERAS),
                "image": "128x128 RGB, rows reversed from MuJoCo's read-out (upright)",
                "proprio": list(PROPRIO_LAYOUT),
                "actions": "delta position (3), delta axis-angle (3), gripper (-1 open, "
                "+1 close); OSC_POSE controller, 20 Hz",
                "success": "LIBERO's goal predicates hold: reward 1, info['is_success'], "
                "episode terminated",
                "protocol": options.protocol,
                "protocol_description": self.protocol.description,
                "settle_steps": SETTLE_STEPS,
                "first_init_state": options.first_init_state,
                "dataset": options.dataset,
            },
        )

    def data_dir(self, root: Path) -> Path:
        return dataset_dir(root, self.options.dataset, self.task.id, self.options.control)

    def dataset(self, root: Path) -> TransitionStore:
        from ssilbench.kit import TransitionStore

        path = self.data_dir(root)
        if not path.exists():
            flag = data_flags(self.options)
            what = "" if self.options.control == "delta" else " with absolute actions"
            raise DatasetError(
                f"No {self.env_id} dataset '{self.options.dataset}'{what} at {path}. Download and "
                f"import the LIBERO-10 HDF5 files with 'ssilbench data download libero10 "
                f"--tasks {self.task.id}{flag} --data-root {root}', or import the files you "
                f"have with 'ssilbench data import libero10 --from DIR --tasks "
                f"{self.task.id}{flag} --data-root {root}' (DIR holds {self.task.demo_file}; "
                "see docs/environments/libero10.md)."
            )
        store = TransitionStore.open(path, verify=True)
        stored = store.manifest["metadata"].get("control", "delta")
        if stored != self.options.control:
            raise DatasetError(
                f"{path} holds {stored} actions, but -o control={self.options.control} asks "
                f"for {self.options.control} ones. Import it again with 'ssilbench data import "
                f"libero10 --from DIR --tasks {self.task.id}{data_flags(self.options)} "
                f"--replace --data-root {root}'."
            )
        return store

    def check_rollouts(self) -> None:
        # Whether LIBERO is installed and a headless renderer works, without importing the
        # simulator here (the runs import it in their own processes).
        from ssilbench_libero.sim import INSTALL_HINT, libero_available, render_backend

        if not libero_available():
            raise PluginError(f"The libero10 environments need LIBERO. {INSTALL_HINT}")
        render_backend()

    def make_vec_env(self, num_envs: int, seed: int) -> Libero10VectorEnv | EpisodeEnv:
        from ssilbench_libero.episodes import EpisodeEnv
        from ssilbench_libero.vec_env import Libero10VectorEnv

        settings = dict(start=self.protocol.start, max_steps=self.max_steps,
                        frame_stack=self.options.frame_stack,
                        first_init_state=self.options.first_init_state,
                        control=self.options.control)  # fmt: skip
        if num_envs <= self.options.max_simulators:
            return Libero10VectorEnv(self.task, num_envs, seed=seed, **settings)  # type: ignore[arg-type]
        # More episodes than simulators may be alive: the evaluator plays them in waves.
        return EpisodeEnv([self.task], num_envs, seed, max_alive=self.options.max_simulators,
                          **settings)  # type: ignore[arg-type]  # fmt: skip


def _check_episodes(env_id: str, protocol: str, episodes: int) -> None:
    """Fixed initial states run out after 50 episodes of a task."""
    if PROTOCOLS[protocol].start == "init_states" and episodes > NUM_INIT_STATES:
        raise UsageError(
            f"{env_id}: protocol={protocol} starts episodes from the task's "
            f"{NUM_INIT_STATES} fixed initial states; episodes={episodes} would repeat "
            f"them. Use at most {NUM_INIT_STATES}, or -o protocol=uva for seeded starts."
        )


class Libero10Multitask(Task):
    """``libero10:all`` as one task: one model over the ten tasks, each frame conditioned on
    its task's instruction (``language``: CLIP embeddings from a local encoder, or the task's
    one-hot index); D_L is N_L demonstrations per task, evaluation covers every task."""

    def __init__(self, options: Libero10Options) -> None:
        self.options = options
        self.env_id = "libero10:all"
        self.tasks = [BY_ID[t] for t in options.tasks or TASK_IDS]
        self.task_ids = [t.id for t in self.tasks]
        self.protocol = PROTOCOLS[options.protocol]
        self.max_steps = options.max_steps or self.protocol.max_steps
        self.per_task = options.episodes or self.protocol.episodes
        _check_episodes(self.env_id, options.protocol, self.per_task)
        language = bool(options.text_encoder)
        dim = options.text_dim if language else len(self.tasks)
        self.conditioning = {
            "key": "language",
            "kind": "clip" if language else "task_index",
            "dim": dim,
            "encoder": options.text_encoder or None,
        }
        self._embeddings: np.ndarray | None = None
        self.spec = libero_spec(
            self.env_id,
            options,
            self.max_steps,
            self.per_task * len(self.tasks),
            extra_obs={
                "wrist": (IMAGE_SHAPE, "uint8"),
                "proprio": ((PROPRIO_DIM,), "float32"),
                "language": ((dim,), "float32"),
            },  # fmt: skip
            metadata={
                "suite": SUITE,
                "multitask": True,
                "tasks": self.task_ids,
                "language_instructions": [t.language for t in self.tasks],
                "conditioning": self.conditioning,
                "cameras": dict(CAMERAS),
                "proprio": list(PROPRIO_LAYOUT),
                "budget": "N_L demonstrations per task (D_L), every demonstration in D_U",
                "protocol": options.protocol,
                "protocol_description": self.protocol.description
                + f"; per task, {self.per_task * len(self.tasks)} episodes in all",
                "episodes_per_task": self.per_task,
                "settle_steps": SETTLE_STEPS,
                "first_init_state": options.first_init_state,
                "dataset": options.dataset,
            },
        )

    def embeddings(self, root: Path | None = None) -> np.ndarray:
        """The conditioning table (10, dim), computed once (cached in the dataset folder
        under ``root`` when given)."""
        if self._embeddings is None:
            from ssilbench_libero.language import task_embeddings

            cache = Path(root) / "libero10" / self.options.dataset if root is not None else None
            self._embeddings = task_embeddings(
                [t.language for t in self.tasks], self.options.text_encoder,
                self.options.text_dim, cache,
            )  # fmt: skip
        return self._embeddings

    def dataset(self, root: Path) -> TransitionStore:
        from ssilbench_libero.multitask import open_multitask

        missing = [t.id for t in self.tasks
                   if not dataset_dir(root, self.options.dataset, t.id,
                                      self.options.control).exists()]  # fmt: skip
        if missing:
            flag = data_flags(self.options)
            raise DatasetError(
                f"libero10:all trains one model on the ten tasks, but {len(missing)} of them "
                f"are not imported into dataset '{self.options.dataset}' under {root}: "
                f"{', '.join(missing)}. Download and import them with 'ssilbench data download "
                f"libero10{flag} --data-root {root}', or import the HDF5 files you have with "
                f"'ssilbench data import libero10 --from DIR{flag} --data-root {root}' (see "
                "docs/environments/libero10.md), or run tasks one by one with "
                "-o multitask=false."
            )
        single = self.options.model_copy(update={"multitask": False})
        stores = [Libero10Task(t.id, single).dataset(root) for t in self.tasks]
        # The joined store is named by the folder its task stores lie in (the absolute ones
        # in <dataset>/absolute); the language cache stays in <dataset> for both controls.
        folder = dataset_dir(root, self.options.dataset, "", self.options.control)
        return open_multitask(stores, self.task_ids, self.embeddings(root),
                              {k: v for k, v in self.conditioning.items() if k != "encoder"},
                              folder)  # fmt: skip

    def check_rollouts(self) -> None:
        Libero10Task(self.task_ids[0], self.options).check_rollouts()

    def make_vec_env(self, num_envs: int, seed: int) -> EpisodeEnv:
        from ssilbench_libero.episodes import EpisodeEnv

        return EpisodeEnv(self.tasks, num_envs, seed, start=self.protocol.start,
                          max_steps=self.max_steps, frame_stack=self.options.frame_stack,
                          first_init_state=self.options.first_init_state,
                          language=self.embeddings(), max_alive=self.options.max_simulators,
                          names=self.task_ids, control=self.options.control)  # fmt: skip


class Libero10Environment(Environment):
    """LIBERO-10 (LIBERO-Long): ten long-horizon tasks of the LIBERO benchmark."""

    description: ClassVar[str] = (
        "LIBERO-10: ten long-horizon manipulation tasks, 128x128 agent-view + wrist cameras "
        "and proprioception, 7-D actions in [-1, 1], success rate; HDF5 demonstrations "
        "imported; needs the 'libero' extra."
    )
    Options: ClassVar[type[BaseModel]] = Libero10Options
    task_class = Libero10Task
    task_kind = "libero10 task"
    # The published data `ssilbench data download libero10` fetches (package data).
    downloads: ClassVar[str | None] = "ssilbench_libero:downloads.toml"
    # Figure 6: D_L of 2 demonstrations per task (about 5%, all in D_U without actions), 3
    # training seeds (D_L drawn again for each; no seed values given: 0, 1, 2), 50,000 steps.
    paper_protocol: ClassVar[PaperProtocol | None] = PaperProtocol(
        budgets=("2",),
        seeds=(0, 1, 2),
        steps=DEFAULT_STEPS,
        figure="Figure 6",
        source="the paper's Figure 6 caption and its appendix (50,000 steps)",
    )

    demo_run: ClassVar[str] = DEMO_RUN

    def tasks(self) -> list[str]:
        return list(TASK_IDS)

    def write_demo(self, folder: Path, tasks: list[str], episodes: int | None = None,
                   seed: int = 0, episode_length: int | None = None,
                   log: Callable[[str], None] = print) -> Path:  # fmt: skip
        from ssilbench_libero.demo import write_demo

        return write_demo(folder, tasks, episodes, seed, episode_length, log)

    def expand_all(self, options: BaseModel) -> list[str]:
        """``libero10:all``: the multitask task, or the ten tasks with multitask=false."""
        if options.multitask:  # type: ignore[attr-defined]
            return ["all"]
        return list(options.tasks or TASK_IDS)  # type: ignore[attr-defined]

    def load(self, task: str, options: BaseModel | None = None) -> Task:
        if task == "all":
            return Libero10Multitask(self.options_of(options))  # type: ignore[arg-type]
        if task in BY_BDDL and task not in BY_ID:
            hint = f" ('{task}' is LIBERO's name of libero10:{BY_BDDL[task].id}.)"
            raise unknown(self.task_kind, task, TASK_IDS, hint)
        return super().load(task, options)

    def import_dataset(
        self,
        source: Path,
        root: Path,
        tasks: list[str],
        options: BaseModel,
        replace: bool = False,
        log: Callable[[str], None] = print,
    ) -> list[TransitionStore]:
        from ssilbench.kit import already_imported, import_source
        from ssilbench_libero.importer import import_task, inspect_task_file, locate_files

        source = import_source(
            source, "the LIBERO-10 files <task>_demo.hdf5 (the download's libero_10/)."
        )
        # 'all' (the multitask task's name) stands for every task here.
        chosen = [BY_ID[t] for t in tasks] if tasks and "all" not in tasks else list(TASKS)
        name = options.dataset  # type: ignore[attr-defined]
        files = locate_files(source, chosen, every=not tasks or "all" in tasks)
        # Check every file's layout before copying anything.
        plan = []
        control = options.control  # type: ignore[attr-defined]
        absolute = control == "absolute"
        for task in chosen:
            target = dataset_dir(root, name, task.id, control)
            if not already_imported(target, replace, log, f"libero10:{task.id}:"):
                plan.append((task, inspect_task_file(files[task.id], task, states=absolute),
                             target))  # fmt: skip
        stores = []
        for task, layout, target in plan:
            log(
                f"libero10:{task.id}: {len(layout.demos)} demonstrations, {layout.frames} "
                f"frames -> {target}" + (" (absolute actions, replayed)" if absolute else "")
            )
            stores.append(import_task(layout, target, log, control=control))
        return stores
