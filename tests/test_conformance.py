"""Every registered environment task passes the core's conformance checks."""

from __future__ import annotations

import pytest

from ssilbench.plugins import load_plugins
from ssilbench.testing import ConformanceError, check_task

PLUGINS = load_plugins()


def _cases():
    for family in PLUGINS.environments.names():
        environment = PLUGINS.environments.create(family)
        for task in environment.tasks():
            yield family, task


@pytest.mark.parametrize(("family", "task"), list(_cases()))
@pytest.mark.parametrize("state", ["position", "image"])
def test_environment_conforms(family, task, state, tmp_path):
    environment = PLUGINS.environments.create(family)
    fields = environment.Options.model_fields
    options = environment.Options(**({"state": state} if "state" in fields else {}))
    check_task(environment.load(task, options), tmp_path)


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
