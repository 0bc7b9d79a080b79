"""Weights & Biases (offline) and MLflow (a local file store) loggers, each optional: the
package is imported when the logger is built, and a missing one is a PluginError that says
what to install (``pip install "ssilbench[wandb]"`` / ``"ssilbench[mlflow]"``)."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from ssilbench.errors import PluginError
from ssilbench.loggers.base import LoggedRun, RunLogger


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


class WandbLogger(RunLogger):
    """One offline W&B run per ssilbench run under ``LOG_DIR/wandb`` (``wandb sync`` uploads
    them later); never contacts a server. Project ``ssilbench`` (``WANDB_PROJECT``
    overrides it)."""

    def __init__(self, log_dir: Path) -> None:
        super().__init__(log_dir)
        self.wandb = _optional("wandb", "wandb", "wandb")
        (self.log_dir / "wandb").mkdir(parents=True, exist_ok=True)

    def run_finished(self, run: LoggedRun) -> None:
        import os

        handle = self.wandb.init(
            project=os.environ.get("WANDB_PROJECT", "ssilbench"),
            name=run.label,
            id=run.run_id[:32],
            dir=str(self.log_dir),
            mode="offline",
            config={
                "method": run.method,
                "env": run.env,
                "budget": run.budget,
                "seed": run.seed,
                "config": run.config,
                "options": run.options,
            },  # fmt: skip
            reinit=True,
        )
        try:
            for step, values in sorted(points_by_step(run).items()):
                handle.log(values, step=step)
            for key, value in final_numbers(run).items():
                handle.summary[f"final/{key}"] = value
        finally:
            handle.finish()


class MlflowLogger(RunLogger):
    """One MLflow run per ssilbench run in the file store ``LOG_DIR/mlruns`` (experiment
    ``ssilbench``); ``mlflow ui --backend-store-uri LOG_DIR/mlruns`` shows them."""

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

    def run_finished(self, run: LoggedRun) -> None:
        from mlflow.entities import Metric, Param

        handle = self.client.create_run(self.experiment, run_name=run.label,
                                        tags={"ssilbench.run_id": run.run_id})  # fmt: skip
        stamp = int((run.finished_at or 0) * 1000)
        metrics = [Metric(tag, value, stamp, step)
                   for step, values in sorted(points_by_step(run).items())
                   for tag, value in values.items()]  # fmt: skip
        metrics += [Metric(f"final/{k}", v, stamp, 0) for k, v in final_numbers(run).items()]
        settings = {"method": run.method, "env": run.env, "budget": run.budget, "seed": run.seed,
                    **{f"config.{k}": v for k, v in run.config.items()},
                    **{f"options.{k}": v for k, v in run.options.items()}}  # fmt: skip
        params = [Param(k, str(v)[:500]) for k, v in settings.items()]
        try:
            # MLflow takes at most 100 parameters and 1,000 metrics per batch.
            for start in range(0, len(params), 100):
                self.client.log_batch(handle.info.run_id, params=params[start : start + 100])
            for start in range(0, len(metrics), 1000):
                self.client.log_batch(handle.info.run_id, metrics=metrics[start : start + 1000])
        finally:
            self.client.set_terminated(handle.info.run_id)
