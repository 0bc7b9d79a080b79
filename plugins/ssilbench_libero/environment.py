"""The ``libero10`` environment family: the ten LIBERO-10 tasks, their options, evaluation
protocols and imported demonstrations."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from ssilbench.api import (
    ChunkedControlOptions,
    DatasetError,
    Environment,
    EnvSpec,
    Normaliser,
    PluginError,
    Task,
    UsageError,
    unknown,
)
from ssilbench_libero.tasks import (
    ACTION_DIM,
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
    from ssilbench_libero.vec_env import Libero10VectorEnv

# Training length of the UVA paper's runs (step parity between methods); a LIBERO
# evaluation takes long on a CPU, so only the final policy is evaluated by default.
DEFAULT_STEPS = 50_000
NORMALISER_SOURCE = "success rate over the evaluation episodes: already 0..1"


class Libero10Options(ChunkedControlOptions):
    """Options of every LIBERO-10 task."""

    model_config = ConfigDict(extra="forbid")

    protocol: Literal["official", "uva", "smoke"] = Field(
        "official",
        description="Evaluation protocol. 'official': LIBERO's (the task's first 20 fixed "
        "initial states, 600 steps); 'uva': UVA's (3 seeded random placements, 500 steps); "
        "'smoke': 2 episodes of 20 steps, for CI.",
    )
    episodes: int | None = Field(
        None, ge=1, description="Evaluation episodes; default: the protocol's (20, 3 or 2)."
    )
    max_steps: int | None = Field(
        None, ge=1, description="Episode time limit; default: the protocol's (600, 500 or 20)."
    )
    first_init_state: int = Field(
        0, ge=0, lt=NUM_INIT_STATES,
        description="Fixed initial state of the first episode (LIBERO's evaluation: 0).",
    )  # fmt: skip
    dataset: str = Field(
        "demos",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
        description="Name of the dataset under DATA_ROOT/libero10/: the one 'data import' "
        "wrote with the same -o dataset=NAME.",
    )


def dataset_dir(root: Path, name: str, task_id: str) -> Path:
    """DATA_ROOT/libero10/<dataset>/<task>: the imported store of one task."""
    return Path(root) / "libero10" / name / task_id


class Libero10Task(Task):
    """One LIBERO-10 task with its options applied."""

    def __init__(self, task_id: str, options: Libero10Options) -> None:
        self.task = BY_ID[task_id]
        self.options = options
        self.env_id = f"libero10:{task_id}"
        self.protocol = PROTOCOLS[options.protocol]
        self.max_steps = options.max_steps or self.protocol.max_steps
        episodes = options.episodes or self.protocol.episodes
        if self.protocol.start == "init_states" and episodes > NUM_INIT_STATES:
            raise UsageError(
                f"{self.env_id}: protocol={options.protocol} starts episodes from the task's "
                f"{NUM_INIT_STATES} fixed initial states; episodes={episodes} would repeat "
                f"them. Use at most {NUM_INIT_STATES}, or -o protocol=uva for seeded starts."
            )
        self.spec = EnvSpec(
            env_id=self.env_id,
            obs_shape=IMAGE_SHAPE,
            obs_dtype="uint8",
            obs_kind="image",
            num_actions=ACTION_DIM,
            action_kind="continuous",
            action_low=(-1.0,) * ACTION_DIM,
            action_high=(1.0,) * ACTION_DIM,
            action_names=ACTION_NAMES,
            extra_obs={"wrist": (IMAGE_SHAPE, "uint8"), "proprio": ((PROPRIO_DIM,), "float32")},
            frame_stack=options.frame_stack,
            action_chunk=options.action_chunk,
            action_execute=options.action_execute,
            horizon=self.max_steps,
            eval_episodes=episodes,
            eval_every=DEFAULT_STEPS,
            action_selection="sample",
            default_steps=DEFAULT_STEPS,
            default_arch="uva",
            normaliser=Normaliser(name="success", low=0.0, high=1.0, source=NORMALISER_SOURCE),
            episode_score="return",
            budget_unit="demonstrations",
            report="final",
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
        return dataset_dir(root, self.options.dataset, self.task.id)

    def dataset(self, root: Path) -> TransitionStore:
        from ssilbench.kit import TransitionStore

        path = self.data_dir(root)
        if not path.exists():
            flag = "" if self.options.dataset == "demos" else f" -o dataset={self.options.dataset}"
            raise DatasetError(
                f"No {self.env_id} dataset '{self.options.dataset}' at {path}. LIBERO data is "
                f"never downloaded: import the LIBERO-10 HDF5 files you have with 'ssilbench "
                f"data import libero10 --from DIR --tasks {self.task.id}{flag} --data-root "
                f"{root}' (DIR holds {self.task.demo_file}; see docs/environments/libero10.md)."
            )
        return TransitionStore.open(path, verify=True)

    def check_rollouts(self) -> None:
        # Whether LIBERO is installed and a headless renderer works, without importing the
        # simulator here (the runs import it in their own processes).
        from ssilbench_libero.sim import INSTALL_HINT, libero_available, render_backend

        if not libero_available():
            raise PluginError(f"The libero10 environments need LIBERO. {INSTALL_HINT}")
        render_backend()

    def make_vec_env(self, num_envs: int, seed: int) -> Libero10VectorEnv:
        from ssilbench_libero.vec_env import Libero10VectorEnv

        return Libero10VectorEnv(
            self.task,
            num_envs,
            seed=seed,
            start=self.protocol.start,
            max_steps=self.max_steps,
            frame_stack=self.options.frame_stack,
            first_init_state=self.options.first_init_state,
        )


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

    def tasks(self) -> list[str]:
        return list(TASK_IDS)

    def load(self, task: str, options: BaseModel | None = None) -> Task:
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
        chosen = [BY_ID[t] for t in tasks] if tasks else list(TASKS)
        name = options.dataset  # type: ignore[attr-defined]
        files = locate_files(source, chosen, every=not tasks)
        # Check every file's layout before copying anything.
        plan = []
        for task in chosen:
            target = dataset_dir(root, name, task.id)
            if not already_imported(target, replace, log, f"libero10:{task.id}:"):
                plan.append((task, inspect_task_file(files[task.id], task), target))
        stores = []
        for task, layout, target in plan:
            log(f"libero10:{task.id}: {len(layout.demos)} demonstrations, {layout.frames} "
                f"frames -> {target}")  # fmt: skip
            stores.append(import_task(layout, target, log))
        return stores
