"""Policies kept by ``run --keep-policy``, evaluated again and filmed by ``ssilbench eval``:
a maze run (the smallest maze, 60 steps) end to end in this process, and every mistake a
user can make with ``eval`` (one message, exit code 2)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from ssilbench.eval.kept import POLICIES, keep_policy, read_kept
from ssilbench.eval.video import (
    MIN_SIDE,
    FilmedVectorEnv,
    enlarge,
    ffmpeg_available,
)
from ssilbench.models import image_frames
from ssilbench.runs.spec import RunSpec
from ssilbench.testing import cli_exit_code, run_records

MAZE = ["--method", "bc", "--env", "maze:10x10", "--budgets", "16", "--seeds", "0",
        "--steps", "60", "-q"]  # fmt: skip


def gif_frames(path: Path) -> tuple[list[np.ndarray], int]:
    """The distinct frames of a GIF (RGB) and the number of 1/FPS-second frames it shows
    (Pillow merges a frame equal to the one before into its duration)."""
    from PIL import Image, ImageSequence

    with Image.open(path) as image:
        frames = [(np.asarray(f.convert("RGB")), f.info["duration"])
                  for f in ImageSequence.Iterator(image)]  # fmt: skip
    return [f for f, _ in frames], sum(d for _, d in frames) // 100


@pytest.fixture(scope="module")
def maze_runs(tmp_path_factory):
    """The same maze run recorded with --keep-policy (``kept``) and without (``plain``)."""
    torch.set_num_threads(1)
    tmp = tmp_path_factory.mktemp("kept")
    data = tmp / "data"
    for name, extra in (("kept", ["--keep-policy"]), ("plain", [])):
        code = cli_exit_code("run", *MAZE, *extra, "--results", str(tmp / name),
                             "--data-root", str(data))  # fmt: skip
        assert code == 0
    return tmp


def test_keeping_the_policy_changes_neither_the_run_id_nor_its_result(maze_runs):
    [kept], [plain] = run_records(maze_runs / "kept"), run_records(maze_runs / "plain")
    assert kept["run_id"] == plain["run_id"]
    assert (kept["score"], kept["timeline"]) == (plain["score"], plain["timeline"])
    folder = maze_runs / "kept" / POLICIES
    assert sorted(p.name for p in folder.iterdir()) == [f"{kept['run_id']}.json",
                                                         f"{kept['run_id']}.pt"]  # fmt: skip
    described = read_kept(folder, kept["run_id"])
    assert described is not None and described.plugin == "baselines"
    assert described.step == json.loads(kept["timeline"])[-1]["step"] == 60
    assert described.spec == json.loads(kept["spec"])  # the spec as the store records it
    assert not (maze_runs / "plain" / POLICIES).exists()


def test_keeping_again_writes_the_same_bytes(maze_runs, tmp_path):
    from ssilbench.eval.kept import load_policy

    [record] = run_records(maze_runs / "kept")
    kept = read_kept(maze_runs / "kept" / POLICIES, record["run_id"])
    policy = load_policy(kept, torch.device("cpu"))
    keep_policy(tmp_path, kept.run_id, kept.spec, policy, kept.step, kept.plugin)
    for suffix in (".pt", ".json"):
        again = (tmp_path / kept.run_id).with_suffix(suffix).read_bytes()
        assert again == kept.path.with_suffix(suffix).read_bytes()


def test_eval_scores_what_the_run_recorded_and_films_the_first_episodes(maze_runs, tmp_path):
    from ssilbench.plugins import load_plugins
    from ssilbench.runner.evaluate import Filming, evaluate_kept, run_task

    results = maze_runs / "kept"
    [record] = run_records(results)
    plugins = load_plugins()
    report = evaluate_kept(plugins, results, record["run_id"][:8],
                           filming=Filming(tmp_path / "videos", 2, "gif"))  # fmt: skip
    # Same protocol, run seed and step as the run's final evaluation: the same episodes.
    assert report.score == report.recorded_score == record["final_score"]
    assert report.episodes == report.protocol_episodes == 64
    assert [p.name for p, _ in report.videos] == [f"{record['run_id']}.gif",
                                                  f"{record['run_id']}-1.gif"]  # fmt: skip
    # The first frame is the start state the task draws, enlarged; one frame per step.
    task = run_task(plugins, RunSpec.model_validate(json.loads(record["spec"])))
    venv = task.make_vec_env(2, seed=task.spec.eval_seed)
    obs, info = venv.reset(seed=task.spec.eval_seed)
    starts = enlarge(task.frames(venv, obs, info))
    for index, (path, count) in enumerate(report.videos):
        frames, shown = gif_frames(path)
        assert shown == count and 2 <= count <= task.spec.horizon + 1
        assert frames[0].shape == starts[index].shape
        assert max(frames[0].shape[:2]) >= MIN_SIDE
        assert np.array_equal(frames[0], starts[index])
    # Fewer episodes: the first of the protocol's (each sub-environment plays one).
    few = evaluate_kept(plugins, results, record["run_id"], episodes=4)
    assert few.episodes == 4 and not few.videos and math.isfinite(few.score)


def test_mp4_where_ffmpeg_is_installed_else_a_clear_refusal(maze_runs, tmp_path, capsys):
    [record] = run_records(maze_runs / "kept")
    args = ["eval", record["run_id"], "--results", str(maze_runs / "kept"), "--episodes", "1",
            "--video", str(tmp_path), "--format", "mp4"]  # fmt: skip
    if not ffmpeg_available():
        assert cli_exit_code(*args) == 2
        assert "pip install 'ssilbench[video]'" in capsys.readouterr().err
        return
    import imageio.v3 as iio

    assert cli_exit_code(*args) == 0
    out = capsys.readouterr().out
    frames = iio.imread(tmp_path / f"{record['run_id']}.mp4", index=None)
    count = int(out.split(".mp4 (")[1].split(" frames")[0])
    assert frames.shape[0] == count
    assert frames.shape[1] % 16 == 0 and frames.shape[2] % 16 == 0


def test_eval_mistakes_are_one_message_and_exit_2(maze_runs, tmp_path, capsys):
    kept, plain = maze_runs / "kept", maze_runs / "plain"
    [record] = run_records(kept)
    run_id = record["run_id"]

    def refused(*args: str) -> str:
        assert cli_exit_code("eval", *args) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err
        return err.strip().splitlines()[-1]

    typo = run_id[:-1] + ("0" if run_id[-1] != "0" else "1")
    assert f"Did you mean '{run_id}'?" in refused(typo, "--results", str(kept))
    assert "Runs with a kept policy" in refused("abcdef0123", "--results", str(kept))
    no_policy = refused(run_id, "--results", str(plain))
    assert "re-run it with --keep-policy" in no_policy
    assert "ssilbench run --method bc --env maze:10x10 --budgets 16 --seeds 0" in no_policy
    assert "--episodes" in refused(run_id, "--results", str(kept), "--episodes", "0")
    in_the_way = tmp_path / "file"
    in_the_way.write_text("")
    assert "--video DIR" in refused(run_id, "--results", str(kept), "--video", str(in_the_way))
    kept_file = kept / POLICIES / f"{run_id}.pt"
    before = kept_file.read_bytes()
    into_store = refused(run_id, "--results", str(kept), "--video", str(kept / POLICIES))
    assert "Refusing to write --video" in into_store and kept_file.read_bytes() == before
    damaged = tmp_path / "damaged"
    shutil.copytree(kept, damaged)
    (damaged / POLICIES / f"{run_id}.pt").write_bytes(b"not a policy")
    message = refused(run_id, "--results", str(damaged))
    assert "plugin 'baselines'" in message and "ClassifierPolicy" in message
    assert "No results store" in refused(run_id, "--results", str(tmp_path / "none"))


def test_image_observations_are_frames_whatever_their_layout():
    hwc = np.random.default_rng(0).integers(0, 255, (2, 8, 6, 3), dtype=np.uint8)
    chw = hwc.transpose(0, 3, 1, 2)
    assert np.array_equal(image_frames(hwc, (8, 6, 3)), hwc)
    assert np.array_equal(image_frames(chw, (3, 8, 6)), hwc)
    stacked = np.stack([np.zeros_like(hwc), hwc], axis=1)  # the newest frame last
    assert np.array_equal(image_frames({"obs": stacked}, (8, 6, 3), frame_stack=2), hwc)
    grey = image_frames(hwc[..., :1], (8, 6, 1))
    assert grey.shape == (2, 8, 6, 3) and np.array_equal(grey[..., 2], hwc[..., 0])
    assert image_frames(np.zeros((2, 5)), (5,)) is None
    assert enlarge(hwc).shape == (2, 8 * 32, 6 * 32, 3)


def test_filming_keeps_each_sub_environments_first_episode():
    class Venv:
        num_envs = 3

        def reset(self, **kw):
            self.t = 0
            return np.zeros((3, 1)), {}

        def step(self, actions):
            self.t += 1
            ended = np.array([self.t >= 2, self.t >= 4, self.t >= 1])
            return np.full((3, 1), self.t), np.zeros(3), ended, np.zeros(3, bool), {}

    def frames(venv, obs, info):
        return np.repeat(obs[:, None, None, :], 3, axis=-1).astype(np.uint8)

    filmed = FilmedVectorEnv(Venv(), frames, count=2)
    filmed.reset(seed=0)
    for _ in range(4):
        filmed.step(np.zeros(3))
    lengths = {i: [int(f[0, 0, 0]) for f in frames] for i, frames in filmed.episodes.items()}
    assert lengths == {0: [0, 1, 2], 1: [0, 1, 2, 3, 4]}


def test_a_pusht_run_is_filmed_from_its_image_observations(tmp_path):
    pytest.importorskip("gym_pusht", reason="gym-pusht is not installed: ssilbench[pusht]")
    from ssilbench.plugins import load_plugins
    from ssilbench.runner.evaluate import Filming, evaluate_kept
    from ssilbench_pusht.replay import make_demo_dataset

    torch.set_num_threads(1)
    data, results = tmp_path / "data", tmp_path / "results"
    make_demo_dataset(tmp_path / "demo.zarr", num_episodes=4, seed=0, max_steps=30)
    assert cli_exit_code("data", "import", "pusht", "--from", str(tmp_path / "demo.zarr"),
                         "--data-root", str(data)) == 0  # fmt: skip
    tiny = {"profile": "small", "width": 32, "depth": 2, "heads": 2, "head_width": 32,
            "head_depth": 1, "sample_steps": 2, "diffusion_steps": 10, "vae_steps": 3,
            "pretrain_steps": 3, "batch_size": 4, "vae_batch": 4}  # fmt: skip
    code = cli_exit_code("run", "--method", "bc", "--env", "pusht", "-o", "eval_episodes=2",
                         "-o", "max_steps=16", "--budgets", "2", "--seeds", "0", "--steps", "4",
                         "-c", "arch_options=" + json.dumps(tiny), "--keep-policy", "-q",
                         "--threads", "1", "--results", str(results),
                         "--data-root", str(data))  # fmt: skip
    assert code == 0
    [record] = run_records(results)
    report = evaluate_kept(load_plugins(), results, record["run_id"],
                           filming=Filming(tmp_path / "videos", 1, "gif"))  # fmt: skip
    assert report.score == record["final_score"]  # UVA samples from the evaluator's generator
    [(path, count)] = report.videos
    frames, shown = gif_frames(path)
    # 96x96 observations, enlarged 3x; the start state and one frame per step to the end.
    assert frames[0].shape == (288, 288, 3)
    assert shown == count and 2 <= count <= 16 + 1


def test_the_html_leaderboard_links_the_rollouts_in_results_videos(maze_runs, tmp_path, capsys):
    import re

    results = tmp_path / "results"
    shutil.copytree(maze_runs / "kept", results)
    [record] = run_records(results)
    page = tmp_path / "page" / "board.html"
    assert cli_exit_code("leaderboard", "--results", str(results), "--export", "html",
                         "--out", str(page)) == 0  # fmt: skip
    assert "<a href=" not in page.read_text()  # no video yet
    # --video alone films into RESULTS/videos, where the leaderboard looks.
    assert cli_exit_code("eval", record["run_id"], "--results", str(results), "--video",
                         "--episodes", "1", "--format", "gif") == 0  # fmt: skip
    assert f"{results / 'videos' / record['run_id']}.gif" in capsys.readouterr().out
    assert cli_exit_code("leaderboard", "--results", str(results), "--export", "html",
                         "--out", str(page)) == 0  # fmt: skip
    [link] = re.findall(r'<a href="([^"]+)"', page.read_text())
    assert (page.parent / link).resolve() == (results / "videos" / f"{record['run_id']}.gif")


def test_a_vector_env_that_plays_in_waves_is_filmed_wave_by_wave():
    """LIBERO's vector env plays its sub-environments in waves (``waves()``): the evaluator
    finds them through the filmed env, and the frames keep the whole's numbering."""
    from ssilbench.api import EnvSpec, Normaliser, Policy, Task
    from ssilbench.eval.rollout import Evaluator

    class Wave:
        def __init__(self, first: int, n: int) -> None:
            self.first, self.num_envs = first, n

        def reset(self, seed=None, options=None):
            self.t = 0
            return self.obs(), {}

        def obs(self):  # sub-environment i's frame: every pixel 10 * (first + i) + t
            shade = 10 * (self.first + np.arange(self.num_envs)) + self.t
            return np.broadcast_to(shade[:, None, None, None], (self.num_envs, 2, 2, 3)).astype(
                np.uint8)  # fmt: skip

        def step(self, actions):
            self.t += 1
            ended = np.full(self.num_envs, self.t >= 2)
            return self.obs(), np.ones(self.num_envs), ended, np.zeros(self.num_envs, bool), {}

        def close(self) -> None:
            pass

    class Waves:
        num_envs = 3

        def waves(self):
            yield Wave(0, 2)
            yield Wave(2, 1)

        def close(self) -> None:
            pass

    class Still(Policy):
        def probs(self, obs):
            return torch.ones(len(obs), 2) / 2

    class Images(Task):
        spec = EnvSpec(env_id="waves:test", obs_shape=(2, 2, 3), obs_dtype="uint8",
                       obs_kind="image", num_actions=2, horizon=5, eval_episodes=3,
                       eval_every=10, default_steps=10, default_arch="mlp5",
                       normaliser=Normaliser(name="raw", low=0.0, high=1.0))  # fmt: skip

        def dataset(self, root):
            raise NotImplementedError

        def make_vec_env(self, num_envs, seed):
            raise NotImplementedError  # the evaluator is given the filmed one

    task = Images()
    filmed = FilmedVectorEnv(Waves(), task.frames, count=3)
    result = Evaluator(task, torch.device("cpu"), venv=filmed)(Still())
    assert result.returns == (2.0, 2.0, 2.0)
    shades = {i: [int(f[0, 0, 0]) for f in frames] for i, frames in filmed.episodes.items()}
    assert shades == {0: [0, 1, 2], 1: [10, 11, 12], 2: [20, 21, 22]}
