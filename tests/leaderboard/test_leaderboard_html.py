"""The HTML leaderboard: self-contained, escaped, and right as a reader sees it in Chromium."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from html import unescape
from pathlib import Path

import numpy as np
import pytest

from ssilbench.leaderboard.curves import RunCurves, curves_section
from ssilbench.leaderboard.html import legend_lines, to_html
from ssilbench.leaderboard.render import render
from ssilbench.leaderboard.table import build_table
from ssilbench.runs.records import RunRecord
from ssilbench.runs.spec import RunSpec

NORM = {"name": "success rate", "low": 0.0, "high": 1.0, "source": "rollout success"}
EVIL = "<script>alert(1)</script>"
ARTIFACTS = Path(
    os.environ.get("SSILBENCH_TEST_ARTIFACTS", Path(__file__).parents[2] / ".test-artifacts")
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


def _points(svg_element: str) -> list[tuple[float, float]]:
    raw = re.search(r'points="([^"]+)"', svg_element).group(1)
    return [tuple(map(float, p.split(","))) for p in raw.split()]


def test_figures_are_large_with_bands_step_profiles_and_seed_tooltips(page):
    html = page.read_text()
    svgs = re.findall(r"<svg.*?</svg>", html, flags=re.S)
    assert len(svgs) == 3
    for svg in svgs:
        width = int(re.search(r'width="(\d+)"', svg).group(1))
        assert width >= 900  # not the ~280 px plot of before
        sizes = [int(f) for f in re.findall(r'<text class="tick"[^>]*font-size="(\d+)"', svg)]
        assert sizes and min(sizes) >= 13
    efficiency, _, profile = svgs
    # A band per method whose cells have an interval (the evil method's seeds agree: a
    # zero-width band still drawn), each enclosing its line.
    bands = re.findall(r'<polygon class="band"[^>]*>', efficiency)
    assert len(bands) == 3
    bc_band = _points(next(b for b in bands if 'data-series="bc"' in b))
    bc_line = _points(re.search(r'<polyline class="series" data-series="bc"[^>]*>',
                                efficiency).group(0))  # fmt: skip
    top, bottom = bc_band[: len(bc_line)], bc_band[len(bc_line) :][::-1]
    for (x, y), (xt, yt), (xb, yb) in zip(bc_line, top, bottom, strict=True):
        assert x == xt == xb and yt < y < yb  # SVG y grows downwards
    # The profile is a step function: every segment is horizontal or vertical.
    for line in re.findall(r'<polyline class="series"[^>]*>', profile):
        pts = _points(line)
        assert len(pts) > 4
        assert all(a[0] == b[0] or a[1] == b[1] for a, b in zip(pts, pts[1:], strict=False))
    assert len(re.findall(r'<polygon class="band"', profile)) == 3
    # Seeds and their values in the tooltips of cells and points.
    assert 'title="bc, N_L=16: seeds 0, 1, 2: 0.200, 0.400, 0.600; ssilbench 0.1.0' in html
    assert "<title>bc, N_L=16 (16 labeled): 0.400 [0.200, 0.600], n=3; seeds 0, 1, 2:" in html
    # The suite's IQM table has the AUC column too, and captions name the interval.
    iqm = re.search(r"<h3>IQM.*?</table>", html, flags=re.S).group(0)
    assert "<th>AUC</th>" in iqm
    assert "95% percentile-bootstrap interval: 2000 resamples of the seeds" in html


# Measures each figure as rendered: its box, the height of its tick and legend text, and
# the number and on-screen area of its bands; written into the page for --dump-dom.
MEASURE = """<script>
var out = [];
document.querySelectorAll("svg.chart").forEach(function (svg) {
  var box = svg.getBoundingClientRect();
  function px(sel) {
    var t = svg.querySelector(sel); return t ? t.getBoundingClientRect().height : 0;
  }
  var area = 0, bands = svg.querySelectorAll("polygon.band");
  bands.forEach(function (b) { var r = b.getBoundingClientRect(); area += r.width * r.height; });
  out.push({width: box.width, height: box.height, tick_px: px("text.tick"),
            legend_px: px("g.legend text"), bands: bands.length, band_area: area});
});
var pre = document.createElement("pre"); pre.id = "measured";
pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
</script>"""


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
    out = chromium(f"--screenshot={shot}", "--window-size=1200,3000", page.as_uri())
    assert out.returncode == 0 and shot.stat().st_size > 10_000, out.stderr[-2000:]

    dom = chromium("--dump-dom", page.as_uri()).stdout
    rows = visible_rows(dom, 0)  # maze:10x10, methods in alphabetical order
    assert [r[0] for r in rows] == [EVIL, "bc", "vm_idm"]
    assert rows[2][1] == "0.600 [0.500, 0.700] (n=3)"
    assert rows[2][2] == "0.950 [0.900, 1.000] (n=3)"
    assert dom.count("<script") == 1  # the plugin's name stayed text
    assert dom.count("<svg") == 3  # two sample-efficiency figures, one performance profile
    assert "maze:all — 2 tasks" in dom

    # As laid out in a 1200 px window: each figure and its text measured in the browser.
    measured = tmp_path / "measured.html"
    measured.write_text(page.read_text().replace("</body>", MEASURE + "</body>"))
    dom = chromium("--window-size=1200,2000", "--dump-dom", measured.as_uri()).stdout
    sizes = json.loads(unescape(re.search(r'<pre id="measured">(.*?)</pre>', dom).group(1)))
    assert len(sizes) == 3
    for figure in sizes:
        assert figure["width"] >= 900 and figure["height"] >= 400, figure
        assert figure["tick_px"] >= 12 and figure["legend_px"] >= 12, figure  # legible text
        assert figure["bands"] == 3 and figure["band_area"] > 10_000, figure

    # The screenshot shows the bands: pixels of bc's red band (#d62728 at 18% on white).
    pixels = np.asarray(pytest.importorskip("PIL.Image").open(shot).convert("RGB"), dtype=int)
    band = int((np.abs(pixels - np.array([248, 216, 216])) <= 6).all(axis=2).sum())
    assert band > 20_000, band

    # Click the N_L=64 header twice (descending) after load, as a reader would.
    clicked = tmp_path / "clicked.html"
    clicked.write_text(page.read_text().replace(
        "</body>", "<script>var th = document.querySelectorAll('table')[0]"
        ".querySelectorAll('th')[2]; th.click(); th.click();</script></body>"))  # fmt: skip
    dom = chromium("--dump-dom", clicked.as_uri()).stdout
    assert [r[0] for r in visible_rows(dom, 0)] == ["vm_idm", "bc", EVIL]
    assert 'aria-sort="descending"' in dom


# -- legends: the whole label, wrapped; a series of one point drawn ---------------------------
LONG = "bc (arch=impala_small, lr=0.0003, batch_size=64)"  # longer than a line of a legend


@pytest.fixture(scope="module")
def legend_page(tmp_path_factory) -> Path:
    scores = {(LONG, "16"): [0.2, 0.4], (LONG, "64"): [0.5, 0.7], ("bc", "16"): [0.3, 0.5]}
    runs = [record("maze:10x10", method, budget, v, seed, int(budget))
            for (method, budget), values in scores.items()
            for seed, v in enumerate(values)]  # fmt: skip
    curves = [RunCurves(f"run{budget}{seed}", "", method, "maze:10x10", budget, seed, {
                  "policy/loss": ([1, 2, 3, 4], [1.0, 0.6, 0.4, 0.3]),
                  "policy/eval/score": ([4], [0.25 + seed / 10]),  # one evaluation
              }) for (method, budget), values in scores.items()
              for seed in range(len(values))]  # fmt: skip
    path = tmp_path_factory.mktemp("legends") / "legends.html"
    path.write_text(to_html(build_table(runs), curves_section(curves)))
    return path


def test_legend_lines_keep_the_whole_label():
    lines = legend_lines(LONG, 20)
    assert len(lines) > 1 and all(len(line) <= 20 for line in lines)
    assert " ".join(lines) == LONG
    assert "".join(legend_lines("x" * 50, 20)) == "x" * 50  # a word longer than a line


# Per chart as laid out: each legend entry's label (its hover title), the text shown (its
# lines joined), its line count and box; the chart's box; each one-point marker's box.
LEGENDS = """<script>
var out = [];
document.querySelectorAll("svg").forEach(function (svg) {
  var box = svg.getBoundingClientRect(), keys = [], points = [];
  svg.querySelectorAll("g.legend").forEach(function (g) {
    var spans = Array.prototype.map.call(g.querySelectorAll("tspan"),
                                         function (t) { return t.textContent; });
    var r = g.querySelector("text").getBoundingClientRect();
    keys.push({label: g.querySelector("title").textContent, shown: spans.join(" "),
               lines: spans.length, left: r.left, right: r.right, top: r.top,
               bottom: r.bottom});
  });
  svg.querySelectorAll("circle.point").forEach(function (c) {
    var r = c.getBoundingClientRect();
    points.push({width: r.width, inside: r.left >= box.left && r.right <= box.right
                 && r.top >= box.top && r.bottom <= box.bottom});
  });
  out.push({title: svg.getAttribute("aria-label"), right: box.right, bottom: box.bottom,
            keys: keys, points: points});
});
var pre = document.createElement("pre"); pre.id = "legends";
pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
</script>"""


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed")
def test_chromium_shows_whole_wrapped_legends_and_one_point_series(legend_page, tmp_path):
    page = tmp_path / "measured.html"
    page.write_text(legend_page.read_text().replace("</body>", LEGENDS + "</body>"))
    dom = chromium("--window-size=1200,3000", "--dump-dom", page.as_uri()).stdout
    charts = json.loads(unescape(re.search(r'<pre id="legends">(.*?)</pre>', dom).group(1)))
    by_title = {c["title"]: c for c in charts}
    efficiency = by_title["maze:10x10: sample efficiency"]
    score = by_title["maze:10x10: policy/eval/score"]
    assert {k["label"] for k in score["keys"]} == {f"{LONG} N_L=16", f"{LONG} N_L=64",
                                                   "bc N_L=16"}  # fmt: skip
    for chart in charts:
        keys = chart["keys"]
        for key in keys:
            assert key["shown"] == key["label"], key  # the whole label, not cut
            assert key["right"] <= chart["right"] and key["bottom"] <= chart["bottom"], key
            if len(key["label"]) > 30:
                assert key["lines"] > 1, key  # wrapped
        for upper, lower in zip(keys, keys[1:], strict=False):
            assert upper["bottom"] <= lower["top"] + 1, (upper, lower)  # no two overlap
    assert any(k["label"] == LONG and k["lines"] > 1 for k in efficiency["keys"])
    # Each run's one evaluation: a line of one point, drawn as a visible point.
    assert len(score["points"]) == 3
    assert all(p["width"] > 3 and p["inside"] for p in score["points"]), score["points"]
