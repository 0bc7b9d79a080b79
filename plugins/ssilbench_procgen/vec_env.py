"""A gymnasium VectorEnv over procgen's native vectorised environment (no gym in the loop).

Procgen resets a finished sub-environment by itself: the observation returned with
``terminated=True`` is already the first frame of the next episode (gymnasium's
"same-step" autoreset). Episodes end by dying, by finishing the level, or by procgen's time
limit (1000 steps, 500 in maze); all three are reported as ``terminated``, as in procgen.
Observations are uint8 (3, 64, 64), channels first.

An evaluation on fixed levels resets with the same seed every time, so the initial states
of each seed are saved when it is first built and a later reset with that seed restores them
instead of building another ``ProcgenGym3Env``: procgen's state holds everything that
decides an episode (its random generators included), so a restored reset replays exactly the
episodes of a freshly built environment. (Measured for 64 bigfish environments: a
process's first build 1.5 s, as procgen loads its assets; later builds ~16 ms; a restore
~11 ms.) Fresh levels per evaluation build procgen at each one.
"""

from __future__ import annotations

import ctypes
import functools
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from ssilbench.api import PluginError
from ssilbench.kit import import_optional
from ssilbench_procgen.games import NUM_ACTIONS, OBS_SHAPE

INSTALL_HINT = (
    "Install it with: pip install 'ssilbench[procgen]' (the 'procgen-mirror' package, which "
    "provides the module 'procgen' on Python 3.11+)."
)

LIBRARY_HINT = (
    "procgen's native library links against system libraries that are missing here (the "
    "message above names the one); a headless image often lacks OpenGL's libGL.so.1, which "
    "Debian and Ubuntu install with: apt-get install libgl1."
)

SEEDS_KEPT = 8
"""Seeds whose initial states a vector env keeps (about 22 KB per bigfish environment each;
an evaluation needs one, training with unseeded resets draws a new one per reset)."""


PREBUILT_LIBRARIES = ("libenv.so", "libenv.dylib", "env.dll")
"""The names procgen's wheels give their native library, in ``procgen/data/prebuilt``."""


def import_procgen() -> Any:
    """The ``procgen`` module, or a PluginError saying how to install it or which system
    library its native library lacks. (procgen imports the unmaintained gym, whose notice
    on stderr is dropped: procgen is driven through its own vectorised interface.)"""
    module = import_optional("procgen", "The procgen environments need", INSTALL_HINT)
    problem = native_library_problem(Path(module.__file__).parent / "data" / "prebuilt")
    if problem is not None:
        raise library_error(problem)
    return module


def library_error(problem: str) -> PluginError:
    """The one message for a native library that does not load (``problem``: why)."""
    return PluginError(
        f"The procgen environments could not load procgen's native library ({problem}). "
        f"{LIBRARY_HINT}"
    )


@functools.cache
def native_library_problem(prebuilt: Path) -> str | None:
    """Why the wheel's native library in ``prebuilt`` does not load, or None. procgen
    imports without it and loads it only when it builds an environment, after a sweep's
    training; loading it here (about 70 ms, once per process) finds a missing system library
    before any run starts. A procgen without a prebuilt library (built from source) builds it
    at its first environment, which reports a failure there."""
    for name in PREBUILT_LIBRARIES:
        if (prebuilt / name).exists():
            try:
                ctypes.CDLL(str(prebuilt / name))
            except OSError as exc:
                return str(exc)
            return None
    return None


def procgen_problem() -> str | None:
    """Why the procgen environments cannot run here (what :func:`import_procgen` would
    raise: the package to install, or the system library to add), or None."""
    try:
        import_procgen()
    except PluginError as exc:
        return str(exc)
    return None


def procgen_available() -> bool:
    return procgen_problem() is None


class ProcgenVectorEnv(VectorEnv):
    """``num_envs`` copies of one game; equal seeds give equal episodes.

    ``reset(seed=s)`` starts procgen from random seed ``s``, which fixes the sequence of
    levels every sub-environment plays and every random event in them: the first time by
    building procgen with that seed, later by restoring the states saved then.
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(
        self,
        game: str,
        num_envs: int,
        seed: int = 0,
        distribution_mode: str = "easy",
        num_levels: int = 0,
        start_level: int = 0,
    ) -> None:
        self.game = game
        self.num_envs = num_envs
        self._settings = {
            "env_name": game,
            "num_levels": num_levels,
            "start_level": start_level,
            "distribution_mode": distribution_mode,
        }
        self.single_observation_space = spaces.Box(0, 255, shape=OBS_SHAPE, dtype=np.uint8)
        self.single_action_space = spaces.Discrete(NUM_ACTIONS)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._procgen = import_procgen()
        self._seed = seed
        self._env: Any = None
        self._initial_states: OrderedDict[int, list[bytes]] = OrderedDict()
        self.builds = 0
        """How many times procgen was built (once per seed not seen before)."""

    def _build(self, seed: int) -> None:
        self.close_extras()
        # procgen takes a 31-bit seed; larger seeds are folded into that range.
        try:
            self._env = self._procgen.ProcgenGym3Env(
                num=self.num_envs, rand_seed=int(seed) % (2**31 - 1), **self._settings
            )
        except OSError as exc:  # a library procgen built from source loads here
            raise library_error(str(exc)) from None
        self.builds += 1
        self._initial_states[seed] = self._env.get_state()
        while len(self._initial_states) > SEEDS_KEPT:
            self._initial_states.popitem(last=False)

    def _start(self, seed: int) -> None:
        """Put every sub-environment at the start of seed ``seed``'s first episode."""
        states = self._initial_states.get(seed)
        if self._env is None or states is None:
            self._build(seed)
            return
        # A state restores into an env built with any seed (procgen's own state test).
        self._env.set_state(states)
        self._initial_states.move_to_end(seed)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        if seed is None:
            # An unseeded reset continues with fresh levels drawn from the last seed.
            seed = int(np.random.Generator(np.random.PCG64(self._seed)).integers(2**31 - 1))
        self._seed = int(seed)
        self._start(self._seed)
        _, obs, _ = self._env.observe()
        return _channels_first(obs["rgb"]), {}

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        if self._env is None:
            raise RuntimeError("call reset() before step()")
        self._env.act(np.asarray(actions, dtype=np.int32).reshape(self.num_envs))
        reward, obs, first = self._env.observe()
        terminated = np.asarray(first, dtype=bool).copy()
        truncated = np.zeros(self.num_envs, dtype=bool)
        return (
            _channels_first(obs["rgb"]),
            np.asarray(reward, dtype=np.float32).copy(),
            terminated,
            truncated,
            {},
        )

    def close_extras(self, **kwargs: Any) -> None:
        if self._env is not None:
            close = getattr(self._env, "close", None)
            if close is not None:
                close()
            self._env = None


def _channels_first(frames: np.ndarray) -> np.ndarray:
    """(N, 64, 64, 3) -> (N, 3, 64, 64), contiguous."""
    return np.ascontiguousarray(np.asarray(frames).transpose(0, 3, 1, 2))
