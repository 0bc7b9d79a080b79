"""The options of the ``maze`` environment family and the key of the dataset they make."""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ssilbench.api import omitted_at_default

# Bump when the generator, expert or dataset layout changes: it is part of the cache key.
GENERATOR = "ssilbench_maze/random-walk-v1"


class MazeOptions(BaseModel):
    """Options of every maze task."""

    model_config = ConfigDict(extra="forbid")

    state: Literal["position", "image"] = Field(
        "position",
        description="Observation: the agent's (x, y) cell as float32, or a 3xHxW uint8 image "
        "with one pixel per cell in the colours of `palette`.",
    )
    layout: Literal["suite", "paper"] = Field(
        "suite",
        description="Walls: 'paper' (what a run takes unless told otherwise) = the paper's "
        "code's maze of that size (its generator's seed 42: 50, 205 and 1,281 free cells), "
        "the same for every maze_seed; 'suite' = a random-walk maze drawn from maze_seed (a "
        "recorded run without the option, before 0.3.0, has it). The goal is drawn from "
        "maze_seed in both.",
    )
    palette: Literal["ssilbench", "paper"] = Field(
        "ssilbench",
        description="Colours of state=image: 'paper' (what an image run takes unless told "
        "otherwise) = the paper's code's, wall blue, free white, goal green, agent red, also "
        "on the goal; 'ssilbench' = wall black and the agent yellow on the goal (the rest the "
        "same; a recorded run without the option, before 0.3.0, has it).",
    )
    data: Literal["rollouts", "states"] = Field(
        "rollouts",
        description="Expert dataset: 'rollouts' = `episodes` expert episodes from uniformly "
        "random start cells; 'states' = the paper's D^full, every feasible non-goal state "
        "(with goals per episode: every feasible (state, goal) pair; with G goals: every "
        "feasible non-goal state for each of them) `copies` times as a transition source.",
    )
    episodes: int = Field(
        200, ge=1, description="Number of expert episodes when data='rollouts' (else unused)."
    )
    maze_seed: int = Field(
        0,
        ge=0,
        description="Seed of the maze's goal and the dataset's draws (start cells, goals, "
        "no-ops), and with layout='suite' of the layout.",
    )
    horizon: int | None = Field(
        None,
        ge=1,
        description="Steps before an evaluation episode is truncated; None means twice the "
        "longest expert path of the maze, divided by (1 - noop) (at most 10 times as long).",
    )
    noop: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="Probability that the agent stays where it is at a step, whatever the "
        "action (the paper's stochastic environment); applies to evaluation, the dataset's "
        "next states and the video model's outcomes.",
    )
    goals: Literal["fixed", "per_episode"] | Annotated[int, Field(ge=1, strict=True)] = Field(
        "fixed",
        description="'fixed': one goal for the maze; 'per_episode': each episode draws its "
        "own goal among all free cells, observed as features (x, y, gx, gy) or drawn in the "
        "image; a whole number G: G goal cells drawn from the free cells by maze_seed, each "
        "episode draws one of them, observed as with 'per_episode' (the paper's number of "
        "goals study).",
    )
    copies: int = Field(
        1,
        ge=1,
        description="With data='states', how many times every transition source is stored, "
        "each copy with its own no-op draw (the paper's samples_mult); only 1 with "
        "data='rollouts'.",
    )

    noop_seed: Literal["maze"] | Annotated[int, Field(ge=0, strict=True)] = Field(
        "maze",
        description="Seed of the dataset's no-op draws (with noop > 0): a sweep that does "
        "not set it gives each run its own seed, as the paper's code draws each seed's "
        "no-ops; 'maze' = from maze_seed's stream, one draw for every seed (the setting "
        "before 0.3.0); a whole number: that seed for every run.",
    )

    # palette, layout and noop_seed came after runs were recorded: at their defaults,
    # earlier runs keep their ids.
    _serialise = omitted_at_default("palette", "layout", "noop_seed")

    @model_validator(mode="after")
    def _copies_need_states(self) -> MazeOptions:
        # Rollouts already draw their own no-ops per episode: copies would only repeat them.
        if self.copies != 1 and self.data != "states":
            raise ValueError(
                f"copies={self.copies} needs data=states (it repeats D^full's transitions); "
                "with data=rollouts use episodes to grow the dataset"
            )
        return self


def data_key(task: str, options: MazeOptions) -> dict[str, Any]:
    """The options that change the dataset, plus the generator version.

    ``noop`` (and its ``noop_seed``), ``goals``, ``copies``, ``palette`` (for images) and
    ``layout`` appear only when they differ from their defaults, so the datasets of the
    deterministic fixed-goal mazes keep their keys (and a whole number of goals is the only
    key to hold an int under ``goals``).
    """
    key: dict[str, Any] = {
        "generator": GENERATOR,
        "task": task,
        "state": options.state,
        "data": options.data,
        "maze_seed": options.maze_seed,
    }
    if options.data == "rollouts":
        key["episodes"] = options.episodes
    if options.noop > 0.0:
        key["noop"] = options.noop
        if options.noop_seed != "maze":
            key["noop_seed"] = options.noop_seed
    if options.goals != "fixed":
        key["goals"] = options.goals
    if options.copies != 1:
        key["copies"] = options.copies
    if palette := other_palette(options):
        key["palette"] = palette
    if options.layout != "suite":
        key["layout"] = options.layout
    return key


def noop_seed(options: MazeOptions) -> int:
    """The seed of the dataset's no-op stream: ``noop_seed``, or ``maze_seed`` under 'maze'."""
    return options.maze_seed if options.noop_seed == "maze" else options.noop_seed


def other_palette(options: MazeOptions) -> str | None:
    """The palette of an image task that is not the default one (None otherwise): what the
    data key and the spec's metadata record, so that earlier datasets keep their bytes."""
    if options.state == "image" and options.palette != "ssilbench":
        return options.palette
    return None


def short_hash(payload: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]
