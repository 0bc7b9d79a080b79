"""Every registered environment task passes the core's conformance checks."""

from __future__ import annotations

import pytest

from ssilbench.api import PluginError, UsageError, provides
from ssilbench.plugins import load_plugins
from ssilbench.testing import ConformanceError, check_task, check_vector_env

PLUGINS = load_plugins()

# Procgen ships 16 games; a full check replays 1,000 steps twice, so a few games of each
# complexity class run here (tests/plugins/procgen/test_procgen_env.py replays a short
# stretch of every game).
PROCGEN_CHECKED = ("starpilot", "plunder", "ninja", "leaper")
# A LIBERO simulator takes seconds to build and reset: one task is checked here, with one
# sub-environment and short episodes (tests/plugins/libero/test_libero_env.py covers the
# rest).
LIBERO_CHECKED = "soup-sauce-basket"
SHORT = {"libero10": {"protocol": "smoke", "max_steps": 3}, "pusht": {"max_steps": 12}}
NUM_ENVS = {"libero10": 1}


def _skip_without_simulator(task) -> None:
    """Skip when the simulator the task's rollouts need is missing: the task says so itself
    (``Task.check_rollouts``), naming what to install."""
    try:
        task.check_rollouts()
    except (PluginError, UsageError) as exc:
        pytest.skip(str(exc))


def _cases():
    for family in PLUGINS.environments.names():
        environment = PLUGINS.environments.create(family)
        # Observation kinds are an option of some families; the others are checked once.
        has_state = "state" in environment.Options.model_fields
        for task in environment.tasks():
            if (family == "procgen" and task not in PROCGEN_CHECKED) or (
                family == "libero10" and task != LIBERO_CHECKED
            ):
                continue
            marks = (pytest.mark.slow,) if family == "libero10" else ()
            for state in ("position", "image") if has_state else (None,):
                label = f"{family}:{task}" + (f"-{state}" if state else "")
                yield pytest.param(family, task, state, id=label, marks=marks)


@pytest.mark.parametrize(("family", "task", "state"), list(_cases()))
def test_environment_conforms(family, task, state, tmp_path):
    environment = PLUGINS.environments.create(family)
    values = {**SHORT.get(family, {}), **({"state": state} if state else {})}
    loaded = environment.load(task, environment.Options(**values))
    _skip_without_simulator(loaded)
    if provides(environment, "import_dataset"):
        # Its data is imported from a download: the plugin's own tests check the dataset
        # on files they write in the published layout.
        check_vector_env(loaded, num_envs=NUM_ENVS.get(family, 4))
    else:
        check_task(loaded, tmp_path)


def test_conformance_detects_a_nondeterministic_env(tmp_path):
    environment = PLUGINS.environments.create("maze")
    task = environment.load("10x10", environment.Options())
    make = task.make_vec_env
    calls = []

    def drifting(num_envs, seed):
        venv = make(num_envs, seed)
        reset = venv.reset
        calls.append(seed)
        drift = len(calls)

        def reset_ignoring_seed(seed=None, options=None):
            return reset(seed=(seed or 0) + 1000 * drift, options=options)

        venv.reset = reset_ignoring_seed
        return venv

    task.make_vec_env = drifting
    with pytest.raises(ConformanceError, match="diverge"):
        check_task(task, tmp_path)
