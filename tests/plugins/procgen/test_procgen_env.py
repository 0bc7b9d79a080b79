"""The procgen environment family: registration, options, specs, normalisers, the vector env
and its evaluation protocol (every one of the episodes runs to its end)."""

from __future__ import annotations

import numpy as np
import pytest

from ssilbench.api import ConfigError, DatasetError, PluginError, UnknownNameError
from ssilbench.testing import imported_after, load_plugins
from ssilbench_procgen.environment import ProcgenEnvironment, ProcgenOptions, dataset_dir
from ssilbench_procgen.games import ACTION_NAMES, GAMES, LAPO_RANGES, PROCGEN_RANGES
from ssilbench_procgen.vec_env import procgen_problem

PROCGEN_PROBLEM = procgen_problem()

needs_procgen = pytest.mark.skipif(PROCGEN_PROBLEM is not None, reason=str(PROCGEN_PROBLEM))

SIMPLE = {"bigfish", "bossfight", "dodgeball", "fruitbot", "heist", "maze", "miner", "plunder",
          "starpilot"}  # fmt: skip


def test_registered_with_sixteen_games_and_light_imports():
    plugins = load_plugins()
    assert "procgen" in plugins.environments
    environment = plugins.environments.create("procgen")
    assert environment.tasks() == list(GAMES) and len(GAMES) == 16
    # Loading a task must not import procgen or torch (listing and planning stay fast).
    load = "from ssilbench_procgen.environment import ProcgenEnvironment as E; E().load('coinrun')"
    assert imported_after(load, ["procgen", "torch", "gym"]) == []


def test_spec_of_every_game():
    environment = ProcgenEnvironment()
    for game in GAMES:
        spec = environment.load(game, ProcgenOptions()).spec
        assert spec.env_id == f"procgen:{game}"
        assert spec.obs_shape == (3, 64, 64) and spec.obs_dtype == "uint8"
        assert spec.obs_kind == "image"
        assert spec.num_actions == 15 and spec.action_names == ACTION_NAMES
        assert spec.action_names[4] == "NOOP" and spec.action_names[-1] == "E"
        assert (spec.eval_episodes, spec.eval_every) == (64, 500)
        assert spec.action_selection == "sample" and spec.report == "max"
        assert spec.default_arch == "impala" and spec.horizon == 1000
        assert spec.metadata["complexity"] == ("simple" if game in SIMPLE else "complex")
        assert spec.metadata["start_level"] == 54321 and spec.metadata["num_levels"] == 0


def test_normalisers():
    environment = ProcgenEnvironment()
    lapo = environment.load("bigfish", ProcgenOptions()).spec.normaliser
    assert lapo.name == "lapo" and (lapo.low, lapo.high) == LAPO_RANGES["bigfish"]
    assert lapo(36.336166) == pytest.approx(1.0) and lapo(0.8742888) == pytest.approx(0.0)
    cobbe = environment.load("fruitbot", ProcgenOptions(normaliser="procgen")).spec.normaliser
    assert (cobbe.low, cobbe.high) == (-1.5, 32.4)
    hard = ProcgenOptions(normaliser="procgen", distribution_mode="hard")
    assert environment.load("starpilot", hard).spec.normaliser.high == 35.0
    assert set(LAPO_RANGES) == set(GAMES) == set(PROCGEN_RANGES["hard"])
    with pytest.raises(ConfigError, match="normaliser=procgen"):
        environment.load("bigfish", ProcgenOptions(distribution_mode="hard"))


def _dataset(root, name: str, source: str, expert_return: float | None = None, **measured):
    """A 6-frame bigfish dataset as 'data collect' (or 'data import') records it."""
    from ssilbench.kit import TransitionStore

    TransitionStore.write(
        dataset_dir(root, name, "bigfish") / "train",
        obs=np.zeros((6, 3, 64, 64), np.uint8), actions=np.zeros(6, np.int64),
        rewards=np.zeros(6, np.float32), episode_ends=np.array([3, 6]),
        producer={"plugin": "ssilbench_procgen", "source": source, "policy": "/x/expert.pt"},
        metadata={"episode_return_mean": expert_return, "complete_episodes": 4, **measured},
    )  # fmt: skip


