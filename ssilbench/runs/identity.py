"""What besides its names and settings decides a run's result, as short fingerprints.

A run's identity (:attr:`ssilbench.runs.spec.RunSpec.run_id`) hashes its spec, and the
spec carries these fingerprints, so that a plugin that changes its evaluation protocol, a
dataset that is regenerated or imported again, a new release of a plugin, or other code
of a plugin at the same release makes new runs instead of silently mixing old and new rows
in one leaderboard.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ssilbench.api import EnvSpec
from ssilbench.data.datasets import TransitionStore
from ssilbench.fingerprint import code_fingerprint
from ssilbench.registry import Registry

# EnvSpec fields that describe a task without deciding any result (the Procgen complexity
# classes an analysis groups games by).
DESCRIPTIVE = frozenset({"metadata"})


def _digest(doc: Any) -> str:
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def protocol_fingerprint(spec: EnvSpec) -> str:
    """The task's protocol: every field of its EnvSpec that can change a result (spaces,
    horizon, evaluation episodes and seed, action selection, normaliser, default steps and
    architecture, ...)."""
    return _digest(spec.model_dump(mode="json", exclude=set(DESCRIPTIVE)))


def dataset_fingerprint(store: TransitionStore) -> str:
    """The dataset's manifest: its producer (generator and version, or the imported files),
    its shapes and the sha256 of every array."""
    return _digest(store.manifest)


def dataset_origin(store: TransitionStore, data_root: Path | None = None) -> dict[str, Any]:
    """What a run's record says of its dataset, for a leaderboard to name it: ``path``, its
    folder (under ``data_root`` where it lies there), ``source``, where its data came from
    (the producer's: ``import``, ``collect``, ...; ``joined`` for a store joined from others,
    ``built`` for one its plugin generated) and ``plugin``, the producer's plugin."""
    producer = (store.manifest or {}).get("producer")
    producer = producer if isinstance(producer, dict) else {}
    root = Path(store.root)
    try:
        path = root.resolve().relative_to(Path(data_root).resolve()) if data_root else root
    except ValueError:  # a store outside the data root
        path = root
    source = producer.get("source") or ("joined" if "joined" in producer else "built")
    return {"path": path.as_posix(), "source": str(source),
            "plugin": str(producer.get("plugin", ""))}  # fmt: skip


def plugin_versions(registries: list[tuple[Registry[Any], str]]) -> dict[str, str]:
    """Plugin name -> "distribution version" of the plugins that provide the given
    registry entries (a plugin loaded from a module path outside any distribution:
    "unversioned"), followed by "results rN" where the plugin declares ``RESULTS_REVISION``
    (a plugin without one keeps the identity it always had)."""
    out: dict[str, str] = {}
    for registry, name in registries:
        origin = registry.entries[name].origin
        if origin.distribution:
            out[origin.plugin] = f"{origin.distribution} {origin.release}"
        else:
            out[origin.plugin] = origin.release
    return out


def plugin_code(registries: list[tuple[Registry[Any], str]]) -> dict[str, str]:
    """Plugin name -> fingerprint of the code of the plugins that provide the given registry
    entries: the files of the import packages of the plugin module and of the entries'
    targets (:func:`ssilbench.fingerprint.code_fingerprint`), whether the plugin is an
    installed distribution, an editable install or a module on ``PYTHONPATH``."""
    modules: dict[str, set[str]] = {}
    for registry, name in registries:
        entry = registry.entries[name]
        found = modules.setdefault(entry.origin.plugin, set())
        found.add(entry.target)
        if entry.origin.module:
            found.add(entry.origin.module)
    return {plugin: code_fingerprint(targets) for plugin, targets in modules.items()}
