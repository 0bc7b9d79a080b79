"""Score normalisers of Procgen runs, and the one a run's dataset gets.

The paper's normaliser, LAPO's, maps a return R to (R - random) / (expert - random): random
is a uniform-random policy's return and expert the mean return in the expert data, both
from LAPO's table for the paper's data. A dataset collected here comes from another expert
(one trained here for a few million frames scores far below LAPO's: 0.66 against 36.34 on
bigfish), so LAPO's expert would put every method near 0. Such a dataset is normalised by
its own expert instead: the mean return of the complete episodes collected, which
``data collect`` records in the dataset's manifest, so that 1 means "as good as the
policy that made the data"; random is a uniform-random policy's return ``data collect``
measures the same way beside it (LAPO's table for datasets collected before it did).

The normaliser a task declares before its dataset is opened (:func:`declared`) is what the
run's protocol fingerprint hashes; the one a run scores with (:func:`for_dataset`) is
decided by the dataset, which the run's data fingerprint names, and is what its record
carries.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ssilbench.api import ConfigError, DatasetError, Normaliser
from ssilbench_procgen.games import LAPO_RANGES, PROCGEN_RANGES

if TYPE_CHECKING:
    from ssilbench_procgen.environment import ProcgenOptions

LAPO_SOURCE = (
    "(R - random) / (expert - random): uniform-random-policy return and mean expert-data "
    "return, easy mode (LAPO's table, as in the paper)"
)
PROCGEN_SOURCE = "(R - Rmin) / (Rmax - Rmin) of Cobbe et al. 2020 for the distribution mode"
PENDING_SOURCE = (
    "(R - random) / (expert - random): expert, the return recorded with the dataset by "
    "'data collect' (read when the dataset is opened); random, LAPO's table"
)


def declared(game: str, options: ProcgenOptions) -> Normaliser:
    """The normaliser of ``game`` under ``options`` before the dataset is opened."""
    if options.normaliser == "procgen":
        low, high = PROCGEN_RANGES[options.distribution_mode][game]
        return Normaliser(name="procgen", low=low, high=high, source=PROCGEN_SOURCE)
    if options.distribution_mode != "easy":
        raise ConfigError(
            f"normaliser={options.normaliser} uses a random policy's return measured in easy "
            f"mode only; with distribution_mode={options.distribution_mode} use "
            "-o normaliser=procgen."
        )
    low, high = LAPO_RANGES[game]
    if options.normaliser == "dataset":
        return Normaliser(name="dataset", low=low, high=high, source=PENDING_SOURCE)
    return Normaliser(name="lapo", low=low, high=high, source=LAPO_SOURCE)


def for_dataset(game: str, options: ProcgenOptions, manifest: dict[str, Any]) -> Normaliser:
    """The normaliser of a run on the dataset of ``manifest``: with ``lapo`` (the default)
    or ``dataset``, a dataset collected here gets its own expert's return; the paper's
    imported data keeps LAPO's table under ``lapo`` and is refused under ``dataset``."""
    chosen = declared(game, options)
    if options.normaliser in ("procgen", "lapo_table"):
        return chosen
    producer = manifest.get("producer", {})
    where = f"procgen:{game} dataset '{options.dataset}'"
    if producer.get("source") != "collect":
        if options.normaliser == "dataset":
            raise DatasetError(
                f"normaliser=dataset takes the expert return that 'data collect' records, and "
                f"{where} was imported (the paper's data, normalised by LAPO's table): use "
                "-o normaliser=lapo, or collect a dataset with 'ssilbench data collect'."
            )
        return chosen
    metadata = manifest.get("metadata", {})
    expert, episodes = metadata.get("episode_return_mean"), metadata.get("complete_episodes")
    random, random_source = _random_reference(game, metadata)
    if expert is None or not episodes:
        raise DatasetError(
            f"{where} records no expert return (no episode ended while it was collected): "
            "collect it again with more --frames, or choose -o normaliser=lapo_table "
            "(LAPO's expert) or -o normaliser=procgen."
        )
    if expert <= random:
        raise DatasetError(
            f"The expert that collected {where} returned {expert:.2f} on average over "
            f"{episodes} episodes, not above a uniform-random policy's {random:.2f} "
            f"({random_source}), so scores normalised by it would mean nothing. Collect the "
            "data with a stronger expert (train it longer with 'ssilbench expert train'), or "
            "choose "
            f"-o normaliser=lapo_table (LAPO's expert, {LAPO_RANGES[game][1]:.2f}) or "
            "-o normaliser=procgen."
        )
    policy = Path(str(producer.get("policy", "?"))).name
    source = (
        f"(R - random) / (expert - random): expert, the mean return of the {episodes} complete "
        f"episodes of the policy that collected the dataset ({policy}), recorded at "
        f"collection; random, a uniform-random policy's ({random_source})"
    )
    return Normaliser(name="dataset", low=random, high=float(expert), source=source)


def _random_reference(game: str, metadata: dict[str, Any]) -> tuple[float, str]:
    """A uniform-random policy's return as 'data collect' measured it beside the expert's,
    or, for a dataset collected before it did, LAPO's table; and where it comes from."""
    measured, count = metadata.get("random_return_mean"), metadata.get("random_episodes")
    if measured is not None and count:
        return float(measured), f"{count} episodes measured at collection, counted alike"
    return LAPO_RANGES[game][0], "LAPO's table, easy mode"
