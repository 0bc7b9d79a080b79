"""The static description of a task (:class:`EnvSpec`, with its :class:`Normaliser`), the
paper's experiment on a family (:class:`PaperProtocol`) and the options models environments
share. Part of the plugin contract: import these names
from :mod:`ssilbench.api`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)


class Normaliser(BaseModel):
    """Maps a raw return R to a normalised score (R - low) / (high - low)."""

    model_config = ConfigDict(frozen=True)

    name: str
    low: float
    high: float
    source: str = ""

    def __call__(self, value: float) -> float:
        return (value - self.low) / (self.high - self.low)


class EnvSpec(BaseModel):
    """Static facts about one configured task: spaces, horizon, evaluation protocol, defaults."""

    model_config = ConfigDict(frozen=True)

    env_id: str
    obs_shape: tuple[int, ...]
    obs_dtype: Literal["float32", "uint8"]
    obs_kind: Literal["vector", "image"]
    num_actions: int
    """Discrete actions: how many. Continuous actions: the action vector's dimension."""
    action_names: tuple[str, ...] = ()
    action_kind: Literal["discrete", "continuous"] = "discrete"
    action_low: tuple[float, ...] = ()
    action_high: tuple[float, ...] = ()
    """Per-dimension bounds of continuous actions."""
    extra_obs: dict[str, tuple[tuple[int, ...], str]] = {}
    """Per-frame observation arrays beside the main frame: ``{name: (shape, dtype)}`` (a
    second camera, a proprioceptive vector). Where there are any, the vector environment
    observes a dict ``{"obs": frames, **extras}`` and the store keeps each in its own file."""
    frame_stack: int = 1
    """Frames per observation of the vector environment (oldest first; the first frame is
    repeated at reset). Above 1 every observation array has this axis after the env axis."""
    action_chunk: int = 1
    """Actions a policy predicts per call (the evaluation protocol's default)."""
    action_execute: int = 1
    """How many of a predicted chunk the rollout executes before asking again."""
    episode_score: Literal["return", "max_reward"] = "return"
    """An episode's score: the sum of its rewards, or the largest reward seen (Push-T's
    maximum coverage)."""
    horizon: int
    eval_episodes: int
    eval_every: int
    eval_seed: int = 12345
    eval_starts: Literal["fixed", "fresh"] = "fixed"
    """Start states of the evaluations. ``fixed``: every evaluation resets the vector
    environment with ``eval_seed``, so each one meets the same start states. ``fresh``: the
    evaluation at step t resets it with a seed drawn from (``eval_seed``, the run's seed, t),
    so each one meets new start states (Procgen's fresh levels), as deterministic as fixed
    ones and the same for every method run with that seed."""
    eval_counting: Literal["first_per_env", "first_to_finish"] = "first_per_env"
    """Which episodes an evaluation scores. ``first_per_env``: the first episode of each of
    the ``eval_episodes`` sub-environments, each played to its end. ``first_to_finish``: the
    episodes in the order they end across the sub-environments, each of which starts a new
    one when one ends, until ``eval_episodes`` have ended; all those ending on the step that
    reaches the count are scored (Procgen's reference code), so short episodes weigh more."""

    @model_serializer(mode="wrap")
    def _serialise(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Fields added after runs were recorded: at their defaults a spec serialises, and its
        # protocol fingerprint stays, as before they existed (as ``omitted_at_default``).
        data = handler(self)
        for name in ("eval_starts", "eval_counting"):
            if name in data and getattr(self, name) == type(self).model_fields[name].default:
                del data[name]
        return data

    action_selection: Literal["greedy", "sample"] = "sample"
    default_steps: int
    default_arch: str
    normaliser: Normaliser
    goal_dims: tuple[int, ...] = ()
    """Indices of vector-observation features that describe the goal (goal-conditioned tasks);
    methods can leave them out of a network's input (e.g. BC versus BC_G)."""
    budget_unit: Literal["transitions", "demonstrations"] = "transitions"
    report: Literal["final", "max"] = "final"
    """Which evaluation a leaderboard reports: after training, or the best during training."""
    metadata: dict[str, Any] = {}


class PaperProtocol(BaseModel):
    """The paper's experiment on an environment family: the label budgets and seeds its
    figure used, and the training steps per run where they differ from the tasks' defaults.
    ``ssilbench run`` takes them when the command gives no ``--budgets`` or ``--seeds``, and
    says so (an :class:`Environment` declares it in ``paper_protocol``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    budgets: tuple[str, ...] = Field(min_length=1)
    """Label budgets as ``--budgets`` takes them ("16", "0.05", "all"), in the family's
    budget unit (transitions, or demonstrations per task)."""
    seeds: tuple[int, ...] = Field(min_length=1)
    steps: int | None = Field(None, ge=1)
    """Training steps per run; None: each task's ``EnvSpec.default_steps``."""
    figure: str
    """Where the paper reports it, e.g. "Figure 3"."""
    source: str = ""
    """Where the numbers come from (the paper's text, its code), for the card and messages."""

    @field_validator("budgets", mode="before")
    @classmethod
    def _as_text(cls, value: Any) -> Any:
        if isinstance(value, list | tuple):
            return tuple(v if isinstance(v, str) else str(v) for v in value)
        return value


def omitted_at_default(*fields: str) -> Any:
    """A serializer for an Options or Config model that leaves ``fields`` out of its dump
    while they hold their defaults. A field added after runs were recorded changes no run id
    that way (a run's spec holds the dumped options and config); set to another value, it is
    dumped and names a new run. Assign it in the class body:
    ``_serialise = omitted_at_default("palette")``."""

    @model_serializer(mode="wrap")
    def serialise(self: BaseModel, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        for name in fields:
            if name in data and getattr(self, name) == type(self).model_fields[name].default:
                del data[name]
        return data

    return serialise


class NoOptions(BaseModel):
    # Options and Config models need a default for every field: a run's label names only
    # the values that differ from the defaults.
    """Options model of an environment that takes none."""

    model_config = ConfigDict(extra="forbid")


class ChunkedControlOptions(BaseModel):
    """Options of tasks evaluated with frame stacks and action chunks (Push-T, LIBERO-10):
    subclass it in an environment's Options and pass the values to its :class:`EnvSpec`.
    The defaults are the paper's (4 frames, chunks of 16 actions, 8 executed)."""

    frame_stack: int = Field(4, ge=1, le=32, description="Frames of history per observation.")
    action_chunk: int = Field(16, ge=1, le=256, description="Actions a policy predicts per call.")
    action_execute: int = Field(
        8, ge=1, le=256, description="Actions of each chunk executed before asking again."
    )

    @model_validator(mode="after")
    def _execute_within_chunk(self) -> ChunkedControlOptions:
        if self.action_execute > self.action_chunk:
            raise ValueError(
                f"action_execute={self.action_execute} exceeds action_chunk="
                f"{self.action_chunk}: a rollout can only execute actions the policy predicted."
            )
        return self
