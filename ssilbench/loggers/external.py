"""Weights & Biases (offline) and MLflow (a local file store) loggers, each optional: the
package is imported when the logger is built, and a missing one is a PluginError that says
what to install (``pip install "ssilbench[wandb]"`` / ``"ssilbench[mlflow]"``)."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from ssilbench.errors import PluginError
from ssilbench.loggers.base import LiveRun, LoggedRun, RunLogger


def _optional(module: str, logger: str, extra: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise PluginError(
            f"The {logger} logger (--log {logger}) needs the package '{module}' ({exc}). "
            f'Install it with: pip install "ssilbench[{extra}]", or leave {logger} out of --log.'
        ) from None


def points_by_step(run: LoggedRun) -> dict[int, dict[str, float]]:
    """Every finite point of the run's curves, by global step then ``stage/name`` tag."""
    out: dict[int, dict[str, float]] = {}
    for curve in run.curves:
        for step, value in zip(curve.steps, curve.values, strict=True):
            if value is not None:
                out.setdefault(step, {})[curve.tag] = value
    return out


def final_numbers(run: LoggedRun) -> dict[str, float]:
    numbers = {k: float(v) for k, v in run.metrics.items() if isinstance(v, (int, float))}
    if run.score is not None:
        numbers["score"] = run.score
    return numbers


def hparams_of(run: LoggedRun) -> dict[str, Any]:
    """The run's hyper-parameters (built from its fields when it was made without them)."""
    return run.hparams or {
        "method": run.method, "env": run.env, "budget": run.budget, "seed": run.seed,
        **{f"config.{k}": v for k, v in run.config.items()},
        **{f"options.{k}": v for k, v in run.options.items()},
    }  # fmt: skip


def _version(text: str) -> tuple[int, ...]:
    """``"0.19.10"`` -> ``(0, 19, 10)``; ``()`` when it is not a version."""
    parts = []
    for part in text.split(".")[:3]:
        digits = "".join(c for c in part if c.isdigit()) if part[:1].isdigit() else ""
        if not digits:
            return ()
        parts.append(int(digits))
    return tuple(parts)


def points_after(run: LoggedRun, step: int) -> dict[int, dict[str, float]]:
    """The run's points after global ``step`` (those a live logger has not sent yet)."""
    return {s: values for s, values in points_by_step(run).items() if s > step}


class WandbLogger(RunLogger):
    """One offline W&B run per ssilbench run under ``LOG_DIR/wandb`` (``wandb sync`` uploads
    them later); never contacts a server. Project ``ssilbench`` (``WANDB_PROJECT``
    overrides it). The run starts when it is claimed, with its hyper-parameters as the W&B
    config, and gets its losses and evaluations while it trains, where this wandb keeps
    several runs open at once (``reinit="create_new"``); otherwise all of it when it is
    recorded."""

    def __init__(self, log_dir: Path) -> None:
        super().__init__(log_dir)
        self.wandb = _optional("wandb", "wandb", "wandb")
        (self.log_dir / "wandb").mkdir(parents=True, exist_ok=True)
        self.live: dict[str, list] = {}  # run id -> [handle, last step sent]
        # reinit="create_new" (several runs open at once) came with wandb 0.19.10; an
        # earlier one would take it for reinit=True and finish the run open before.
        self.concurrent = _version(getattr(self.wandb, "__version__", "")) >= (0, 19, 10)

    def _init(self, run_id: str, label: str, hparams: dict[str, Any], reinit: Any) -> Any:
        import os

        return self.wandb.init(
            project=os.environ.get("WANDB_PROJECT", "ssilbench"),
            name=label,
            id=run_id[:32],
            dir=str(self.log_dir),
            mode="offline",
            config=hparams,
            reinit=reinit,
        )

    def run_hparams(self, run: LiveRun) -> None:
        if not self.concurrent:
            return
        try:
            handle = self._init(run.run_id, run.label, run.hparams, "create_new")
        except Exception:  # an older wandb: one run at a time, sent when recorded
            self.concurrent = False
            return
        self.live[run.run_id] = [handle, -1]

    def run_metrics(self, run_id: str, step: int, values: dict[str, float]) -> None:
        entry = self.live.get(run_id)
        if entry is not None and step > entry[1]:  # W&B keeps steps increasing
            entry[0].log(values, step=step)
            entry[1] = step

    def run_failed(self, run_id: str) -> None:
        entry = self.live.pop(run_id, None)
        if entry is not None:
            entry[0].finish(exit_code=1)

    def run_finished(self, run: LoggedRun) -> None:
        entry = self.live.pop(run.run_id, None)
        if entry is None:
            handle, last = self._init(run.run_id, run.label, hparams_of(run), True), -1
        else:
            handle, last = entry
        try:
            for step, values in sorted(points_after(run, last).items()):
                handle.log(values, step=step)
            for key, value in final_numbers(run).items():
                handle.summary[f"final/{key}"] = value
        finally:
            handle.finish()

    def close(self) -> None:
        for run_id in list(self.live):
            self.run_failed(run_id)