def test_a_collected_dataset_is_normalised_by_its_own_expert(tmp_path):
    environment, random = ProcgenEnvironment(), LAPO_RANGES["bigfish"][0]
    _dataset(tmp_path, "mine", "collect", 10.0)
    task = environment.load("bigfish", ProcgenOptions(dataset="mine"))
    declared = task.spec
    task.dataset(tmp_path)
    norm = task.spec.normaliser
    assert norm.name == "dataset" and (norm.low, norm.high) == (random, 10.0)
    assert norm(10.0) == pytest.approx(1.0) and norm(random) == pytest.approx(0.0)
    assert "the 4 complete episodes" in norm.source and "(expert.pt)" in norm.source
    assert "random, a uniform-random policy's (LAPO's table" in norm.source  # none measured
    # The protocol a run id hashes (the spec but its metadata) is taken before the dataset
    # is opened: the paper's, so the default option names the runs it always named.
    paper = environment.load("bigfish", ProcgenOptions()).spec
    assert declared.model_dump(exclude={"metadata"}) == paper.model_dump(exclude={"metadata"})
    explicit = environment.load("bigfish", ProcgenOptions(dataset="mine", normaliser="dataset"))
    explicit.dataset(tmp_path)
    assert explicit.spec.normaliser == norm
    table = environment.load("bigfish", ProcgenOptions(dataset="mine", normaliser="lapo_table"))
    table.dataset(tmp_path)
    assert table.spec.normaliser == paper.normaliser
    # A random policy's return measured at collection is the reference it records.
    _dataset(tmp_path, "measured", "collect", 10.0, random_return_mean=0.5, random_episodes=64)
    measured = environment.load("bigfish", ProcgenOptions(dataset="measured"))
    measured.dataset(tmp_path)
    assert (measured.spec.normaliser.low, measured.spec.normaliser.high) == (0.5, 10.0)
    assert "(64 episodes measured at collection" in measured.spec.normaliser.source
    _dataset(tmp_path, "weak", "collect", 0.66)
    weak = environment.load("bigfish", ProcgenOptions(dataset="weak"))
    with pytest.raises(DatasetError, match=r"returned 0.66 on average over 4 episodes, not abo"):
        weak.dataset(tmp_path)
    _dataset(tmp_path, "expert", "import", 30.0)  # the paper's data keeps LAPO's table
    imported = environment.load("bigfish", ProcgenOptions())
    imported.dataset(tmp_path)
    assert imported.spec.normaliser == paper.normaliser
    with pytest.raises(DatasetError, match="was imported .* use -o normaliser=lapo"):
        environment.load("bigfish", ProcgenOptions(normaliser="dataset")).dataset(tmp_path)


def test_options_and_names_are_checked():
    with pytest.raises(UnknownNameError, match="Did you mean 'coinrun'"):
        ProcgenEnvironment().load("coinrn", ProcgenOptions())
    with pytest.raises(ValueError, match="extra"):
        ProcgenOptions(num_level=3)
    with pytest.raises(ValueError):
        ProcgenOptions(dataset="../elsewhere")
    assert ProcgenOptions().model_dump() == {
        "distribution_mode": "easy",
        "num_levels": 0,
        "start_level": 54321,
        "normaliser": "lapo",
        "dataset": "expert",
        "test_transitions": 1024,
        "eval_levels": "fresh",
        "eval_counting": "first_to_finish",
        "transitions": "across_episodes",
        "max_chunks": 80,
    }


def _trace(venv, seed: int, steps: int) -> list[np.ndarray]:
    rng = np.random.Generator(np.random.PCG64(seed))
    obs, _ = venv.reset(seed=seed)
    out = [obs]
    for _ in range(steps):
        obs, reward, terminated, truncated, _ = venv.step(rng.integers(0, 15, venv.num_envs))
        out += [obs, reward, terminated, truncated]
    return out


@needs_procgen
@pytest.mark.parametrize("game", GAMES)
def test_equal_seeds_give_equal_episodes(game):
    task = ProcgenEnvironment().load(game, ProcgenOptions())
    venv = task.make_vec_env(2, seed=5)
    try:
        first = _trace(venv, 5, 40)
        second = _trace(venv, 5, 40)  # a reset with the same seed replays
        other = _trace(venv, 6, 40)
    finally:
        venv.close()
    assert all(np.array_equal(a, b) for a, b in zip(first, second, strict=True))
    assert not np.array_equal(first[0], other[0])
    assert first[0].shape == (2, 3, 64, 64) and first[0].dtype == np.uint8


def _uniform():
    """A policy that picks each of the 15 actions with equal probability (torch is imported
    only by the tests that roll out)."""
    import torch

    from ssilbench.api import Policy

    class Uniform(Policy):
        def probs(self, obs):
            return torch.full((len(obs), 15), 1 / 15)

    return Uniform()


