"""Settings of the PPO expert (kept apart from the trainer so that reading them needs no torch).

Defaults are the PPO settings of the Procgen paper (Cobbe et al. 2020).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ExpertConfig(BaseModel):
    """PPO settings (``ssilbench expert train procgen:GAME -c KEY=VALUE``)."""

    model_config = ConfigDict(extra="forbid")

    steps: int = Field(25_000_000, ge=1, description="Environment steps in total (all envs).")
    num_envs: int = Field(64, ge=1, description="Parallel environments.")
    num_steps: int = Field(256, ge=1, description="Steps per environment per rollout.")
    epochs: int = Field(3, ge=1, description="Passes over each rollout.")
    minibatches: int = Field(8, ge=1, description="Minibatches per epoch.")
    lr: float = Field(5e-4, gt=0, description="Adam learning rate (constant).")
    gamma: float = Field(0.999, gt=0, le=1, description="Discount.")
    gae_lambda: float = Field(0.95, ge=0, le=1, description="GAE lambda.")
    clip: float = Field(0.2, gt=0, description="PPO ratio clip.")
    ent_coef: float = Field(0.01, ge=0, description="Entropy bonus coefficient.")
    vf_coef: float = Field(0.5, ge=0, description="Value loss coefficient.")
    max_grad_norm: float = Field(0.5, gt=0, description="Gradient-norm clip.")
    scale: int = Field(4, ge=1, description="IMPALA-CNN channel multiplier (16, 32, 32) x scale.")
    seed: int = Field(0, ge=0, description="Seeds the network, the sampling and the levels.")
    checkpoint_every: int = Field(10, ge=1, description="Updates between checkpoints.")

    @property
    def steps_per_update(self) -> int:
        """Environment steps one rollout collects (all envs): the unit of ``steps``."""
        return self.num_envs * self.num_steps


# Settings that may change when a run is resumed: the rest must match the checkpoint.
RESUMABLE = {"steps", "checkpoint_every"}
