"""The Procgen analysis from the results store to its files (``ssilbench analyze``): the two
figures, the CSV tables and the Markdown report, named after what was compared."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ssilbench.errors import UsageError
from ssilbench.outputs import write_atomic

if TYPE_CHECKING:
    from ssilbench.plugins import Plugins
    from ssilbench.studies.analysis import Analysis


def writable_folder(folder: Path) -> Path:
    """Create ``folder`` and prove it takes files, before any work is done for it."""
    probe = folder / f".write-probe-{os.getpid()}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise UsageError(
            f"Cannot write to --out {folder}: {exc.strerror or exc}. Choose a writable folder "
            "with --out DIR."
        ) from None
    return folder


def file_names(family: str, method: str, baseline: str, by: str) -> tuple[str, str]:
    """(stem, tag) of the analysis files: ``STEM-TAG.png``, ``STEM-games.csv``, ...

    Anything but letters, digits, '_' and '-' becomes '_' (a '.' would be taken for a
    suffix)."""
    stem, tag = (re.sub(r"[^A-Za-z0-9_-]+", "_", t)
                 for t in (f"{family}-{method}-vs-{baseline}", by))  # fmt: skip
    return stem, tag


def write_analysis(result: Analysis, folder: Path, family: str, report: str) -> list[Path]:
    """Write the figures, the CSV tables and ``report`` (the Markdown) into ``folder``; the
    files written."""
    from ssilbench.studies import analysis_report as ar
    from ssilbench.studies.analysis_figures import complexity_figure, stochasticity_figure

    stem, tag = file_names(family, result.method, result.baseline, result.by)
    hint = "Choose another folder with --out DIR."
    written = [
        *complexity_figure(result, folder / f"{stem}-{tag}"),
        *stochasticity_figure(result, folder / f"{stem}-entropy"),
    ]
    for name, content in (("games.csv", ar.games_csv(result)),
                          (f"{tag}.csv", ar.groups_csv(result)),
                          ("correlation.csv", ar.correlation_csv(result)),
                          ("report.md", report)):  # fmt: skip
        written.append(write_atomic(folder / f"{stem}-{name}", content, hint))
    return written


def analyze_store(
    plugins: Plugins,
    env_ids: Sequence[str],
    wanted: Sequence[str],
    results: str,
    out: Path,
    method: str,
    baseline: str,
    by: str,
    entropy_budget: str | None = None,
) -> tuple[str, list[Path]]:
    """Analyse ``method`` over ``baseline`` on the finished runs of the environments
    ``wanted`` (the ``family:task`` ids that ``env_ids`` expand to), grouped by the metadata
    key ``by``; (the Markdown report, the files written into ``out``)."""
    from ssilbench.data.split import parse_budget
    from ssilbench.errors import did_you_mean
    from ssilbench.runs.store import ResultsStore
    from ssilbench.studies import analysis as an
    from ssilbench.studies.analysis_report import to_markdown

    budget = parse_budget(entropy_budget) if entropy_budget is not None else None
    with ResultsStore.open_read_only(Path(results)) as store:
        records = [r for r in store.rows("done") if r.env in wanted]
    scope = ", ".join(env_ids)
    if not records:
        raise UsageError(
            f"No finished runs of {scope} in {results}: run e.g. 'ssilbench run --method "
            f"{method},{baseline} --env {scope} ...' first (same --results)."
        )
    mine = an.resolve_label(records, method, "--method", scope)
    theirs = an.resolve_label(records, baseline, "--baseline", scope)
    if mine == theirs:
        raise UsageError(f"--method and --baseline both name '{mine}': compare two methods.")
    metadata = an.metadata_from_registry(plugins)
    groups = an.groups_of(records, metadata, by)
    if all(g is None for g in groups.values()):
        keys = sorted({k for r in records for k in metadata(r)})
        raise UsageError(
            f"--by {by}: no environment of {scope} has the metadata key '{by}'."
            f"{did_you_mean(by, keys)} Keys: {', '.join(keys) or '(none)'}."
        )
    folder = writable_folder(out)
    result = an.analyze(records, mine, theirs, groups, by, list(wanted), budget)
    text = to_markdown(result)
    family = env_ids[0].partition(":")[0]
    return text, write_analysis(result, folder, family, text)
