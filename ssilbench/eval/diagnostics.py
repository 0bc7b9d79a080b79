"""Offline diagnostics on an environment's test set: accuracy and conditional entropies.

The paper measures test accuracy of argmax pi(a|s) against the expert on every feasible
state, and compares how stochastic the policy and the IDM are: the mean entropy of
pi(.|s) and of h(.|s, s') over the test transitions.
"""

from __future__ import annotations

import numpy as np
import torch

from ssilbench.api import Policy, TestSet
from ssilbench.data.tensors import as_model_input

_CHUNK = 8192


def entropy(probs: torch.Tensor) -> torch.Tensor:
    """Shannon entropy (nats) of each row of a probability matrix."""
    return -(probs * probs.clamp_min(1e-12).log()).sum(dim=-1)


class TestSetScorer:
    """Holds a task's test set on the device and scores policies on it."""

    __test__ = False  # not a pytest test class, despite its name

    def __init__(self, test_set: TestSet, device: torch.device) -> None:
        self.obs = as_model_input(test_set.obs, device)
        self.next_obs = as_model_input(test_set.next_obs, device)
        self.actions = torch.as_tensor(np.asarray(test_set.actions), device=device).long()

    @torch.no_grad()
    def __call__(self, policy: Policy) -> dict[str, float]:
        chunks = range(0, len(self.obs), _CHUNK)
        probs = torch.cat([policy.probs(self.obs[i : i + _CHUNK]) for i in chunks])
        out = {
            "test_accuracy": float((probs.argmax(-1) == self.actions).float().mean()),
            "policy_entropy": float(entropy(probs).mean()),
        }
        first = policy.idm_probs(self.obs[:1], self.next_obs[:1])
        if first is not None:
            idm = torch.cat(
                [policy.idm_probs(self.obs[i : i + _CHUNK], self.next_obs[i : i + _CHUNK])
                 for i in chunks]
            )  # fmt: skip
            out["idm_accuracy"] = float((idm.argmax(-1) == self.actions).float().mean())
            out["idm_entropy"] = float(entropy(idm).mean())
        return out
