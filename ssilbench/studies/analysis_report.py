"""The analysis as text: a Markdown report and CSV tables (games, classes, correlation)."""

from __future__ import annotations

import io

from ssilbench.leaderboard.aggregate import BOOTSTRAP_REPS, BOOTSTRAP_SEED
from ssilbench.leaderboard.render import SafeWriter, md_escape
from ssilbench.studies.analysis import IDM_ENTROPY, POLICY_ENTROPY, Analysis


def _f(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _p(value: float) -> str:
    return f"{value:.3g}" if value >= 1e-4 else f"{value:.1e}"


def to_markdown(a: Analysis) -> str:
    method, baseline = md_escape(a.method), md_escape(a.baseline)
    lines = [
        f"# Analysis: {method} over {baseline}, by {a.by}\n",
        f"| game | {a.by} | return gap [95% interval] | budgets | runs | "
        "H(policy) | H(IDM) | entropy gap | notes |",
        "|---|---|---:|---|---:|---:|---:|---:|---|",
    ]
    for g in a.games:
        gap = _f(g.gap)
        if g.interval is not None:
            gap += f" [{g.interval.low:.3f}, {g.interval.high:.3f}]"
        budgets = ", ".join(g.budgets) or "–"
        at = f" (N_L={g.entropy_budget})" if g.entropy_budget else ""
        lines.append(
            f"| {md_escape(g.env)} | {g.group or '–'} | {gap} | {budgets} | "
            f"{g.method_runs} / {g.baseline_runs} | {_f(g.policy_entropy)} | "
            f"{_f(g.idm_entropy)} | {_f(g.entropy_gap)}{at} | {md_escape('; '.join(g.notes))} |"
        )
    lines += [
        "",
        f"Return gap: normalised score of {method} minus {baseline}, mean over "
        "seeds, then over the label budgets both were run at; interval: 95% bootstrap of the "
        f"seeds within each budget ({BOOTSTRAP_REPS} resamples, seed {BOOTSTRAP_SEED}). Runs: "
        f"{method} / {baseline}. Entropies (nats, test split): {POLICY_ENTROPY} "
        f"of {baseline} and {IDM_ENTROPY} of {method}, mean over seeds at the "
        "budget shown (by default the largest both recorded).",
        "",
        f"## Return gap by {a.by}\n",
        f"| {a.by} | games | mean return gap | 95% t-interval |",
        "|---|---:|---:|---:|",
    ]
    for m in a.groups:
        ci = "–" if m.ci95 is None else f"[{m.mean - m.ci95:.3f}, {m.mean + m.ci95:.3f}]"
        lines.append(f"| {m.group} | {len(m.games)} | {m.mean:.3f} | {ci} |")
    lines += ["", "## Entropy gap vs return gap\n"]
    c = a.correlation
    if c is None:
        lines.append("Not enough games with both gaps for a correlation.")
    else:
        interval = "–" if c.low is None else f"[{c.low:.3f}, {c.high:.3f}]"
        lines += [
            "| n games | Pearson r | p-value (t-test) | 95% bootstrap interval |",
            "|---:|---:|---:|---:|",
            f"| {c.n} | {c.r:.3f} | {_p(c.p_value)} | {interval} |",
        ]
    if a.notes:
        lines += ["", "Notes:", *(f"- {md_escape(n)}" for n in a.notes)]
    return "\n".join(lines) + "\n"


def _csv(header: list[str], rows: list[list[object]]) -> str:
    buffer = io.StringIO()
    writer = SafeWriter(buffer)
    writer.writerow(header)
    for row in rows:
        writer.writerow(["" if v is None else v for v in row])
    return buffer.getvalue()


def games_csv(a: Analysis) -> str:
    header = ["env", a.by, "method", "baseline", "return_gap", "gap_low", "gap_high",
              "budgets", "method_runs", "baseline_runs", "policy_entropy", "idm_entropy",
              "entropy_gap", "entropy_budget", "notes"]  # fmt: skip
    rows = [
        [g.env, g.group, a.method, a.baseline, g.gap,
         g.interval.low if g.interval else None, g.interval.high if g.interval else None,
         " ".join(g.budgets), g.method_runs, g.baseline_runs, g.policy_entropy, g.idm_entropy,
         g.entropy_gap, g.entropy_budget, "; ".join(g.notes)]
        for g in a.games
    ]  # fmt: skip
    return _csv(header, rows)


def groups_csv(a: Analysis) -> str:
    rows = [
        [m.group, len(m.games), m.mean,
         None if m.ci95 is None else m.mean - m.ci95, None if m.ci95 is None else m.mean + m.ci95,
         " ".join(m.games)]
        for m in a.groups
    ]  # fmt: skip
    return _csv([a.by, "games", "mean_return_gap", "ci95_low", "ci95_high", "envs"], rows)


def correlation_csv(a: Analysis) -> str:
    c = a.correlation
    rows = [] if c is None else [[c.n, c.r, c.p_value, c.low, c.high]]
    return _csv(["n", "pearson_r", "p_value", "bootstrap_low", "bootstrap_high"], rows)
