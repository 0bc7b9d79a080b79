"""The ``leaderboard`` kind of the docs' checked examples, for
``tests/repo/test_docs_examples.py``: the runs behind a two-seed leaderboard rebuilt from its
cells, and the leaderboard the code makes of them compared with the block."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

CELL = re.compile(r"^(\*\*)?(\d+\.\d{3}) \[(\d+\.\d{3}), (\d+\.\d{3})\] \(n=2\)(\*\*)?$")


def check_leaderboard(block: str, args: list[str], where: str) -> None:
    from ssilbench.cli.tasks import environment_options
    from ssilbench.data.datasets import task_dataset
    from ssilbench.leaderboard.render import to_markdown
    from ssilbench.leaderboard.table import build_table
    from ssilbench.planning.plan import TaskInfo
    from ssilbench.plugins import load_plugins
    from ssilbench.runner.worker import setup_provenance
    from ssilbench.runs.records import RunRecord
    from ssilbench.runs.spec import RunSpec

    lines = block.splitlines()
    env = next((line[3:] for line in lines if line.startswith("## ")), args[0] if args else "")
    assert env, f"{where}: name the environment (a '## ENV' heading, or the marker's argument)"
    family, task = env.split(":")
    environment = load_plugins().environments.create(family)
    options = environment_options(environment, family, {})  # what a run with no -o takes
    loaded = environment.load(task, options)
    spec = loaded.spec
    normaliser, episodes = spec.normaliser, spec.eval_episodes
    # What a run of the block's command records beside its versions: the task's dataset,
    # built here as a run builds it, and its family's paper protocol; its default steps.
    with tempfile.TemporaryDirectory() as root:
        info = TaskInfo(env, options, loaded, task_dataset(loaded, Path(root)),
                        environment=environment)  # fmt: skip
        setup = setup_provenance(info, Path(root))

    def exact(shown: str) -> float:
        """The score behind a 3-decimal value: a success rate over the protocol's episodes
        is a multiple of 1 / episodes (0.547 is 35/64), so the mean of two of them is
        rebuilt exactly; any other value is taken as shown."""
        k = round(float(shown) * episodes)
        return k / episodes if f"{k / episodes:.3f}" == shown else float(shown)

    table = [line for line in lines if line.startswith("|")]
    header = [c.strip() for c in table[0].strip("|").split("|")]
    budgets = [h.removeprefix("N_L=") for h in header[1:] if h.startswith("N_L=")]
    records = []
    for row in table[2:]:
        method, *cells = [c.strip() for c in row.strip("|").split("|")]
        for budget, cell in zip(budgets, cells, strict=False):
            m = CELL.match(cell)
            assert m, f"{where}: {cell!r} is not a two-seed cell"
            for seed, value in enumerate((exact(m.group(3)), exact(m.group(4)))):
                run = RunSpec(method=method, config={}, env=env, budget=budget,
                               options=options.model_dump(mode="json"),
                               seed=seed, steps=spec.default_steps, eval_every=50)  # fmt: skip
                records.append(RunRecord.of(run, score=value, metrics={}, report="final",
                                            normaliser=normaliser.model_dump(),
                                            n_labeled=int(budget), versions=setup))  # fmt: skip
    real = to_markdown(build_table(records)).rstrip("\n")
    if block.startswith("# ssilbench leaderboard"):
        assert block == real, f"{where}:\n{block}\n---- the code gives ----\n{real}"
    else:  # the table alone
        shown = "\n".join(line for line in real.splitlines() if line.startswith("|"))
        assert "\n".join(table) == shown, f"{where}:\n{block}\n---- the code gives ----\n{shown}"