class MlflowLogger(RunLogger):
    """One MLflow run per ssilbench run in the file store ``LOG_DIR/mlruns`` (experiment
    ``ssilbench``); ``mlflow ui --backend-store-uri LOG_DIR/mlruns`` shows them. The run
    starts when it is claimed, with its hyper-parameters as params, gets its losses and
    evaluations while it trains, and ends FINISHED when recorded (FAILED, or KILLED when the
    sweep stops first)."""

    def __init__(self, log_dir: Path) -> None:
        super().__init__(log_dir)
        _optional("mlflow", "mlflow", "mlflow")
        import os

        from mlflow.tracking import MlflowClient

        # MLflow 3 keeps the file store in maintenance mode behind this switch; a local
        # folder is what runs without a server or a database need.
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")

        self.uri = (self.log_dir / "mlruns").resolve().as_uri()
        self.client = MlflowClient(tracking_uri=self.uri)
        found = self.client.get_experiment_by_name("ssilbench")
        self.experiment = (found.experiment_id if found is not None
                           else self.client.create_experiment("ssilbench"))  # fmt: skip
        self.live: dict[str, list] = {}  # ssilbench run id -> [MLflow run id, last step sent]

    def _start(self, run_id: str, label: str, hparams: dict[str, Any]) -> str:
        from mlflow.entities import Param

        handle = self.client.create_run(self.experiment, run_name=label,
                                        tags={"ssilbench.run_id": run_id})  # fmt: skip
        params = [Param(k, str(v)[:500]) for k, v in hparams.items()]
        # MLflow takes at most 100 parameters and 1,000 metrics per batch.
        for start in range(0, len(params), 100):
            self.client.log_batch(handle.info.run_id, params=params[start : start + 100])
        return handle.info.run_id

    def _metrics(self, mlflow_id: str, points: dict[int, dict[str, float]], stamp: int) -> None:
        from mlflow.entities import Metric

        metrics = [Metric(tag, value, stamp, step) for step, values in sorted(points.items())
                   for tag, value in values.items()]  # fmt: skip
        for start in range(0, len(metrics), 1000):
            self.client.log_batch(mlflow_id, metrics=metrics[start : start + 1000])

    def run_hparams(self, run: LiveRun) -> None:
        self.live[run.run_id] = [self._start(run.run_id, run.label, run.hparams), -1]

    def run_metrics(self, run_id: str, step: int, values: dict[str, float]) -> None:
        import time

        entry = self.live.get(run_id)
        if entry is not None:
            self._metrics(entry[0], {step: values}, int(time.time() * 1000))
            entry[1] = max(entry[1], step)

    def run_failed(self, run_id: str, status: str = "FAILED") -> None:
        entry = self.live.pop(run_id, None)
        if entry is not None:
            self.client.set_terminated(entry[0], status=status)

    def run_finished(self, run: LoggedRun) -> None:
        entry = self.live.pop(run.run_id, None)
        if entry is None:
            entry = [self._start(run.run_id, run.label, hparams_of(run)), -1]
        mlflow_id, last = entry
        stamp = int((run.finished_at or 0) * 1000)
        try:
            final = {0: {f"final/{k}": v for k, v in final_numbers(run).items()}}
            self._metrics(mlflow_id, points_after(run, last), stamp)
            self._metrics(mlflow_id, final, stamp)
        finally:
            self.client.set_terminated(mlflow_id)

    def close(self) -> None:
        for run_id in list(self.live):
            self.run_failed(run_id, "KILLED")
