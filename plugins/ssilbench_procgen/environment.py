"""The ``procgen`` environment family: 16 games, their options, datasets and experts."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from ssilbench.api import (
    DatasetError,
    Environment,
    EnvSpec,
    PaperProtocol,
    Task,
    TestSet,
    UsageError,
    unknown,
)
from ssilbench_procgen.expert_config import ExpertConfig
from ssilbench_procgen.games import (
    ACTION_NAMES,
    GAMES,
    HORIZON,
    MAX_DATA_CHUNKS,
    NUM_ACTIONS,
    OBS_SHAPE,
    complexity,
)
from ssilbench_procgen.normalisers import declared, for_dataset

if TYPE_CHECKING:
    import torch

    from ssilbench.kit import TransitionStore
    from ssilbench_procgen.vec_env import ProcgenVectorEnv

# The paper trains every method for 120,000 gradient steps (step parity).
DEFAULT_STEPS = 120_000
# Seeded sample of the test split used for offline diagnostics: 2 x 12 KiB per transition
# as uint8, four times that as float on the device.
_TEST_SAMPLE_SEED = 0
_COLLECT_ENVS = 16
_TEST_SEED_OFFSET = 1_000_003
_RANDOM_SEED_OFFSET = 2_000_003
# Episodes of a uniform-random policy 'data collect' measures, as an evaluation scores.
RANDOM_EPISODES = 64


class ProcgenOptions(BaseModel):
    """Options of every Procgen game."""

    model_config = ConfigDict(extra="forbid")

    distribution_mode: Literal["easy", "hard"] = Field(
        "easy", description="Procgen's level distribution; the paper uses easy."
    )
    num_levels: int = Field(
        0, ge=0, description="Levels evaluation draws from; 0 means unlimited (the paper's)."
    )
    start_level: int = Field(
        54321, ge=0, description="First level seed for evaluation (54321 in the paper's code)."
    )
    normaliser: Literal["lapo", "dataset", "lapo_table", "procgen"] = Field(
        "lapo",
        description="'lapo': (R - random)/(expert - random), the paper's (easy mode only), "
        "expert being the return 'data collect' recorded for a dataset collected here and "
        "LAPO's table for the paper's data; 'dataset': the recorded return only; "
        "'lapo_table': LAPO's table whatever the data; 'procgen': (R - Rmin)/(Rmax - Rmin) "
        "of Cobbe et al. 2020.",
    )
    dataset: str = Field(
        "expert",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
        description="Name of the dataset under DATA_ROOT/procgen/: the one 'data import' or "
        "'data collect' wrote with the same -o dataset=NAME.",
    )
    test_transitions: int = Field(
        1024,
        ge=0,
        description="Transitions sampled from the dataset's test split for offline "
        "diagnostics (accuracy, entropies); 0: none.",
    )
    eval_levels: Literal["fresh", "fixed"] = Field(
        "fresh",
        description="'fresh': new levels at every evaluation, seeded by the run's seed and the "
        "evaluation's step (the reference builds a new env, unseeded, per evaluation); "
        "'fixed': the same levels at every evaluation.",
    )
    eval_counting: Literal["first_to_finish", "first_per_env"] = Field(
        "first_to_finish",
        description="'first_to_finish': the first 64 episodes to end across the 64 envs (the "
        "reference's); 'first_per_env': each env's first episode, played to its end.",
    )
    transitions: Literal["across_episodes", "within_episodes"] = Field(
        "across_episodes",
        description="'across_episodes': every pair of consecutive frames, episode ends too "
        "(the reference's loader); 'within_episodes': pairs inside an episode only.",
    )
    max_chunks: int = Field(
        MAX_DATA_CHUNKS,
        ge=0,
        description="Chunks of each split 'data import' copies, the first in numbered order "
        "(the reference's MAX_DATA_CHUNKS, 80); 0: every chunk. A run checks its dataset's.",
    )


def dataset_dir(root: Path, name: str, game: str) -> Path:
    """DATA_ROOT/procgen/<dataset>/<game>: holds the ``train`` and ``test`` stores."""
    return Path(root) / "procgen" / name / game


class ProcgenTask(Task):
    """One Procgen game with its options applied."""

    def __init__(self, game: str, options: ProcgenOptions) -> None:
        self.game = game
        self.options = options
        self.env_id = f"procgen:{game}"
        self._data_dir: Path | None = None
        self.spec = EnvSpec(
            env_id=self.env_id,
            obs_shape=OBS_SHAPE,
            obs_dtype="uint8",
            obs_kind="image",
            num_actions=NUM_ACTIONS,
            action_names=ACTION_NAMES,
            horizon=HORIZON,
            eval_episodes=64,
            eval_every=500,
            eval_starts=options.eval_levels,
            eval_counting=options.eval_counting,
            action_selection="sample",
            default_steps=DEFAULT_STEPS,
            default_arch="impala",
            normaliser=declared(game, options),
            report="max",
            metadata={
                "complexity": complexity(game),
                "distribution_mode": options.distribution_mode,
                "num_levels": options.num_levels,
                "start_level": options.start_level,
                "dataset": options.dataset,
            },
        )

    # --- data -------------------------------------------------------------------------

    def data_dir(self, root: Path) -> Path:
        return dataset_dir(root, self.options.dataset, self.game)

    def dataset(self, root: Path) -> TransitionStore:
        from ssilbench.kit import TransitionStore

        folder = self.data_dir(root)
        train = folder / "train"
        if not train.exists():
            flag = "" if self.options.dataset == "expert" else f" -o dataset={self.options.dataset}"
            raise DatasetError(
                f"No {self.env_id} dataset '{self.options.dataset}' at {train}. Download and "
                f"import the paper's data with 'ssilbench data download procgen --games "
                f"{self.game}{flag} --data-root {root}', import a copy you have with "
                f"'ssilbench data import procgen --from DIR --games {self.game}{flag} "
                f"--data-root {root}', or "
                f"collect one from an expert with "
                f"'ssilbench data collect {self.env_id} --policy CHECKPOINT --frames N{flag} "
                f"--data-root {root}' (see docs/environments/procgen.md)."
            )
        opened = TransitionStore.open(train, verify=True)
        store = self._as_read(opened, root)
        # The dataset decides the normaliser a run scores with (its own expert's return
        # where it was collected here); the protocol fingerprint was taken before, from
        # the declared one, and the data fingerprint names the dataset.
        normaliser = for_dataset(self.game, self.options, opened.manifest)
        self.spec = self.spec.model_copy(update={"normaliser": normaliser})
        self._data_dir = folder
        return store

    def _as_read(self, store: TransitionStore, root: Path) -> TransitionStore:
        """The split as the options read it: its chunks checked, its transitions chosen."""
        from ssilbench_procgen.protocol import check_chunks, read_as

        options = self.options
        check_chunks(store, options.max_chunks, self.game, options.dataset, root)
        return read_as(store, options.transitions)

    def test_store(self) -> TransitionStore | None:
        """The held-out test split of the opened dataset, where it has one."""
        from ssilbench.kit import TransitionStore

        if self._data_dir is None or not (self._data_dir / "test").exists():
            return None
        root = self._data_dir.parent.parent.parent
        return self._as_read(TransitionStore.open(self._data_dir / "test", verify=True), root)

    def test_set(self) -> TestSet | None:
        """A seeded sample of the test split's transitions (s, a, s'), for test accuracy and
        the policy's and IDM's entropies; None before :meth:`dataset` or without a split."""
        import numpy as np

        if self.options.test_transitions == 0:
            return None
        store = self.test_store()
        if store is None or store.num_transitions == 0:
            return None
        index = store.transition_indices()
        count = min(self.options.test_transitions, len(index))
        rng = np.random.Generator(np.random.PCG64(_TEST_SAMPLE_SEED))
        chosen = np.sort(rng.choice(index, size=count, replace=False))
        return TestSet(
            obs=np.asarray(store.obs[chosen]),
            actions=np.asarray(store.actions[chosen]),
            next_obs=np.asarray(store.obs[chosen + 1]),
        )

    def check_rollouts(self) -> None:
        from ssilbench_procgen.vec_env import import_procgen

        import_procgen()

    def make_vec_env(self, num_envs: int, seed: int) -> ProcgenVectorEnv:
        from ssilbench_procgen.vec_env import ProcgenVectorEnv

        return ProcgenVectorEnv(
            self.game,
            num_envs,
            seed=seed,
            distribution_mode=self.options.distribution_mode,
            num_levels=self.options.num_levels,
            start_level=self.options.start_level,
        )

    def _training_env(self) -> Callable[[int, int], Any]:
        """Experts train and collect on unlimited levels from 0: the evaluation levels
        (from ``start_level``) are drawn from the same distribution, not replayed."""
        from ssilbench_procgen.vec_env import ProcgenVectorEnv

        def make(num_envs: int, seed: int) -> ProcgenVectorEnv:
            return ProcgenVectorEnv(self.game, num_envs, seed=seed,
                                    distribution_mode=self.options.distribution_mode)  # fmt: skip

        return make

    # --- experts and collected data -----------------------------------------------------

    ExpertConfig: ClassVar[type[BaseModel] | None] = ExpertConfig

    def train_expert(
        self,
        config: BaseModel,
        out: Path,
        device: torch.device | None = None,
        log: Callable[[str], None] = print,
    ) -> Path:
        import torch

        from ssilbench_procgen import ppo

        ppo.train(
            self._training_env(),
            self.env_id,
            config,  # type: ignore[arg-type]
            Path(out),
            device or torch.device("cpu"),
            log,
            extra={"distribution_mode": self.options.distribution_mode},
        )
        return Path(out)

    def collect_dataset(
        self,
        policy: Path,
        frames: int,
        root: Path,
        seed: int = 0,
        replace: bool = False,
        device: torch.device | None = None,
        log: Callable[[str], None] = print,
        test_frames: int = 0,
    ) -> TransitionStore:
        import torch

        from ssilbench.kit import sha256_file
        from ssilbench_procgen.collect import collect_rollouts, measure_random
        from ssilbench_procgen.ppo import load_expert
        from ssilbench_procgen.vec_env import import_procgen

        if frames < 2:
            raise UsageError(f"--frames must be at least 2, got {frames}.")
        model, payload = load_expert(Path(policy), self.env_id)
        import_procgen()
        path = self.data_dir(root) / "train"
        if path.exists() and not replace:
            raise UsageError(
                f"{path} already holds a dataset; add --replace to overwrite it, or choose "
                "another name with -o dataset=NAME."
            )
        producer = {
            "plugin": "ssilbench_procgen",
            "source": "collect",
            "env_id": self.env_id,
            "policy": str(policy),
            "policy_sha256": sha256_file(Path(policy)),
            "policy_frames": payload.get("frames"),
            "seed": seed,
            "frames": frames,
            "distribution_mode": self.options.distribution_mode,
        }
        # The normaliser's random reference, counted as the expert's episodes are counted
        # (short episodes weigh more), on levels the collection does not play.
        log(f"{self.env_id}: measuring a uniform-random policy over {RANDOM_EPISODES} episodes")
        random = measure_random(self._training_env(), RANDOM_EPISODES,
                                seed + _RANDOM_SEED_OFFSET, _COLLECT_ENVS)  # fmt: skip
        reference = {"complexity": complexity(self.game), "random_return_mean": random,
                     "random_episodes": RANDOM_EPISODES}  # fmt: skip
        log(f"{self.env_id}: collecting {frames} frames with {policy}")
        store = collect_rollouts(
            self._training_env(), model, path, frames, seed, _COLLECT_ENVS, producer,
            reference, device or torch.device("cpu"), log,
        )  # fmt: skip
        # A test split left by the data this one replaced describes other data.
        shutil.rmtree(path.parent / "test", ignore_errors=True)
        if test_frames:
            log(f"{self.env_id}: collecting {test_frames} test frames")
            # Other seeds, so other levels: the test split holds episodes training never saw.
            collect_rollouts(
                self._training_env(), model, path.parent / "test", test_frames,
                seed + _TEST_SEED_OFFSET, _COLLECT_ENVS,
                {**producer, "seed": seed + _TEST_SEED_OFFSET, "frames": test_frames},
                {"complexity": complexity(self.game)}, device or torch.device("cpu"), log,
            )  # fmt: skip
        self._data_dir = path.parent
        return store


class ProcgenEnvironment(Environment):
    """The 16 Procgen games (Cobbe et al. 2020) at 64x64 pixels with 15 actions."""

    description: ClassVar[str] = (
        "The 16 Procgen games, 64x64 RGB, 15 actions; expert data imported from the paper's "
        "chunks or collected from a PPO expert; needs the 'procgen' extra."
    )
    Options: ClassVar[type[BaseModel]] = ProcgenOptions
    task_class = ProcgenTask
    task_kind = "procgen game"
    # The published data `ssilbench data download procgen` fetches (package data).
    downloads: ClassVar[str | None] = "ssilbench_procgen:downloads.toml"
    # Figure 3: the paper's code sweeps these D_L sizes (OBSERVED_SAMPLES of its launch
    # scripts, -1 = all) with seeds 11, 22, 33, every method 120,000 steps.
    paper_protocol: ClassVar[PaperProtocol | None] = PaperProtocol(
        budgets=("16", "32", "64", "128", "256", "512", "1024", "2048", "4096", "8192",
                 "32768", "131072", "524288", "all"),
        seeds=(11, 22, 33),
        steps=DEFAULT_STEPS,
        figure="Figure 3",
        source="sachaMorin/lapo-plus: OBSERVED_SAMPLES and SEEDS of its launch scripts",
    )  # fmt: skip

    def tasks(self) -> list[str]:
        return list(GAMES)

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
        from ssilbench_procgen.importer import import_split, inspect_split
        from ssilbench_procgen.protocol import import_record

        source = import_source(source, "one sub-folder per game (bigfish/, coinrun/, ...).")
        if not tasks:
            tasks = self._games_in(source)
        name = options.dataset  # type: ignore[attr-defined]
        # Check every chunk header of every game before copying anything.
        plan, stale = [], []
        for game in tasks:
            folder = source / game
            if not (folder / "train").is_dir():
                raise DatasetError(
                    f"{folder / 'train'} is not a folder: the paper's layout has "
                    f"{game}/train/ (and {game}/test/) under --from {source}."
                )
            for split in ("train", "test"):
                target = dataset_dir(root, name, game) / split
                if split == "test" and not (folder / "test").exists():
                    log(f"procgen:{game}: no test/ folder; importing the train split only")
                    if replace:
                        stale.append(target)  # it would describe the data replaced
                    continue
                if not already_imported(target, replace, log, f"procgen:{game} {split}:"):
                    found = inspect_split(folder / split, options.max_chunks)  # type: ignore[attr-defined]
                    plan.append((game, split, found, target))
        stores = []
        for game, split, found, target in plan:
            chunks = found.chunks
            frames = sum(c.frames for c in chunks)
            log(f"procgen:{game} {split}: {len(chunks)} chunks, {frames} frames -> {target}")
            producer = {
                "plugin": "ssilbench_procgen",
                "source": "import",
                "env_id": f"procgen:{game}",
                "split": split,
                "from": str((source / game / split).resolve()),
                "chunks": [c.path.name for c in chunks],
                "chunk_frames": [c.frames for c in chunks],
                **import_record(found.found, options.max_chunks),  # type: ignore[attr-defined]
            }
            stores.append(
                import_split(chunks, target, producer, {"complexity": complexity(game)}, log)
            )
        for target in stale:
            shutil.rmtree(target, ignore_errors=True)
        return stores

    def _games_in(self, source: Path) -> list[str]:
        found = []
        for path in sorted(source.iterdir()):
            if not path.is_dir() or path.name.startswith("."):
                continue
            if path.name not in GAMES:
                raise unknown("procgen game folder", path.name, GAMES,
                              f" (in --from {source}; pick games with --games)")  # fmt: skip
            found.append(path.name)
        if not found:
            raise DatasetError(
                f"--from {source} holds no game folders (bigfish/, coinrun/, ...); the paper's "
                "layout is DIR/<game>/{train,test}/<int>.npz."
            )
        return found
