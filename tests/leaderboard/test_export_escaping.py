"""Leaderboard exports are safe to open whatever a merged store's labels hold: Markdown shows
no link, image or tag a label wrote, CSV cells never start a spreadsheet formula, LaTeX runs
no command a label wrote, HTML holds no element or attribute a label wrote, and JSON keeps
every label exactly (a property test over hostile labels, through every format)."""

from __future__ import annotations

import csv
import io
import json
import re
from html.parser import HTMLParser

from hypothesis import given, settings
from hypothesis import strategies as st

from ssilbench.leaderboard.render import FORMULA_STARTS, csv_cell, md_escape, render
from ssilbench.leaderboard.table import build_table
from ssilbench.runs.records import RunRecord
from ssilbench.runs.spec import RunSpec

HOSTILE = ["[x](javascript:alert(1))", "![](http://evil.example/p.png)", "[a][b]", "<b>",
           "<script>alert(1)</script>", "=HYPERLINK(\"http://e\")", "+1+2", "-2+3", "@SUM(A1)",
           "\t=1", "|", "`", "\\", "\\input{/etc/passwd}", "%", "$", "&", "_", "{", "}", "~",
           "^", "\n", "\r", "'", '"', "&lt;", "<img src=x onerror=alert(1)>",
           "<a href=\"javascript:x\">"]  # fmt: skip
labels = (
    st.lists(st.sampled_from(HOSTILE) | st.text(max_size=6), min_size=1, max_size=4)
    .map("".join)
    .filter(str.strip)
)  # a blank label reads as the id it labels


def table_of(method: str, env: str):
    records = [
        RunRecord.of(RunSpec(method="bc", config={}, env="maze:10x10", options={}, budget="16",
                             seed=seed, steps=20, eval_every=20),
                     method, env, score=0.25 * (seed + 1), metrics={}, finished_at=1.0)
        for seed in (0, 1)
    ]  # fmt: skip
    return build_table(records)


def markdown_html(text: str) -> str:
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark").enable("table")
    md.validateLink = lambda url: True  # as permissive as any renderer: javascript: too
    return md.render(text)


class Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, tuple[str, ...]]] = []

    def handle_starttag(self, tag, attrs):
        self.found.append((tag, tuple(sorted(name for name, _ in attrs))))


def elements(page: str) -> list[tuple[str, tuple[str, ...]]]:
    parser = Elements()
    parser.feed(page)
    return parser.found


BENIGN = table_of("bc", "maze:10x10")


@settings(max_examples=60, deadline=None)
@given(method=labels, env=labels)
def test_hostile_labels_are_inert_in_every_format(method, env):
    table = table_of(method, env)

    shown = markdown_html(render(table, "md"))
    assert "<a " not in shown and "<img" not in shown and "<script" not in shown
    assert "<b>" not in shown and "<a>" not in shown

    rows = list(csv.reader(io.StringIO(render(table, "csv"))))
    assert {len(row) for row in rows} == {len(rows[0])}  # no label split a row
    for row in rows:
        for cell in row:
            assert not cell.startswith(FORMULA_STARTS) or csv_cell(cell) == cell, cell

    doc = json.loads(render(table, "json"))
    assert [t["env"] for t in doc["tables"]] == [env]
    assert method in doc["tables"][0]["methods"]

    tex, plain = render(table, "tex"), render(BENIGN, "tex")
    safe = {"textbackslash", "textasciitilde", "textasciicircum", "textless", "textgreater",
            "textbar"}  # fmt: skip
    assert set(re.findall(r"\\([A-Za-z]+)", tex)) <= set(re.findall(r"\\([A-Za-z]+)", plain)) | safe
    assert re.search(r"(?<!\\)%", tex.split("\n", 1)[1]) is None  # no comment cuts a row

    assert elements(render(table, "html")) == elements(render(BENIGN, "html"))


def test_markdown_escapes_links_and_images():
    assert "<a " not in markdown_html(md_escape("[x](http://e)"))
    assert "<img" not in markdown_html(md_escape("![](http://e/i.png)"))
    assert "<a " in markdown_html("[x](http://e)")  # the check itself sees a live link


def test_csv_cells_that_start_formulas_get_an_apostrophe_and_numbers_stay():
    assert [csv_cell(v) for v in ["=1+1", "+1+2", "-2+3", "@A1", "\t=1", "\r=1", "bc"]] == [
        "'=1+1", "'+1+2", "'-2+3", "'@A1", "'\t=1", "'\n=1", "bc"]  # fmt: skip
    assert [csv_cell(v) for v in ["-0.5", "+1e3", 3, None]] == ["-0.5", "+1e3", 3, None]
