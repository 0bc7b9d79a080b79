"""Wall time of one positions panel of the environment-complexity study under its two
protocols: "paper" (the paper's code's settings: up to 100k full-batch steps per stage,
stopping once the training loss is below 1e-7) and the fast protocol of its ``[quick]``
overrides (the suite's stopping rule and a 3k-step cap), on every split and seed of the
panel's smallest maze (maze:10x10: LC and 5L MLP, BC and VM*-IDM, 7 splits x 5 seeds).

Run with ``python -m pytest benchmarks/test_bench_protocols.py`` (one thread, as the
studies run); each protocol is timed once (a round is minutes long).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import tomllib

from ssilbench.testing import cli_exit_code

STUDY = Path(__file__).parent / "paper" / "environment-complexity.toml"
MAZE = "maze:10x10"


def toml_value(value: Any) -> str:
    """A value as TOML (strings, numbers, booleans, arrays and inline tables)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(map(toml_value, value)) + "]"
    return "{ " + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + " }"


def panel_file(folder: Path, protocol: str) -> Path:
    """The study's LC and 5L-MLP blocks on one maze, under ``protocol``."""
    study = tomllib.loads(STUDY.read_text())
    fast = study["quick"]
    blocks = []
    for block in study["block"]:
        if block["name"] not in ("lc", "mlp5"):
            continue
        block = {**block, "envs": [MAZE]}
        if protocol == "fast":
            block.update(steps=fast["steps"], eval_every=fast["eval_every"],
                         stop_early=fast["stop_early"])  # fmt: skip
        blocks.append(block)
    text = f'name = "panel-{protocol}"\n'
    for block in blocks:
        text += "\n[[block]]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in block.items())
    path = folder / f"{protocol}.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("protocol", ["paper", "fast"])
def test_positions_panel(benchmark, tmp_path, protocol):
    sweep = panel_file(tmp_path, protocol)
    data = tmp_path / "data"
    assert cli_exit_code("data", "build", MAZE, "-o", "state=position", "-o", "data=states",
                         "--data-root", str(data)) == 0  # fmt: skip

    def run() -> int:
        results = tmp_path / f"results-{protocol}"
        return cli_exit_code("run", "--sweep", str(sweep), "--results", str(results),
                             "--data-root", str(data), "--threads", "1", "--no-cache",
                             "-q")  # fmt: skip

    assert benchmark.pedantic(run, rounds=1, iterations=1) == 0
