"""Step-budget accounting, as the core's training and running code imports it.

The accounting is part of the plugin contract and is defined there, in
:mod:`ssilbench.stages` (a method opens a stage of its :class:`StagePlan` and ticks its
:class:`StageBudget`); the same objects are named here so that the core's modules that
account for a run's steps (the worker, the planner, the step timings) import them from the
training layer they belong to.
"""

from __future__ import annotations

from ssilbench.stages import StageBudget, StagePlan, StepParityError, check_stages

__all__ = ["StageBudget", "StagePlan", "StepParityError", "check_stages"]
