"""A run's identity covers the code that produced it, not only its plugins' versions.

A plugin installed as a distribution (package + ``.dist-info``, as pip lays it out) keeps
its version while its files change (an editable install, a patched copy): the runs, the
stage-cache keys and the datasets its code generates must change with them. Reports still
find the runs by design.
"""

from __future__ import annotations

import hashlib
import json
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from ssilbench.errors import ConfigError, DatasetError
from ssilbench.fingerprint import package_fingerprint, source_files
from ssilbench.planning.plan import SweepPlan, build_plan, resolve
from ssilbench.testing import StageCache, Sweep, cli_exit_code, load_plugins

# A plugin whose environment's evaluation dynamics live in dynamics.py.
PLUGIN = {
    "__init__.py": "",
    "plugin.py": """
        from ssilbench.api import registers

        ssilbench_register_environments = registers(
            ("walk", "walkplug.env:WalkEnvironment", "a walk to the right"),
        )
    """,
    "dynamics.py": """
        STEP = 1  # how far one 'right' moves: the evaluation's dynamics
    """,
    "layers.py": """
        import torch


        class Doubled(torch.nn.Linear):
            def forward(self, x):
                return 2 * super().forward(x)
    """,
    "env.py": """
        import numpy as np
        from pathlib import Path

        from ssilbench.api import EnvSpec, Environment, Normaliser, Task, TransitionStore
        from walkplug import dynamics


        class WalkTask(Task):
            def __init__(self, name, options):
                self.spec = EnvSpec(env_id="walk:line", obs_shape=(1,), obs_dtype="float32",
                                    obs_kind="vector", num_actions=2, horizon=8,
                                    eval_episodes=2, eval_every=10, default_steps=10,
                                    default_arch="lc",
                                    normaliser=Normaliser(name="raw", low=0.0, high=1.0))

            def dataset(self, root):
                path = Path(root) / "walk"
                if not path.exists():
                    cells = np.arange(12, dtype=np.float32)[:, None] * dynamics.STEP
                    TransitionStore.write(path, cells, np.ones(12, np.int64),
                                          np.zeros(12, np.float32), np.array([6, 12]),
                                          {"plugin": "walkplug"})
                return TransitionStore.open(path)

            def make_vec_env(self, num_envs, seed):
                raise NotImplementedError


        class WalkEnvironment(Environment):
            task_class = WalkTask

            def tasks(self):
                return ["line"]
    """,
}


