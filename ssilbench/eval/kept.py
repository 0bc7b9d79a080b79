"""Kept policies: a run's final policy stored beside its record, to evaluate or film later.

``run --keep-policy`` writes, for each finished run, ``RESULTS/policies/<run id>.pt`` (the
policy's :meth:`~ssilbench.api.Policy.snapshot`, its tensors on the CPU, saved with
``torch.save``) and ``RESULTS/policies/<run id>.json`` (the run's spec, the step of its final
evaluation, the policy's class and the plugin that trained it). Both are written to a
temporary file and renamed into place; a file is named by its run id, and a run id decides
its result, so a run run again writes the same policy over its own files and never touches
another run's.

The policy is pickled: its class is stored by reference, so loading it imports the code of
the plugin that trained it (installed here, at a version whose classes still read it).
Load only kept policies you trust, as with any pickle.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ssilbench.errors import ResultsStoreError, UsageError, os_error_message

POLICIES = "policies"
"""The folder of a results directory that holds the kept policies."""
FORMAT = 1  # the layout of the .json file beside a kept policy


@dataclass(frozen=True)
class KeptPolicy:
    """What the ``.json`` file beside a kept policy says about it."""

    run_id: str
    spec: dict[str, Any]  # the RunSpec document, as the store records it
    step: int  # the training step of the run's final evaluation
    policy_class: str  # "module.Class"
    plugin: str  # the plugin that registered the run's method
    path: Path  # the .pt file

    @property
    def method(self) -> str:
        return str(self.spec.get("method", "?"))


def policy_files(folder: Path, run_id: str) -> tuple[Path, Path]:
    """The policy file and the description file of ``run_id`` in ``folder``."""
    return folder / f"{run_id}.pt", folder / f"{run_id}.json"


def keep_policy(
    folder: Path,
    run_id: str,
    spec: dict[str, Any],
    policy: Any,
    step: int,
    plugin: str,
) -> Path:
    """Store ``policy`` (a snapshot of it, its tensors moved to the CPU) and its description
    as ``run_id``'s kept policy in ``folder``; the policy file's path."""
    import torch

    from ssilbench.train.checkpoint import save_atomic

    snapshot = policy.snapshot()
    buffer = io.BytesIO()
    torch.save(snapshot, buffer)
    buffer.seek(0)  # read back with every storage on the CPU, whatever device trained it
    on_cpu = torch.load(buffer, map_location="cpu", weights_only=False)
    pt, described = policy_files(folder, run_id)
    save_atomic({"format": FORMAT, "policy": on_cpu}, pt)
    cls = type(policy)
    document = {
        "format": FORMAT,
        "run_id": run_id,
        "spec": spec,
        "step": int(step),
        "policy_class": f"{cls.__module__}.{cls.__qualname__}",
        "plugin": plugin,
        "torch": torch.__version__,
    }
    _write_text(described, json.dumps(document, indent=1, sort_keys=True) + "\n")
    return pt


def _write_text(path: Path, text: str) -> None:
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise ResultsStoreError(os_error_message(path, exc)) from None


def kept_run_ids(folder: Path) -> list[str]:
    """The run ids with a kept policy (both files present) in ``folder``."""
    if not folder.is_dir():
        return []
    return sorted(p.stem for p in folder.glob("*.json") if p.with_suffix(".pt").is_file())


def read_kept(folder: Path, run_id: str) -> KeptPolicy | None:
    """The description of ``run_id``'s kept policy, or None when none was kept."""
    pt, described = policy_files(folder, run_id)
    if not (pt.is_file() and described.is_file()):
        return None
    try:
        doc = json.loads(described.read_text())
        return KeptPolicy(run_id, dict(doc["spec"]), int(doc["step"]), str(doc["policy_class"]),
                          str(doc["plugin"]), pt)  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(
            f"Cannot read {described} ({type(exc).__name__}: {exc}): the description of a "
            f"kept policy is damaged; run the run again with --keep-policy to write it anew."
        ) from None


def load_policy(kept: KeptPolicy, device: Any) -> Any:
    """The kept policy, its tensors on ``device``. Unpickling imports the policy's class
    from the plugin that trained it: a plugin missing here, or whose classes changed, is
    one UsageError naming the plugin and the class."""
    import torch

    try:
        payload = torch.load(kept.path, map_location=device, weights_only=False)
        return payload["policy"]
    except Exception as exc:  # noqa: BLE001 - any failure to unpickle has the same remedy
        raise UsageError(
            f"Cannot load the kept policy {kept.path} ({type(exc).__name__}: {exc}). It is a "
            f"{kept.policy_class} of the plugin '{kept.plugin}' (method '{kept.method}'), "
            "pickled by reference: install that plugin, at the version that trained the run, "
            "where you evaluate it (or run the run again with --keep-policy)."
        ) from None
