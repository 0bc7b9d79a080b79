"""Facts about the 16 Procgen games: names, actions, complexity classes and score ranges.

Sources: the action names and the per-game (random, expert) returns used by the paper to
normalise scores come from LAPO's published code and data (easy mode); the Rmin/Rmax ranges
come from Cobbe et al. 2020, "Leveraging Procedural Generation to Benchmark Reinforcement
Learning"; the complexity classes from the paper's appendix.
"""

from __future__ import annotations

from typing import Literal

MAX_DATA_CHUNKS = 80
"""The reference's cap on the chunks of a data split (``lapo/paths.py``): ~2.6M frames a game."""

GAMES: tuple[str, ...] = (
    "bigfish",
    "bossfight",
    "caveflyer",
    "chaser",
    "climber",
    "coinrun",
    "dodgeball",
    "fruitbot",
    "heist",
    "jumper",
    "leaper",
    "maze",
    "miner",
    "ninja",
    "plunder",
    "starpilot",
)

ACTION_NAMES: tuple[str, ...] = (
    "LEFT-DOWN",
    "LEFT",
    "LEFT-UP",
    "DOWN",
    "NOOP",
    "UP",
    "RIGHT-DOWN",
    "RIGHT",
    "RIGHT-UP",
    "D",
    "A",
    "W",
    "S",
    "Q",
    "E",
)
NUM_ACTIONS = len(ACTION_NAMES)
OBS_SHAPE = (3, 64, 64)
# Procgen ends every episode after at most 1000 steps (maze after 500).
HORIZON = 1000

# "Simple" games have dynamics an inverse model reads off two frames; "complex" ones have
# momentum, gravity or moving platforms (paper appendix).
COMPLEX_GAMES = frozenset(
    {"caveflyer", "chaser", "climber", "coinrun", "jumper", "ninja", "leaper"}
)


def complexity(game: str) -> Literal["simple", "complex"]:
    return "complex" if game in COMPLEX_GAMES else "simple"


# (random policy return, mean expert return in the data), easy mode: LAPO's normaliser.
LAPO_RANGES: dict[str, tuple[float, float]] = {
    "bigfish": (0.8742888, 36.336166),
    "bossfight": (0.04618272, 11.634365),
    "caveflyer": (2.5970738, 9.183605),
    "chaser": (0.6632482, 9.955711),
    "climber": (2.2242901, 10.233627),
    "coinrun": (2.704834, 9.93251),
    "dodgeball": (0.612983, 13.486584),
    "fruitbot": (-2.5330205, 29.925259),
    "heist": (3.0758767, 9.685265),
    "jumper": (3.4105318, 8.460201),
    "leaper": (2.5105245, 7.4082565),
    "maze": (4.2726293, 9.969294),
    "miner": (1.2513667, 11.892558),
    "ninja": (2.5599792, 9.474582),
    "plunder": (4.3207445, 11.460528),
    "starpilot": (1.5251881, 66.98625),
}

# (Rmin, Rmax) per distribution mode, Cobbe et al. 2020. Public copies disagree on easy
# jumper/leaper Rmin (3 here, 1 and 1.5 elsewhere); this follows the paper's table.
PROCGEN_RANGES: dict[str, dict[str, tuple[float, float]]] = {
    "easy": {
        "bigfish": (1.0, 40.0),
        "bossfight": (0.5, 13.0),
        "caveflyer": (3.5, 12.0),
        "chaser": (0.5, 13.0),
        "climber": (2.0, 12.6),
        "coinrun": (5.0, 10.0),
        "dodgeball": (1.5, 19.0),
        "fruitbot": (-1.5, 32.4),
        "heist": (3.5, 10.0),
        "jumper": (3.0, 10.0),
        "leaper": (3.0, 10.0),
        "maze": (5.0, 10.0),
        "miner": (1.5, 13.0),
        "ninja": (3.5, 10.0),
        "plunder": (4.5, 30.0),
        "starpilot": (2.5, 64.0),
    },
    "hard": {
        "bigfish": (0.0, 40.0),
        "bossfight": (0.5, 13.0),
        "caveflyer": (2.0, 13.4),
        "chaser": (0.5, 14.2),
        "climber": (1.0, 12.6),
        "coinrun": (5.0, 10.0),
        "dodgeball": (1.5, 19.0),
        "fruitbot": (-0.5, 27.2),
        "heist": (2.0, 10.0),
        "jumper": (1.0, 10.0),
        "leaper": (1.5, 10.0),
        "maze": (4.0, 10.0),
        "miner": (1.5, 20.0),
        "ninja": (2.0, 10.0),
        "plunder": (3.0, 30.0),
        "starpilot": (1.5, 35.0),
    },
}