@pytest.fixture
def walkplug(tmp_path, monkeypatch):
    """The plugin installed as distribution walkplug 1.0: (site folder, its package)."""
    site = tmp_path / "site"
    package = site / "walkplug"
    package.mkdir(parents=True)
    for name, source in PLUGIN.items():
        (package / name).write_text(textwrap.dedent(source))
    info = site / "walkplug-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: walkplug\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[ssilbench]\nwalk = walkplug.plugin\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delenv("SSILBENCH_PLUGINS", raising=False)
    monkeypatch.delenv("SSILBENCH_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    forget_walkplug()
    yield site, package
    forget_walkplug()


def forget_walkplug() -> None:
    """A fresh import of the plugin from this test's folder (an imported package is
    fingerprinted where it was imported from)."""
    for name in [m for m in sys.modules if m.split(".")[0] == "walkplug"]:
        del sys.modules[name]
    package_fingerprint.cache_clear()


def edit_dynamics(package: Path, step: int) -> None:
    """Another version of the evaluation code at the same release, as a new process
    (which fingerprints the files it loads) sees it."""
    (package / "dynamics.py").write_text(f"STEP = {step}\n")
    package_fingerprint.cache_clear()


def sweep() -> Sweep:
    return Sweep(methods=["bc"], envs=["walk:line"], budgets=["2"], seeds=[0], steps=5)


def test_the_same_version_with_other_evaluation_code_is_a_new_run(walkplug):
    _, package = walkplug
    [before] = resolve(load_plugins(), sweep())
    assert before.plugins["walk"] == "walkplug 1.0"
    assert before.code["walk"] == package_fingerprint("walkplug") != "unknown"

    edit_dynamics(package, 2)
    [after] = resolve(load_plugins(), sweep())
    assert after.plugins == before.plugins  # the same release ...
    assert after.code["walk"] != before.code["walk"]  # ... with other code
    assert after.run_id != before.run_id and after.setup_id != before.setup_id
    assert after.design_id == before.design_id  # reports still find the design's runs
    assert after.code["baselines"] == before.code["baselines"]

    # A worker with the new code refuses a run planned with the old.
    with pytest.raises(ConfigError, match="planned with code .* the same plugin versions and code"):
        SweepPlan.of(load_plugins(), [before])


def test_a_dataset_generated_by_other_code_is_refused_until_rebuilt(walkplug, tmp_path, capsys):
    _, package = walkplug
    data = tmp_path / "data"
    plan = build_plan(load_plugins(), sweep(), data)
    [spec] = plan.runs
    manifest = json.loads((data / "walk" / "manifest.json").read_text())
    assert manifest["producer"]["code"] == {"walkplug": spec.code["walk"]}

    edit_dynamics(package, 3)
    with pytest.raises(DatasetError, match=r"generated by other code of walkplug .*--rebuild"):
        build_plan(load_plugins(), sweep(), data)
    args = ["--data-root", str(data)]
    assert cli_exit_code("run", "--method", "bc", "--env", "walk:line", "--budgets", "2",
                         "--results", str(tmp_path / "r"), *args) == 2  # fmt: skip
    assert "ssilbench data build walk:line --rebuild" in capsys.readouterr().err
    assert cli_exit_code("data", "build", "walk:line", "--rebuild", *args) == 0
    [rebuilt] = build_plan(load_plugins(), sweep(), data).runs
    assert rebuilt.data != spec.data and rebuilt.code != spec.code


def test_stage_cache_keys_hold_the_code_that_computes_the_stage(walkplug, tmp_path):
    _, package = walkplug
    rows = [torch.zeros(3, 2)]
    cpu = torch.device("cpu")

    def key(net, code=()):
        return StageCache(tmp_path, dict(code)).key("classifier", net, rows, {"lr": 0.1}, cpu)

    # The run's architecture plugins' code (what built the network) ...
    torch.manual_seed(0)
    plain = torch.nn.Linear(2, 2)
    keys = {key(plain, code) for code in [(), (("walk", "a"),), (("walk", "b"),)]}
    assert len(keys) == 3
    plain_key = key(plain)  # torch's own modules: no code of a plugin in the key
    assert plain_key == StageCache(tmp_path).key("classifier", plain, rows, {"lr": 0.1}, cpu)
    # ... and the packages that define the network's own modules (its forward pass).
    from walkplug.layers import Doubled

    torch.manual_seed(0)
    doubled = Doubled(2, 2)
    before = key(doubled)
    assert before != key(plain)  # the same weights, another computation
    edit_dynamics(package, 5)  # the plugin's files change, its layer class with them
    assert key(doubled) != before and key(plain) == plain_key


def test_a_working_tree_plugin_is_fingerprinted_from_its_files():
    """The built-in plugins are installed from this working tree (editable): their
    fingerprint is that of the files here."""
    folder = Path(__file__).resolve().parents[2] / "plugins" / "ssilbench_maze"
    digest = hashlib.sha256()
    files = sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)
    for path in files:
        data = path.read_bytes()
        digest.update(f"{path.relative_to(folder).as_posix()}\0{len(data)}\0".encode())
        digest.update(data)
    assert [f for _, f in source_files("ssilbench_maze")] == files
    [spec] = resolve(load_plugins(), Sweep(methods=["bc"], envs=["maze:10x10"], budgets=["16"],
                                           seeds=[0]))  # fmt: skip
    assert spec.code["maze"] == package_fingerprint("ssilbench_maze") == digest.hexdigest()[:16]
