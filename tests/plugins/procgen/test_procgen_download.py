"""``ssilbench data download procgen``: the paper's per-game zip (chunks in the real layout)
served by a local HTTP server, resumed after a dropped connection, checked, unpacked and
imported, after which a ``lapo_plus`` sweep on ``procgen:bigfish`` plans with the dataset.

A real run of a few steps on this data takes minutes on a shared CPU (measured by hand, see
docs/environments/procgen.md), so the test stops at the planned sweep: resolved and
prepared, the dataset opened and verified exactly as ``ssilbench run`` opens it.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest

from ssilbench.api import TransitionStore
from ssilbench.testing import LocalServer, Sweep, build_plan, load_plugins, usage_error
from ssilbench_procgen.chunks import write_synthetic_split
from ssilbench_procgen.environment import dataset_dir

GAME = "bigfish"


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture
def mirror(tmp_path: Path) -> Path:
    """``bigfish.zip`` as published: ``bigfish/train/<int>.npz`` and ``bigfish/test/...``."""
    source = tmp_path / "expert_data"
    write_synthetic_split(source / GAME / "train", 700, episode=100, chunk=256, seed=0)
    write_synthetic_split(source / GAME / "test", 300, episode=100, chunk=256, seed=1)
    served = tmp_path / "mirror"
    served.mkdir()
    with zipfile.ZipFile(served / f"{GAME}.zip", "w") as archive:
        for path in sorted(source.rglob("*.npz")):
            archive.write(path, path.relative_to(source).as_posix())
    return served


def _download(cli, server: LocalServer, *args: str):
    return cli("data", "download", "procgen", "--games", GAME, "--from-url", server.url,
               "--data-root", str(cli.data), *args)  # fmt: skip


def test_download_resumes_imports_and_a_lapo_plus_sweep_finds_the_data(cli, mirror):
    size = (mirror / f"{GAME}.zip").stat().st_size
    with LocalServer(mirror, drop_after={f"{GAME}.zip": size // 3}) as server:
        result = _download(cli, server)
        gets = server.gets(f"{GAME}.zip")
    assert result.returncode == 0, result.stderr
    assert [g.range for g in gets] == [None, f"bytes={size // 3}-"]
    assert "1 file(s) to download, size unknown (not published)" in result.stdout
    assert "trust on first use" in result.stderr
    downloaded = cli.data / "downloads" / "procgen"
    assert (downloaded / f"{GAME}.zip").read_bytes() == (mirror / f"{GAME}.zip").read_bytes()
    assert (downloaded / GAME / "train" / "2.npz").is_file()  # unpacked in the paper's layout

    train = TransitionStore.open(dataset_dir(cli.data, "expert", GAME) / "train", verify=True)
    assert (train.num_frames, train.num_episodes) == (700, 7)
    chunk = np.load(downloaded / GAME / "train" / "0.npz")
    np.testing.assert_array_equal(np.asarray(train.obs[:256]), chunk["obs"].transpose(0, 3, 1, 2))
    test = TransitionStore.open(dataset_dir(cli.data, "expert", GAME) / "test", verify=True)
    assert test.num_frames == 300

    # What `ssilbench run --method lapo_plus --env procgen:bigfish` plans and prepares.
    sweep = Sweep(methods=["lapo_plus"], envs=[f"procgen:{GAME}"], budgets=["64"], seeds=[0],
                  steps=30, rollouts=False)  # fmt: skip
    plan = build_plan(load_plugins(), sweep, cli.data)
    (spec,) = plan.runs
    assert (spec.method, spec.env) == ("lapo_plus", f"procgen:{GAME}")
    assert spec.data  # the fingerprint of the imported dataset, which prepare() opened
    assert sum(stage.steps for stage in plan.stages[spec.run_id]) == 30


def test_a_corrupted_zip_exits_2_and_imports_nothing(cli, mirror):
    with LocalServer(mirror) as server:
        error = usage_error(_download(cli, server, "--sha256", f"{GAME}.zip={'f' * 64}"))
    assert f"{GAME}.zip is corrupted or not the published file" in error
    assert f"expected {'f' * 64} (from --sha256)" in error
    assert not (cli.data / "procgen").exists()
    assert not (cli.data / "downloads" / "procgen" / GAME).exists()


def test_an_unknown_game_exits_2_with_did_you_mean(cli, mirror):
    with LocalServer(mirror) as server:
        args = ["--games", "bigfsh", "--from-url", server.url, "--data-root", str(cli.data)]
        error = usage_error(cli("data", "download", "procgen", *args))
        assert server.requests == []
    assert "Unknown procgen game 'bigfsh'. Did you mean 'bigfish'?" in error


def test_a_missing_file_on_the_mirror_is_a_clear_404(cli, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with LocalServer(empty) as server:
        error = usage_error(_download(cli, server))
    assert f"answered 404 Not Found: {GAME}.zip is not there" in error
