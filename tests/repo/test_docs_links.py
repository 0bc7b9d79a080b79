"""Every relative link of the docs and the README reaches a file that exists, and every
``#anchor`` a heading of that file (GitHub's heading slugs), so that moving a section
(e.g. measurement detail into an appendix) cannot leave a reader at a dead link."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")),
         *sorted((ROOT / "leaderboard").glob("*.md"))]  # fmt: skip
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    found: set[str] = set()
    for line in text.splitlines():
        if line.startswith("#"):
            base = slug(line.lstrip("#"))
            n, name = 0, base
            while name in found:  # GitHub numbers repeated headings: name, name-1, ...
                n += 1
                name = f"{base}-{n}"
            found.add(name)
    found.update(re.findall(r'<a (?:name|id)="([^"]+)"', text))
    return found


def links(page: Path) -> list[str]:
    return LINK.findall(FENCE.sub("", page.read_text()))


def test_the_slug_rule_matches_githubs_on_the_guides_headings():
    assert slug("Options (-o) and method config (-c)") == "options--o-and-method-config--c"
    assert slug("Getting the data: `ssilbench data download`") == (
        "getting-the-data-ssilbench-data-download"
    )


def test_every_relative_link_and_anchor_of_the_docs_resolves():
    dead: list[str] = []
    for page in PAGES:
        for target in links(page):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                dead.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                dead.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert dead == [], "dead links:\n" + "\n".join(dead)
