"""The analysis' two figures, after the paper's: return gap per game coloured by class with
the class means, and entropy gap against return gap with Pearson's r."""

from __future__ import annotations

from pathlib import Path

from ssilbench.studies.analysis import Analysis, GameGap
from ssilbench.studies.figures import pyplot, save

UNCLASSED = "unclassified"


def _colours(a: Analysis, plt) -> dict[str, str]:
    # One colour per class shared by both figures, so that one reading carries over.
    names = sorted({g.group or UNCLASSED for g in a.games})
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    return {name: palette[i % len(palette)] for i, name in enumerate(names)}


def _short(env: str) -> str:
    """'procgen:bigfish (num_levels=200)' -> 'bigfish (num_levels=200)'."""
    return env.partition(":")[2] or env


def complexity_figure(a: Analysis, out: Path) -> list[Path]:
    """Bars of each game's return gap (bootstrap interval) beside each class's mean
    (t-interval over its games). Writes ``out``.png and ``out``.svg."""
    plt = pyplot()
    colour = _colours(a, plt)
    games = sorted((g for g in a.games if g.gap is not None),
                   key=lambda g: (g.group or UNCLASSED, -g.gap))  # fmt: skip
    fig, (left, right) = plt.subplots(
        1, 2, figsize=(max(6.0, 0.45 * len(games) + 3.0), 3.8), sharey=True,
        gridspec_kw={"width_ratios": [max(1, len(games)), max(1, len(a.groups)) + 0.5]},
    )  # fmt: skip
    errors = [
        [g.gap - g.interval.low if g.interval else 0.0 for g in games],
        [g.interval.high - g.gap if g.interval else 0.0 for g in games],
    ]
    left.bar(range(len(games)), [g.gap for g in games], yerr=errors, capsize=2,
             color=[colour[g.group or UNCLASSED] for g in games])  # fmt: skip
    left.set_xticks(range(len(games)), [_short(g.env) for g in games], rotation=60,
                    ha="right", fontsize=8)  # fmt: skip
    left.set_ylabel(f"return gap: {a.method} − {a.baseline}")
    left.set_title("per game (95% bootstrap over seeds)", fontsize=9)
    right.bar(range(len(a.groups)), [m.mean for m in a.groups],
              yerr=[m.ci95 or 0.0 for m in a.groups], capsize=4,
              color=[colour[m.group] for m in a.groups])  # fmt: skip
    right.set_xticks(range(len(a.groups)), [f"{m.group}\n(n={len(m.games)})" for m in a.groups],
                     fontsize=8)  # fmt: skip
    right.set_title(f"mean by {a.by}\n(95% t-interval)", fontsize=9)
    for ax in (left, right):
        ax.axhline(0.0, color="black", linewidth=0.8)
        ax.grid(axis="y", alpha=0.3)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colour.values()]
    left.legend(handles, list(colour), title=a.by, fontsize=8, title_fontsize=8)
    fig.suptitle(f"Return gap of {a.method} over {a.baseline} by {a.by}", fontsize=11)
    fig.tight_layout()
    return save(fig, out)


def stochasticity_figure(a: Analysis, out: Path) -> list[Path]:
    """Entropy gap against return gap, one point per game, with the least-squares line and
    Pearson's r in the title. Writes ``out``.png and ``out``.svg."""
    plt = pyplot()
    colour = _colours(a, plt)
    points: list[GameGap] = [g for g in a.games if g.gap is not None and g.entropy_gap is not None]
    fig, ax = plt.subplots(figsize=(5.6, 4.2))
    for group in colour:
        mine = [g for g in points if (g.group or UNCLASSED) == group]
        if mine:
            ax.scatter([g.entropy_gap for g in mine], [g.gap for g in mine], color=colour[group],
                       label=group, zorder=3)  # fmt: skip
    for g in points:
        ax.annotate(_short(g.env), (g.entropy_gap, g.gap), fontsize=7, xytext=(3, 3),
                    textcoords="offset points")  # fmt: skip
    c = a.correlation
    if c is not None:
        import numpy as np

        xs = np.array([g.entropy_gap for g in points])
        slope, intercept = np.polyfit(xs, [g.gap for g in points], 1)
        line = np.linspace(xs.min(), xs.max(), 2)
        ax.plot(line, slope * line + intercept, color="grey", linestyle="--", linewidth=1)
        interval = "" if c.low is None else f", 95% bootstrap [{c.low:.2f}, {c.high:.2f}]"
        text = f"Pearson r = {c.r:.2f} (p = {c.p_value:.2g}{interval}), n = {c.n}"
    else:
        text = f"no correlation: {len(points)} game(s) with both gaps"
    ax.set_title(text, fontsize=8)
    ax.axhline(0.0, color="black", linewidth=0.6)
    ax.set_xlabel(f"entropy gap: H({a.baseline} policy) − H({a.method} IDM) (nats)")
    ax.set_ylabel(f"return gap: {a.method} − {a.baseline}")
    ax.grid(alpha=0.3)
    if points:
        ax.legend(title=a.by, fontsize=8, title_fontsize=8)
    fig.suptitle("Entropy gap vs return gap", fontsize=11)
    fig.tight_layout()
    return save(fig, out)
