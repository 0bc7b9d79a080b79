"""``ssilbench list``: what the loaded plugins registered, what failed to load, and for each
environment its tasks, the extra it needs and which of its datasets are here.

Extras are checked from the installed distributions' metadata (no simulator is imported),
datasets by opening them read-only without hashing their files (a run verifies them), so
listing stays quick with gigabytes of data under the data root.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import textwrap
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import click
from pydantic import BaseModel, ValidationError

from ssilbench.cli.app import State
from ssilbench.cli.options import data_root_option
from ssilbench.cli.tasks import environment_options
from ssilbench.errors import unknown
from ssilbench.planning.values import named_values, type_text

SHOWN_TASKS = 4  # a family with more tasks shows its count and the first few


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
                    "version": entry.origin.release,
                    "description": entry.description,
                }
            )
    broken = [
        {
            "plugin": b.origin.plugin,
            "distribution": b.origin.distribution,
            "version": b.origin.release,
            "error": b.error,
        }
        for b in plugins.broken
    ]
    return rows, broken


# --- extras -----------------------------------------------------------------------------


@dataclass
class Extra:
    """One optional extra of a distribution: its requirements that apply here, and which of
    them are not installed."""

    distribution: str
    name: str
    packages: list[str]
    missing: list[str]

    @property
    def installed(self) -> bool:
        return not self.missing

    @property
    def install(self) -> str:
        return f"pip install '{self.distribution}[{self.name}]'"

    def as_dict(self) -> dict[str, Any]:
        return {"distribution": self.distribution, "extra": self.name,
                "packages": self.packages, "missing": self.missing,
                "installed": self.installed, "install": self.install}  # fmt: skip


_EXTRA = re.compile(r"""extra\s*==\s*['"]([^'"]+)['"]""")
_PYTHON = re.compile(r"""python_version\s*(<=|>=|<|>|==|!=)\s*['"]([0-9.]+)['"]""")


def _applies(marker: str) -> bool:
    """Whether a requirement's marker (less its extra) holds here. ``packaging`` evaluates
    it where installed; else the python_version clauses the built-in extras use are read."""
    try:
        from packaging.markers import Marker

        rest = _EXTRA.sub("extra == 'x'", marker)
        return Marker(rest).evaluate({"extra": "x"})
    except ImportError:
        here = tuple(sys.version_info[:2])
        for op, version in _PYTHON.findall(marker):
            wanted = tuple(int(x) for x in version.split(".")[:2])
            holds = {
                "<": here < wanted,
                "<=": here <= wanted,
                ">": here > wanted,
                ">=": here >= wanted,
                "==": here == wanted,
            }.get(op, here != wanted)
            if not holds:
                return False
        return True


