"""The HTML leaderboard: self-contained, escaped, and right as a reader sees it in Chromium."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from html import unescape
from pathlib import Path

import pytest

from ssilbench.leaderboard.render import render
from ssilbench.leaderboard.table import build_table
from ssilbench.runner.results_db import RunRecord
from ssilbench.runner.spec import RunSpec

NORM = {"name": "success rate", "low": 0.0, "high": 1.0, "source": "rollout success"}
EVIL = "<script>alert(1)</script>"
ARTIFACTS = Path(
    os.environ.get("SSILBENCH_TEST_ARTIFACTS", Path(__file__).parent.parent / ".test-artifacts")
)
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update",
         "--disable-sync"]  # fmt: skip


def record(env, method, budget, score, seed, n) -> RunRecord:
    spec = RunSpec(method=method, config={}, env=env, options={}, budget=budget, seed=seed,
                   steps=100, eval_every=50)  # fmt: skip
    versions = {"ssilbench": "0.1.0", "git": "abc1234", "torch": "2.13.0"}
    device = "cpu (x86_64, 1 threads)"
    return RunRecord.of(spec, score=score, metrics={}, report="final", normaliser=NORM,
                        n_labeled=n, device=device, versions=versions)  # fmt: skip


def records():
    out = []
    scores = {
        ("bc", "16"): [0.2, 0.4, 0.6], ("bc", "64"): [0.5, 0.7, 0.6],
        ("vm_idm", "16"): [0.5, 0.6, 0.7], ("vm_idm", "64"): [0.9, 1.0, 0.95],
        (EVIL, "16"): [0.1, 0.1, 0.1], (EVIL, "64"): [0.3, 0.3, 0.3],
    }  # fmt: skip
    for env in ("maze:10x10", "maze:20x20"):
        for (method, budget), values in scores.items():
            for seed, v in enumerate(values):
                out.append(record(env, method, budget, v, seed, int(budget)))
    return out


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("html") / "leaderboard.html"
    path.write_text(render(build_table(records()), "html"))
    return path


def test_the_page_is_self_contained_and_escapes_plugin_names(page):
    html = page.read_text()
    assert html.count("<script>") == 1  # the page's own sorting script, nothing injected
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert not re.search(r"(src|href)=\"https?:", html)  # nothing fetched at view time
    assert "<svg" in html and "<polyline" in html
    assert "git abc1234" in html and "success rate" in html


def chromium(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    profile = ARTIFACTS / "chromium-profile"
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


def visible_rows(dom: str, table_index: int) -> list[list[str]]:
    table = re.findall(r"<table.*?</table>", dom, flags=re.S)[table_index]
    rows = re.findall(r"<tr>(.*?)</tr>", table.split("<tbody>")[1], flags=re.S)
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", r, flags=re.S) for r in rows]
    return [[unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in row] for row in cells]


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed")
def test_chromium_shows_the_numbers_sorts_the_table_and_draws_the_figures(page, tmp_path):
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "leaderboard.png"
    out = chromium(f"--screenshot={shot}", "--window-size=1200,2000", page.as_uri())
    assert out.returncode == 0 and shot.stat().st_size > 10_000, out.stderr[-2000:]

    dom = chromium("--dump-dom", page.as_uri()).stdout
    rows = visible_rows(dom, 0)  # maze:10x10, methods in alphabetical order
    assert [r[0] for r in rows] == [EVIL, "bc", "vm_idm"]
    assert rows[2][1].startswith("0.600 ± 0.248") and rows[2][2].startswith("0.950 ± 0.124")
    assert dom.count("<script") == 1  # the plugin's name stayed text
    assert dom.count("<svg") == 3  # two sample-efficiency figures, one performance profile
    assert "maze:all — 2 tasks" in dom

    # Click the N_L=64 header twice (descending) after load, as a reader would.
    clicked = tmp_path / "clicked.html"
    clicked.write_text(page.read_text().replace(
        "</body>", "<script>var th = document.querySelectorAll('table')[0]"
        ".querySelectorAll('th')[2]; th.click(); th.click();</script></body>"))  # fmt: skip
    dom = chromium("--dump-dom", clicked.as_uri()).stdout
    assert [r[0] for r in visible_rows(dom, 0)] == ["vm_idm", "bc", EVIL]
    assert 'aria-sort="descending"' in dom
