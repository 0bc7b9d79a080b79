"""``ssilbench list``: what the loaded plugins registered, and what failed to load."""

from __future__ import annotations

import json
from typing import Any

import click

from ssilbench.cli.app import State


def registered(plugins: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(one row per registered method, environment and architecture; one per broken plugin)."""
    rows = []
    for kind, registry in plugins.registries().items():
        for name in registry.names():
            entry = registry.entries[name]
            rows.append(
                {
                    "kind": kind.rstrip("s"),
                    "name": name,
                    "plugin": entry.origin.plugin,
                    "distribution": entry.origin.distribution,
                    "version": entry.origin.version,
                    "description": entry.description,
                }
            )
    broken = [
        {
            "plugin": b.origin.plugin,
            "distribution": b.origin.distribution,
            "version": b.origin.version,
            "error": b.error,
        }
        for b in plugins.broken
    ]
    return rows, broken


@click.command("list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def list_cmd(state: State, as_json: bool) -> None:
    """List methods, environments and architectures, and plugins that failed to load."""
    rows, broken = registered(state.plugins)
    if as_json:
        click.echo(json.dumps({"entries": rows, "broken": broken}, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for kind in ("method", "environment", "architecture"):
        table = Table(title=f"{kind}s", title_justify="left")
        for col in ("name", "plugin", "distribution", "description"):
            table.add_column(col)
        for row in (r for r in rows if r["kind"] == kind):
            dist = f"{row['distribution']} {row['version']}" if row["distribution"] else "-"
            table.add_row(row["name"], row["plugin"], dist, row["description"])
        console.print(table)
    if broken:
        table = Table(title="broken plugins", title_justify="left", style="red")
        for col in ("plugin", "distribution", "error"):
            table.add_column(col)
        for b in broken:
            dist = f"{b['distribution']} {b['version']}" if b["distribution"] else "-"
            table.add_row(b["plugin"], dist, b["error"])
        console.print(table)
