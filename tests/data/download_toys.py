"""What the download tests publish and fetch: manifests, a download driven through the
library, and a small third-party environment package (``toy_downloads``: its plugin module,
its ``downloads.toml`` and the frames of its two tasks) that a mirror serves as a publisher
would."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from ssilbench.cli.download_progress import PlainReporter
from ssilbench.data import download as dl
from ssilbench.data.local_server import LocalServer

FAST = dl.Transfer(retries=3, timeout=10, backoff=0.01)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def manifest(files: list[dict], **extra) -> dl.Manifest:
    return dl.Manifest.model_validate({
        "format": "ssilbench.downloads", "version": 1, "family": "toy", "title": "toy data",
        "files": files, **extra,
    })  # fmt: skip


def download(m: dl.Manifest, dest: Path, server: LocalServer, pins=None, transfer=FAST):
    lines: list[str] = []
    planned = dl.plan_downloads(m, m.files, dest, server.url, pins)
    fetched = dl.download_all(m, planned, dest, PlainReporter(lines.append), transfer)
    return fetched, lines


TOY_PLUGIN = """
from pathlib import Path

import numpy as np
from ssilbench.api import DatasetError, EnvSpec, Environment, Normaliser, Task, hookimpl


class ToyTask(Task):
    def __init__(self, name, options):
        self.name = name
        self.spec = EnvSpec(env_id=f"toy:{name}", obs_shape=(3,), obs_dtype="float32",
                            obs_kind="vector", num_actions=2, horizon=5, eval_episodes=1,
                            eval_every=10, default_steps=10, default_arch="lc",
                            normaliser=Normaliser(name="raw", low=0.0, high=1.0))

    def dataset(self, root):
        from ssilbench.kit import TransitionStore
        return TransitionStore.open(Path(root) / "toy" / self.name)

    def make_vec_env(self, num_envs, seed):
        raise NotImplementedError


class ToyEnvironment(Environment):
    description = "toy data published for download"
    task_class = ToyTask
    task_kind = "toy task"
    downloads = "toy_downloads:downloads.toml"

    def tasks(self):
        return ["alpha", "beta"]

    def import_dataset(self, source, root, tasks, options, replace=False, log=print):
        from ssilbench.kit import TransitionStore, already_imported
        stores = []
        for task in tasks:
            if already_imported(Path(root) / "toy" / task, replace, log, f"toy:{task}"):
                continue
            path = Path(source) / f"{task}.npy"
            if not path.is_file():
                raise DatasetError(f"{path} is missing")
            try:
                obs = np.load(path, allow_pickle=False)
            except (ValueError, OSError, EOFError) as exc:
                raise DatasetError(f"{path} cannot be read ({exc})") from None
            stores.append(TransitionStore.write(
                Path(root) / "toy" / task, obs, np.zeros(len(obs), np.int64),
                np.zeros(len(obs), np.float32), np.array([len(obs)]), {"from": str(path)}))
            log(f"toy:{task}: imported {len(obs)} frames")
        return stores


@hookimpl
def ssilbench_register_environments(registry):
    registry.add("toy", "toy_downloads:ToyEnvironment", "toy data for download tests")
"""

TOY_MANIFEST = """
format = "ssilbench.downloads"
version = 1
family = "toy"
title = "Toy data"
homepage = "https://example.org/toy"
hashes = "{hashes}"
import_from = "data"
{files}
"""


def toy_frames(task: str) -> np.ndarray:
    seed = {"alpha": 1, "beta": 2}[task]
    return np.random.default_rng(seed).standard_normal((40, 3)).astype(np.float32)
