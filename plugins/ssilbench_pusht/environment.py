"""The ``pusht`` environment family: one task, ``pusht:pusht`` (``--env pusht`` expands to
it), its options, evaluation protocol and imported demonstrations."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from ssilbench.api import (
    ChunkedControlOptions,
    DatasetError,
    Environment,
    EnvSpec,
    Normaliser,
    PaperProtocol,
    Task,
    unknown,
)

if TYPE_CHECKING:
    from ssilbench.kit import TransitionStore
    from ssilbench_pusht.vec_env import PushTVectorEnv

TASKS = ("pusht",)
GYM_ID = "gym_pusht/PushT-v0"
# gymnasium's registered time limit for gym_pusht/PushT-v0; kept here so that loading a
# task (listing, planning) does not import the simulator. A test checks it against the
# registration.
MAX_EPISODE_STEPS = 300
# Episodes `ssilbench data demo pusht` records by default.
DEMO_EPISODES = 10
# Training length of the UVA paper's runs (step parity between methods).
DEFAULT_STEPS = 50_000
PROTOCOL = (
    "50 seeded episodes (seeds eval_seed + i), one per sub-environment, each up to 300 "
    "steps or until coverage > 0.95; an episode's score is the largest reward "
    "clip(coverage/0.95, 0, 1) it reached; the task's score is their mean, for the final "
    "policy (diffusion policy's and the paper's protocol)"
)
NORMALISER_SOURCE = "mean max reward clip(coverage/0.95, 0, 1) over the episodes: already 0..1"


class PushTOptions(ChunkedControlOptions):
    """Options of the Push-T task (action chunks: the paper's 16, 8 executed)."""

    model_config = ConfigDict(extra="forbid")

    # The paper's four frames are UVA's t-12, t-8, t-4, t (its history stride 4): a stack of
    # 13 holds them.
    frame_stack: int = Field(
        13, ge=1, le=32,
        description="Frames of history per observation: 13 holds the paper's UVA history "
        "(4 frames at stride 4); 4 holds 4 consecutive frames (UVA history_stride=1).",
    )  # fmt: skip

    eval_episodes: int = Field(50, ge=1, description="Seeded evaluation episodes (the paper's 50).")
    max_steps: int = Field(
        MAX_EPISODE_STEPS, ge=1, le=MAX_EPISODE_STEPS,
        description="Episode time limit; the paper's 300, lower only for smoke tests.",
    )  # fmt: skip
    dataset: str = Field(
        "demos",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
        description="Name of the dataset under DATA_ROOT/pusht/: the one 'data import' wrote "
        "with the same -o dataset=NAME.",
    )


def dataset_dir(root: Path, name: str) -> Path:
    """DATA_ROOT/pusht/<dataset>: the imported store."""
    return Path(root) / "pusht" / name


class PushTTask(Task):
    """Push-T from 96x96 pixels and the agent's position, with (x, y) target actions."""

    def __init__(self, task: str, options: PushTOptions) -> None:
        self.task = task
        self.options = options
        self.env_id = f"pusht:{task}"
        self.spec = EnvSpec(
            env_id=self.env_id,
            obs_shape=(96, 96, 3),
            obs_dtype="uint8",
            obs_kind="image",
            num_actions=2,
            action_kind="continuous",
            action_low=(0.0, 0.0),
            action_high=(512.0, 512.0),
            action_names=("x", "y"),
            extra_obs={"agent_pos": ((2,), "float32")},
            frame_stack=options.frame_stack,
            action_chunk=options.action_chunk,
            action_execute=options.action_execute,
            horizon=options.max_steps,
            eval_episodes=options.eval_episodes,
            eval_every=10_000,
            action_selection="sample",
            default_steps=DEFAULT_STEPS,
            default_arch="uva",
            normaliser=Normaliser(name="coverage", low=0.0, high=1.0, source=NORMALISER_SOURCE),
            episode_score="max_reward",
            budget_unit="demonstrations",
            report="final",
            metadata={
                "gym_id": GYM_ID,
                "obs_type": "pixels_agent_pos",
                "success": "coverage > 0.95 (info['is_success'])",
                "protocol": PROTOCOL,
                "dataset": options.dataset,
            },
        )

    def data_dir(self, root: Path) -> Path:
        return dataset_dir(root, self.options.dataset)

    def dataset(self, root: Path) -> TransitionStore:
        from ssilbench.kit import TransitionStore

        path = self.data_dir(root)
        if not path.exists():
            flag = "" if self.options.dataset == "demos" else f" -o dataset={self.options.dataset}"
            raise DatasetError(
                f"No {self.env_id} dataset '{self.options.dataset}' at {path}. Download and "
                f"import diffusion-policy's replay with 'ssilbench data download pusht{flag} "
                f"--data-root {root}', import the replay file you have with "
                f"'ssilbench data import pusht --from PATH{flag} --data-root {root}' (PATH is "
                "e.g. pusht_cchi_v7_replay.zarr), or try a small one of scripted rollouts: "
                f"'ssilbench data demo pusht --data-root {root}', then run with -o "
                "dataset=demo (see docs/environments/pusht.md).",
                path,
            )
        return TransitionStore.open(path, verify=True)

    def check_rollouts(self) -> None:
        from ssilbench_pusht.vec_env import import_gym_pusht

        import_gym_pusht()

    def make_vec_env(self, num_envs: int, seed: int) -> PushTVectorEnv:
        from ssilbench_pusht.vec_env import PushTVectorEnv

        return PushTVectorEnv(
            num_envs, seed=seed, frame_stack=self.options.frame_stack,
            max_steps=self.options.max_steps,
        )  # fmt: skip


class PushTEnvironment(Environment):
    """Push-T (gym-pusht): push the grey T onto the green goal."""

    description: ClassVar[str] = (
        "Push-T: push a T block onto its goal from 96x96 RGB and the agent's xy; continuous "
        "(x, y) targets in [0, 512]^2; score = mean max coverage reward over 50 episodes; "
        "demonstrations imported from a diffusion-policy replay zarr; needs the 'pusht' extra."
    )
    Options: ClassVar[type[BaseModel]] = PushTOptions
    task_class = PushTTask
    task_kind = "pusht task"
    # The published data `ssilbench data download pusht` fetches (package data).
    downloads: ClassVar[str | None] = "ssilbench_pusht:downloads.toml"
    # Figure 6: D_L of 10 demonstrations (about 5% of them, all in D_U without actions), 3
    # training seeds (D_L drawn again for each; the paper names no seed values: 0, 1, 2),
    # 50,000 steps.
    paper_protocol: ClassVar[PaperProtocol | None] = PaperProtocol(
        budgets=("10",),
        seeds=(0, 1, 2),
        steps=DEFAULT_STEPS,
        figure="Figure 6",
        source="the paper's Figure 6 caption and its appendix (50,000 steps)",
    )

    # A first run on `ssilbench data demo pusht`'s scripted episodes: a minute or two on a CPU.
    demo_run: ClassVar[str] = (
        "--budgets 2 --seeds 0 --steps 50 -o eval_episodes=2 -o max_steps=50 -c "
        """'arch_options={"profile": "small", "vae_steps": 20, "pretrain_steps": 20, """
        """"batch_size": 8, "vae_batch": 8}'"""
    )

    def tasks(self) -> list[str]:
        return list(TASKS)

    def write_demo(
        self,
        folder: Path,
        tasks: list[str],
        episodes: int | None = None,
        seed: int = 0,
        episode_length: int | None = None,
        log: Callable[[str], None] = print,
    ) -> Path:
        """``folder/demo.zarr``: scripted rollouts (not an expert's) in diffusion-policy's
        replay layout (``replay.make_demo_dataset``), float32 frames as the download's."""
        from ssilbench_pusht.replay import make_demo_dataset
        from ssilbench_pusht.vec_env import import_gym_pusht

        for task in tasks:
            if task not in TASKS:
                raise unknown(self.task_kind, task, TASKS)
        import_gym_pusht()  # a missing extra is said before anything is written
        path = Path(folder) / "demo.zarr"
        episodes = episodes or DEMO_EPISODES
        make_demo_dataset(path, num_episodes=episodes, seed=seed,
                          max_steps=episode_length or MAX_EPISODE_STEPS)  # fmt: skip
        log(f"pusht: {episodes} scripted episodes -> {path}")
        return path

    def import_dataset(
        self,
        source: Path,
        root: Path,
        tasks: list[str],
        options: BaseModel,
        replace: bool = False,
        log: Callable[[str], None] = print,
    ) -> list[TransitionStore]:
        from ssilbench.kit import already_imported
        from ssilbench_pusht.importer import REWARD_NOTE, import_replay, open_replay

        for task in tasks:
            if task not in TASKS:
                raise unknown(self.task_kind, task, TASKS)
        name = options.dataset  # type: ignore[attr-defined]
        target = dataset_dir(root, name)
        if already_imported(target, replace, log, f"pusht: dataset '{name}'"):
            return []
        source = Path(source)
        replay = open_replay(source)  # every header and the episode ends, before writing
        log(f"pusht: {replay.frames} frames, {len(replay.episode_ends)} episodes from "
            f"{source} -> {target}")  # fmt: skip
        producer = {
            "plugin": "ssilbench_pusht",
            "source": "import",
            "env_id": "pusht:pusht",
            "from": str(source.resolve()),
        }
        metadata: dict[str, Any] = {
            "source_file": str(source.resolve()),
            "source_format": "diffusion-policy replay zarr",
            "source_layout": replay.layout(),
            "img_dtype": str(replay.arrays["data/img"].dtype),
            "obs": "data/img as uint8 (T, 96, 96, 3); obs.agent_pos = data/state[:, :2]",
            "actions": "data/action (T, 2) float32, target (x, y) in [0, 512]^2",
            "rewards": REWARD_NOTE,
        }
        return [import_replay(replay, target, producer, metadata, log)]
