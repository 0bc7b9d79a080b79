"""An architecture declares the observation shapes it takes, and ``run`` refuses a mismatch
with exit code 2 before anything is built or trained (``cnn5`` on 4x4 images)."""

from __future__ import annotations

import textwrap

import pytest

from ssilbench.testing import cli_exit_code, load_plugins

# An environment of 4x4 RGB frames whose default architecture is cnn5 (it pools three
# times, so it needs 8x8). Its dataset and simulator are never reached: the plan stops first.
TINY_IMAGES = """
from ssilbench.api import EnvSpec, Environment, Normaliser, Task, hookimpl


class TinyImageTask(Task):
    def __init__(self, name, options):
        self.spec = EnvSpec(env_id=f"tinyimg:{name}", obs_shape=(3, 4, 4), obs_dtype="uint8",
                            obs_kind="image", num_actions=4, horizon=8, eval_episodes=2,
                            eval_every=10, default_steps=10, default_arch="cnn5",
                            normaliser=Normaliser(name="raw", low=0.0, high=1.0))

    def dataset(self, root):
        raise AssertionError("the plan must stop before it opens a dataset")

    def make_vec_env(self, num_envs, seed):
        raise AssertionError("the plan must stop before it builds an environment")


class TinyImages(Environment):
    task_class = TinyImageTask

    def tasks(self):
        return ["4x4"]


@hookimpl
def ssilbench_register_environments(registry):
    registry.add("tinyimg", "tiny_images_plugin:TinyImages", "4x4 frames")
"""


@pytest.fixture
def tiny_images(tmp_path, monkeypatch):
    (tmp_path / "tiny_images_plugin.py").write_text(textwrap.dedent(TINY_IMAGES))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SSILBENCH_PLUGINS", raising=False)
    return tmp_path


def test_cnn5_on_4x4_images_exits_2_before_any_run(tiny_images, capsys):
    code = cli_exit_code("-p", "tiny_images_plugin", "run", "--method", "bc,idm_labeling",
                         "--env", "tinyimg:4x4", "--budgets", "4", "--results", "results",
                         "--data-root", "data")  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.strip().splitlines()[-1] == (
        "error: Method 'bc': arch=cnn5 needs images of at least 8x8 pixels, and the "
        "observations are 4x4 on tinyimg:4x4. Choose another architecture (cnn1, cnn5, "
        "continuous, impala, impala_bf16, impala_mlp, impala_small, lc, mlp5, uva, uva_base) "
        "with -c arch=NAME, or observations it takes."
    )
    assert not (tiny_images / "results").exists() and not (tiny_images / "data").exists()


def test_an_architecture_that_takes_the_frames_passes_the_same_check(tiny_images):
    from ssilbench.planning.plan import resolve
    from ssilbench.testing import Sweep

    plugins = load_plugins(["tiny_images_plugin"])
    # cnn1 (one unpadded 3x3 convolution) takes 4x4 frames: the runs are planned.
    sweep = Sweep(methods=["bc"], envs=["tinyimg:4x4"], budgets=["4"], seeds=[0],
                  config={"arch": "cnn1"})  # fmt: skip
    [spec] = resolve(plugins, sweep)
    assert spec.config["arch"] == "cnn1" and spec.env == "tinyimg:4x4"


@pytest.mark.parametrize(
    ("arch", "shape", "problem"),
    [
        ("cnn5", (3, 8, 8), None),
        ("cnn5", (3, 8, 7), "needs images of at least 8x8 pixels, and the observations are 8x7"),
        ("cnn1", (1, 2, 9), "needs images of at least 3x3 pixels, and the observations are 2x9"),
        ("cnn1", (1, 3, 3), None),
        ("mlp5", (3, 1, 1), None),
        ("lc", (4,), None),
    ],
)
def test_architectures_say_which_shapes_they_refuse(arch, shape, problem):
    assert load_plugins().architectures.create(arch).input_problem(shape) == problem
