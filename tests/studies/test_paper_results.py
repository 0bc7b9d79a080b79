"""The published maze reports are backed by the runs shipped beside them.

``docs/paper/results/`` holds ``ssilbench results export`` files of the runs behind every
number in ``docs/paper/``; each report there names the command that wrote it, and running that
command again must give the same bytes (Markdown and figures). The fast protocol (the sweep
files' ``[quick]`` overrides) must reach the paper protocol's verdict on every claim both
check, except where ``docs/paper/README.md`` says it does not.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest

from ssilbench.studies.figures import collect
from ssilbench.studies.report import NOT_CHECKED, check
from ssilbench.studies.study import RunSource, study_runs
from ssilbench.testing import cli_exit_code, load_plugins

ROOT = Path(__file__).resolve().parents[2]
PAPER = ROOT / "docs" / "paper"
EXPORTS = {"paper": PAPER / "results" / "mazes-paper.jsonl.gz",
           "fast": PAPER / "results" / "mazes-fast.jsonl.gz"}  # fmt: skip

# (study, claim) -> why the fast protocol reaches another verdict than the paper protocol;
# the same list is in docs/paper/README.md.
FAST_DIFFERS: dict[tuple[str, str], str] = {
    (
        "environment-complexity",
        "The low-capacity VM*-IDM reaches perfect test accuracy with enough samples (positions)",
    ): "the linear IDM needs more than the fast protocol's 3,000 steps: 0.929 at split 1.0",
    (
        "stochastic-environment",
        "A linear IDM yields a strong VM*-IDM policy as long as p(no-op) < 1 (beats LC BC)",
    ): "the linear IDM needs more than the fast protocol's 2,000 steps: 0.408 at split 0.125",
    (
        "environment-complexity",
        "The low-capacity VM*-IDM reaches perfect test accuracy with enough samples (images)",
    ): "3,000 steps leave the IDM far from fitted (0.714 at split 1.0): below 1 is established",
    (
        "environment-complexity",
        "The low-capacity BC policy never reaches perfect test accuracy (images)",
    ): "two seeds: BC (1L CNN) at split 1.0 scores 0.571 and 0.714 (p = 0.063)",
    (
        "image-colours",
        "The low-capacity VM*-IDM reaches perfect test accuracy with enough samples "
        "(images in ssilbench's colours)",
    ): "two seeds: VM*-IDM (1L CNN) at split 1.0 scores 0.429 and 0.714 (p = 0.102)",
    (
        "goal-complexity",
        "... especially by the IDM without goal conditioning (VM*_G-IDM over VM*_G-IDM_G)",
    ): "the fast protocol runs 10 goals only; the paper's 3-goal panel at split 0.05 (7 labeled "
    "transitions) is the one cell short of significance (+0.038, p = 0.142)",
    (
        "stochastic-environment-one-draw",
        "A linear IDM yields a strong VM*-IDM policy as long as p(no-op) < 1 (beats LC BC)",
    ): "as in stochastic-environment: 2,000 steps leave the linear IDM at 0.408 (split 0.125)",
}


def _reports() -> list[Path]:
    return sorted(
        p for p in PAPER.glob("*.md") if p.read_text().startswith("# Replication report\n")
    )


def _command(report: Path) -> list[str]:
    """The arguments of the ``ssilbench report`` command a report says wrote it."""
    found = re.search(r"```\nssilbench (report .*)\n```", report.read_text())
    assert found, f"{report} does not say which command wrote it"
    return shlex.split(found.group(1))


def test_every_report_reads_only_shipped_exports():
    reports = _reports()
    assert {r.name for r in reports} == {"mazes.md", "mazes-fast.md"}
    assert len(STUDIES) == 7 and all(study.is_file() for study in STUDIES)
    for report in reports:
        args = _command(report)
        sources = [args[i + 1] for i, a in enumerate(args) if a == "--from"]
        assert sources and "--results" not in args
        assert all((ROOT / s).is_file() for s in sources), sources


@pytest.mark.parametrize("name", ["mazes.md", "mazes-fast.md"])
def test_a_report_regenerates_byte_for_byte_from_its_exports(tmp_path, monkeypatch, name):
    report = PAPER / name
    args = _command(report)
    inputs = [args[i + 1] for i, a in enumerate(args) if a in ("--sweep", "--from")]
    for relative in inputs:
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / relative, tmp_path / relative)
    monkeypatch.chdir(tmp_path)
    assert cli_exit_code(*args) == 0
    out = Path(args[args.index("--out") + 1])
    assert out.read_bytes() == report.read_bytes()
    figures = re.findall(r"!\[[^\]]*\]\((figures/[^)]+)\)", report.read_text())
    assert figures
    for figure in figures:
        for suffix in (".png", ".svg"):
            drawn = (out.parent / figure).with_suffix(suffix)
            assert drawn.read_bytes() == (PAPER / figure).with_suffix(suffix).read_bytes()


# The studies the reports are made of: the paper's other sweep files (Procgen's, the
# manipulation figure's) have no shipped runs.
STUDIES = [ROOT / arg for arg in _command(PAPER / "mazes.md") if arg.endswith(".toml")]


def _verdicts(study: Path, quick: bool, export: Path) -> dict[str, str]:
    records = RunSource(exports=(str(export),)).records()
    sweep_file, cells, runs = study_runs(load_plugins(), str(study), quick, records)
    panels = collect(runs, cells, sweep_file.metric, sweep_file.display)
    return {claim.text: check(claim, panels).outcome for claim in sweep_file.claim}


@pytest.mark.parametrize("study", STUDIES, ids=lambda p: p.stem)
def test_the_fast_protocol_reaches_the_paper_protocols_verdicts(study):
    paper = _verdicts(study, False, EXPORTS["paper"])
    fast = _verdicts(study, True, EXPORTS["fast"])
    compared = 0
    for text, outcome in paper.items():
        if NOT_CHECKED in (outcome, fast[text]):
            continue
        compared += 1
        if (study.stem, text) in FAST_DIFFERS:
            assert fast[text] != outcome, f"{text!r} now agrees: drop it from FAST_DIFFERS"
        else:
            assert fast[text] == outcome, f"{study.stem}: {text!r}: {fast[text]} vs {outcome}"
    listed = [t for s, t in FAST_DIFFERS if s == study.stem]
    assert all(t in paper for t in listed)


def test_the_readme_quotes_the_paper_reports_headline():
    """docs/paper/README.md quotes the counts of mazes.md's first lines: the paper's claims,
    then the variant's."""
    lines = (PAPER / "mazes.md").read_text().splitlines()
    paper = dict(re.findall(r"(held|not held|not established): (\d+)", lines[2]))
    variant = dict(re.findall(r"(held|not held|not established): (\d+)", lines[4]))
    readme = " ".join((PAPER / "README.md").read_text().split())
    assert (f"(paper protocol: {paper['held']} held, {paper['not held']} not held, "
            f"{paper['not established']} not established)") in readme  # fmt: skip
    assert f"({variant['held']} held, {variant['not held']} not held)" in readme
    assert lines[4].startswith(
        "Claims judged on ssilbench's own variants (image-colours, stochastic-expert-one-dataset, "
        "stochastic-environment-one-draw)"
    )