def _installed(name: str) -> bool:
    try:
        metadata.version(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def distribution_extras(distribution: str) -> list[Extra]:
    """The extras of an installed distribution (dev left out: it is for working on the
    distribution, not for using it), each with its requirements and the missing ones."""
    try:
        requires = metadata.requires(distribution) or []
    except metadata.PackageNotFoundError:
        return []
    extras: dict[str, Extra] = {}
    for line in requires:
        spec, _, marker = line.partition(";")
        found = _EXTRA.search(marker)
        if not found or found.group(1) == "dev":
            continue
        extra = extras.setdefault(found.group(1), Extra(distribution, found.group(1), [], []))
        if not _applies(marker):
            continue
        name = re.split(r"[\s<>=!~\[(;]", spec.strip(), maxsplit=1)[0]
        extra.packages.append(name)
        if not _installed(name):
            extra.missing.append(name)
    for name in _declared_extras(distribution):
        extras.setdefault(name, Extra(distribution, name, [], []))
    return sorted(extras.values(), key=lambda e: e.name)


def _declared_extras(distribution: str) -> list[str]:
    """Extras declared without requirements (``uva = []``) appear only as Provides-Extra."""
    try:
        names = metadata.metadata(distribution).get_all("Provides-Extra") or []
    except metadata.PackageNotFoundError:
        return []
    return [n for n in names if n != "dev"]


def environment_extra(entry: Any, extras: dict[str, list[Extra]]) -> Extra | None:
    """The extra an environment needs: its distribution's extra named like the plugin that
    registers it (the ``procgen`` plugin's ``[procgen]``); None where there is none."""
    dist = entry.origin.distribution
    return next((e for e in extras.get(dist or "", []) if e.name == entry.origin.plugin), None)


# --- tasks and datasets -------------------------------------------------------------------


def environment_status(plugins: Any, name: str, data_root: Path) -> dict[str, Any]:
    """An environment's tasks and, for each with its default options, whether its dataset
    is under ``data_root``: ``present``, ``built on first use`` (a run builds it), or
    ``absent`` with the plugin's message on what to do. Nothing is written or hashed."""
    from ssilbench.data.datasets import DatasetNotBuilt, read_only, task_dataset, unverified
    from ssilbench.errors import SsilbenchError

    try:
        environment = plugins.environments.create(name)
        tasks = list(environment.tasks())
        options = environment_options(environment, name, {})  # what a run with no -o takes
    except Exception as exc:  # noqa: BLE001 - a broken environment is listed, not fatal
        return {"tasks": [], "error": f"{type(exc).__name__}: {exc}", "datasets": {}}
    datasets: dict[str, dict[str, str]] = {}
    for task_name in tasks:
        try:
            task = environment.load(task_name, options)
            with read_only(), unverified():
                task_dataset(task, data_root)
            datasets[task_name] = {"status": "present"}
        except DatasetNotBuilt:
            datasets[task_name] = {"status": "built on first use"}
        except SsilbenchError as exc:
            datasets[task_name] = {"status": "absent", "message": str(exc)}
        except Exception as exc:  # noqa: BLE001 - a plugin bug shows, the listing goes on
            datasets[task_name] = {"status": "error", "message": f"{type(exc).__name__}: {exc}"}
    return {"tasks": tasks, "datasets": datasets}


def task_summary(tasks: list[str], shown: int = SHOWN_TASKS) -> str:
    """'10x10, 20x20, 50x50', or '16: bigfish, bossfight, caveflyer, chaser, …'."""
    if len(tasks) <= shown:
        return ", ".join(tasks) or "-"
    return f"{len(tasks)}: {', '.join(tasks[:shown])}, …"


def dataset_summary(datasets: dict[str, dict[str, str]]) -> str:
    """'3 of 16 present (bigfish, coinrun, ninja)', 'built on first use', ..."""
    if not datasets:
        return "-"
    statuses = [d["status"] for d in datasets.values()]
    if all(s == "built on first use" for s in statuses):
        return "built on first use"
    present = [t for t, d in datasets.items() if d["status"] == "present"]
    text = f"{len(present)} of {len(datasets)} present"
    if present and len(present) < len(datasets):
        text += f" ({task_summary(present)})"
    building = statuses.count("built on first use")
    if building:
        text += f", {building} built on first use"
    return text


# --- the command --------------------------------------------------------------------------


@click.command("list")
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@data_root_option
@click.pass_obj
def list_cmd(state: State, name: str | None, as_json: bool, data_root: str) -> None:
    """List methods, environments (tasks, extra, datasets) and architectures, the extras
    and whether they are installed, and plugins that failed to load. With NAME (a method,
    environment family or architecture): its settings, each with its type, default and
    meaning: a method's config (-c), a family's options (-o), an architecture's options."""
    if name is not None:
        _print_settings(settings_of(state.plugins, name), as_json)
        return
    root = Path(data_root).expanduser()
    rows, broken = registered(state.plugins)
    dists = sorted({r["distribution"] for r in rows if r["distribution"]})
    extras = {d: distribution_extras(d) for d in dists}
    environments = state.plugins.environments
    for row in rows:
        if row["kind"] != "environment":
            continue
        extra = environment_extra(environments.entries[row["name"]], extras)
        row["extra"] = extra.as_dict() if extra is not None else None
        row.update(environment_status(state.plugins, row["name"], root))
    every_extra = [e.as_dict() for d in dists for e in extras[d]]
    if as_json:
        click.echo(json.dumps({"entries": rows, "broken": broken, "extras": every_extra,
                               "data_root": str(root)}, indent=2))  # fmt: skip
        return
    _print_tables(rows, broken, every_extra, root)


def _print_tables(rows: list[dict[str, Any]], broken: list[dict[str, Any]],
                  extras: list[dict[str, Any]], root: Path) -> None:  # fmt: skip
    from rich.console import Console

    console = Console()
    for kind in ("method", "environment", "architecture"):
        title = f"{kind}s" + (f" (datasets under {root})" if kind == "environment" else "")
        columns = ("name", "plugin", "distribution", "description")
        if kind == "environment":
            columns = ("name", "tasks", "extra", "datasets", "plugin", "description")
        cells = []
        for row in (r for r in rows if r["kind"] == kind):
            dist = f"{row['distribution']} {row['version']}" if row["distribution"] else "-"
            if kind != "environment":
                cells.append((row["name"], row["plugin"], dist, row["description"]))
                continue
            extra = row.get("extra")
            needs = "-"
            if extra is not None:
                needs = f"[{extra['extra']}] {'installed' if extra['installed'] else 'missing'}"
            tasks = task_summary(row["tasks"]) if "error" not in row else f"error: {row['error']}"
            cells.append((row["name"], tasks, needs, dataset_summary(row["datasets"]),
                          row["plugin"], row["description"]))  # fmt: skip
        _show(console, title, columns, cells)
    if extras:
        cells = [(f"{e['distribution']}[{e['extra']}]",
                  "installed" if e["installed"] else f"missing: {', '.join(e['missing'])}",
                  ", ".join(e["packages"]) or "-", e["install"]) for e in extras]  # fmt: skip
        _show(console, "extras", ("extra", "status", "packages", "install"), cells)
    if broken:
        cells = [(b["plugin"], f"{b['distribution']} {b['version']}" if b["distribution"]
                  else "-", b["error"]) for b in broken]  # fmt: skip
        _show(console, "broken plugins", ("plugin", "distribution", "error"), cells, "red")


# --- one name's settings -----------------------------------------------------------------

# kind -> (the class attribute holding its settings model, what they are, how they are given)
SETTINGS = {
    "method": ("Config", "config", "-c KEY=VALUE"),
    "environment": ("Options", "options", "-o KEY=VALUE"),
    "architecture": ("Options", "options", "-c 'arch_options={\"KEY\": VALUE}'"),
}


def settings_of(plugins: Any, name: str) -> list[dict[str, Any]]:
    """For each kind that registers ``name``: its plugin, description and the fields of its
    settings model (name, type, default, description; an environment's also whether the
    field follows the run's seed). An UnknownNameError where no kind registers it."""
    found = []
    for kind, registry in plugins.registries().items():
        kind = kind.rstrip("s")
        if name not in registry or kind not in SETTINGS:
            continue
        cls = registry.load(name)
        model = getattr(cls, SETTINGS[kind][0], None)
        per_seed = set(getattr(cls, "per_seed_options", ()))
        runs_take = run_defaults_of(cls, model) if kind == "environment" and model else {}
        fields = [{"name": field, "type": type_text(info.annotation),
                   "default": info.get_default(call_default_factory=True),
                   "description": info.description or "", "per_seed": field in per_seed}
                  | _changed_default(info.get_default(), runs_take.get(field, []))
                  for field, info in (model.model_fields.items() if model else [])]  # fmt: skip
        entry, (_, noun, flag) = registry.entry(name), SETTINGS[kind]
        found.append({"kind": kind, "name": name, "plugin": entry.origin.plugin,
                      "description": entry.description, "given_as": f"{noun}, {flag}",
                      "settings": noun, "fields": fields})  # fmt: skip
    if not found:
        every = {n for registry in plugins.registries().values() for n in registry.names()}
        raise unknown("method, environment or architecture", name, every)
    return found


def run_defaults_of(cls: Any, model: type[BaseModel]) -> dict[str, list[tuple[Any, dict]]]:
    """What an environment's ``run_defaults`` gives each field: ``(value, options)`` pairs,
    ``options`` empty where the defaults give it, else the one named value of another field
    under which it does (the maze's palette: ``("paper", {"state": "image"})``)."""
    base = cls.run_defaults(model())
    found = {k: [(v, {})] for k, v in base.items()}
    for name, info in model.model_fields.items():
        for value in named_values(info.annotation):
            try:
                given = cls.run_defaults(model(**{name: value}))
            except ValidationError:  # the value needs other options: not a plain condition
                continue
            for k, v in given.items():
                if k != name and base.get(k) != v and (v, {name: value}) not in found.get(k, []):
                    found.setdefault(k, []).append((v, {name: value}))
    return found


def _changed_default(recorded: Any, taken: list[tuple[Any, dict]]) -> dict[str, Any]:
    """A field's entries for the defaults new runs take in place of the model's: the
    unconditional one as ``default``, the others under ``default_when``; ``recorded_default``
    is what a recorded run without the field has."""
    if not taken:
        return {}
    out: dict[str, Any] = {"recorded_default": recorded}
    for value, options in taken:
        if options:
            out.setdefault("default_when", []).append({"value": value, "options": options})
        else:
            out["default"] = value
    return out


def _print_settings(found: list[dict[str, Any]], as_json: bool) -> None:
    """Each field as a record: its name, type and default on one line, its meaning below
    (descriptions are sentences, too long for a table column)."""
    if as_json:
        click.echo(json.dumps(found, indent=2, default=str))
        return
    width = max(40, shutil.get_terminal_size().columns - 6)
    for item in found:
        head = f"{item['kind']} {item['name']} (plugin {item['plugin']}): {item['description']}"
        click.echo("\n".join(textwrap.wrap(head, width + 6)))
        if not item["fields"]:
            click.echo(f"  no {item['settings']}")
            continue
        click.echo(f"{item['given_as']}:")
        for f in item["fields"]:
            notes = ", or the run's seed (per seed)" if f["per_seed"] else ""
            for when in f.get("default_when", []):  # Environment.run_defaults
                where = ", ".join(f"{k}={v}" for k, v in when["options"].items())
                notes += f"; {json.dumps(when['value'], default=str)} with {where}"
            if "recorded_default" in f:
                earlier = json.dumps(f["recorded_default"], default=str)
                notes += f" (a recorded run that leaves it out: {earlier})"
            default = json.dumps(f["default"], default=str)
            head = f"  {f['name']}: {f['type']}; default {default}{notes}"
            lines = textwrap.wrap(head, max(100, width + 6), subsequent_indent=" " * 6)
            click.echo("\n".join(lines))
            for line in textwrap.wrap(f["description"], width):
                click.echo(f"      {line}")
        if any(f["per_seed"] for f in item["fields"]):
            note = (
                "(per seed): where a sweep leaves the option unset, each run takes its "
                "seed as the value, where the family applies it (its card says when)."
            )
            click.echo("\n".join(textwrap.wrap(note, width + 6)))


def _show(console: Any, title: str, columns: tuple[str, ...], rows: list[tuple[str, ...]],
          style: str | None = None) -> None:  # fmt: skip
    """A table whose cells wrap between words, never inside a name, path or command: each
    column is at least as wide as its longest word. Where those widths do not fit the
    terminal, each row is printed as an indented record instead (one field a line)."""
    from rich.markup import escape
    from rich.table import Table

    widths = [max(len(w) for cell in (col, *(r[i] for r in rows)) for w in cell.split() or [""])
              for i, col in enumerate(columns)]  # fmt: skip
    if sum(widths) + 3 * len(columns) + 1 > console.width:
        console.print(title, style=style, markup=False, highlight=False)
        for row in rows:
            console.print(f"  {row[0]}", style=style, markup=False, highlight=False)
            for column, cell in zip(columns[1:], row[1:], strict=True):
                console.print(f"    {column}: {cell}", markup=False, highlight=False)
        return
    table = Table(title=title, title_justify="left", style=style)
    for column, width in zip(columns, widths, strict=True):
        table.add_column(column, min_width=width)
    for row in rows:
        table.add_row(*map(escape, row))
    console.print(table)