@needs_procgen
def test_evaluation_runs_every_episode_to_its_end():
    """Sub-environments reset themselves; with ``eval_counting=first_per_env`` each one's
    first episode counts, whole."""
    import torch

    from ssilbench.testing import rollout_returns

    task = ProcgenEnvironment().load("starpilot", ProcgenOptions(eval_counting="first_per_env"))
    venv = task.make_vec_env(4, seed=9)
    try:
        returns = rollout_returns(venv, _uniform(), task.spec, 9, torch.device("cpu"),
                                  torch.Generator().manual_seed(0))  # fmt: skip
        # Replay the same actions by hand and sum each env's rewards up to its first end;
        # actions are sampled for the envs still playing only (finished ones repeat theirs).
        generator = torch.Generator().manual_seed(0)
        venv.reset(seed=9)
        expected, ended = np.zeros(4), np.zeros(4, dtype=bool)
        lengths = np.zeros(4, dtype=int)
        actions = np.zeros(4, dtype=np.int64)
        while not ended.all():
            live = int((~ended).sum())
            sampled = torch.multinomial(torch.full((live, 15), 1 / 15), 1, generator=generator)
            actions[~ended] = sampled.squeeze(-1).numpy()
            _, reward, terminated, _, _ = venv.step(actions)
            expected += np.where(ended, 0.0, reward)
            lengths += ~ended
            ended |= terminated
    finally:
        venv.close()
    np.testing.assert_allclose(returns, expected)
    assert len(set(lengths.tolist())) > 1  # episodes of different lengths all finished


@needs_procgen
def test_a_reset_restores_the_seed_instead_of_rebuilding():
    """A reset with a seed seen before restores its saved initial states: the episodes are
    those of the first reset and of a freshly built env, through several episode ends."""
    task = ProcgenEnvironment().load("bigfish", ProcgenOptions())
    venv, fresh = task.make_vec_env(8, seed=5), task.make_vec_env(8, seed=5)
    try:
        first = _trace(venv, 5, 300)
        restored = _trace(venv, 5, 300)
        assert venv.builds == 1
        _trace(venv, 6, 10)  # another seed builds procgen again...
        back = _trace(venv, 5, 300)  # ...and seed 5 restores into the env built for 6
        assert venv.builds == 2
        built = _trace(fresh, 5, 300)
    finally:
        venv.close()
        fresh.close()
    assert sum(int(done.sum()) for done in first[3::4]) > 8  # levels ended and new ones began
    for trace in (restored, back, built):
        assert len(trace) == len(first)
        assert all(np.array_equal(a, b) for a, b in zip(first, trace, strict=True))


@needs_procgen
def test_the_evaluator_builds_procgen_once_per_run_on_fixed_levels():
    import torch

    from ssilbench.testing import Evaluator

    task = ProcgenEnvironment().load("bigfish", ProcgenOptions(eval_levels="fixed"))
    task.spec = task.spec.model_copy(update={"eval_episodes": 4})
    evaluator = Evaluator(task, torch.device("cpu"))
    try:
        results = [evaluator(_uniform(), step) for step in (500, 1000, 1500)]
        assert evaluator.venv.builds == 1
    finally:
        evaluator.close()
    assert results[0].returns == results[1].returns == results[2].returns


def test_a_native_library_that_does_not_load_is_one_message_that_says_what_to_install(
    monkeypatch,
):
    """procgen imports without its native library; the first build loads it, and a headless
    image without OpenGL fails there (seen on a lent GPU machine)."""
    from ssilbench_procgen import vec_env

    missing = "libGL.so.1: cannot open shared object file: No such file or directory"

    class Procgen:
        @staticmethod
        def ProcgenGym3Env(**settings):  # noqa: N802 (procgen's name)
            raise OSError(f"cannot load library 'libenv.so': {missing}")

    monkeypatch.setattr(vec_env, "import_procgen", lambda: Procgen)
    venv = vec_env.ProcgenVectorEnv("bigfish", 2)
    with pytest.raises(PluginError) as raised:
        venv.reset(seed=0)
    assert missing in str(raised.value) and "apt-get install libgl1" in str(raised.value)


def test_a_native_library_that_does_not_load_stops_a_sweep_before_it_trains(monkeypatch, tmp_path):
    """procgen imports without loading its native library, which it loads at its first
    environment: after a sweep's training. The import check loads the wheel's library, so
    the preflight (``check_rollouts``) says what is missing before any run starts, and the
    tests that need procgen skip."""
    import types

    from ssilbench_procgen import vec_env

    prebuilt = tmp_path / "procgen" / "data" / "prebuilt"
    prebuilt.mkdir(parents=True)
    (prebuilt / "libenv.so").write_bytes(b"not a shared library")
    module = types.ModuleType("procgen")
    module.__file__ = str(tmp_path / "procgen" / "__init__.py")
    monkeypatch.setattr(vec_env, "import_optional", lambda *args: module)
    with pytest.raises(PluginError) as raised:
        ProcgenEnvironment().load("bigfish").check_rollouts()
    assert str(prebuilt / "libenv.so") in str(raised.value)
    assert "apt-get install libgl1" in str(raised.value)
    assert not vec_env.procgen_available()
    # A procgen without a prebuilt library (built from source) is checked at its first build.
    assert vec_env.native_library_problem(tmp_path) is None
