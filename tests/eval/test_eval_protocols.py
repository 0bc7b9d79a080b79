"""The evaluation protocols an EnvSpec can declare: which episodes are scored
(``eval_counting``) and where each evaluation starts (``eval_starts``). A scripted vector
env whose sub-environments restart by themselves, as Procgen's do."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces
from gymnasium.vector import VectorEnv

from ssilbench.api import EnvSpec, Normaliser, Policy, Task
from ssilbench.eval.rollout import Evaluator, evaluation_seed, run_episodes
from ssilbench.runs.identity import protocol_fingerprint

CPU = torch.device("cpu")
# Sub-environment i plays episodes of LENGTHS[i] steps, one after the other, with a reward
# of 1 per step (so an episode's return is its length).
LENGTHS = (2, 5, 3)


class Restarting(VectorEnv):
    """Sub-environments that start their next episode when one ends; ``seeds`` records every
    reset's seed and ``asked`` how many observations each step was given actions for."""

    def __init__(self, lengths=LENGTHS, success_every: int = 0) -> None:
        self.lengths = np.array(lengths)
        self.num_envs = len(lengths)
        self.single_action_space = spaces.Discrete(2)
        self.t = np.zeros(self.num_envs, dtype=int)
        self.episode = np.zeros(self.num_envs, dtype=int)
        self.seeds: list[int | None] = []
        self.success_every = success_every

    def reset(self, *, seed=None, options=None):
        self.seeds.append(seed)
        self.t[:] = 0
        self.episode[:] = 0
        return np.zeros((self.num_envs, 1), dtype=np.float32), {}

    def step(self, actions):
        assert len(actions) == self.num_envs
        self.t += 1
        ended = self.t >= self.lengths
        info = {}
        if self.success_every:
            info["is_success"] = ended & (self.episode % self.success_every == 0)
        self.episode += ended
        self.t[ended] = 0
        obs = np.zeros((self.num_envs, 1), dtype=np.float32)
        return obs, np.ones(self.num_envs), ended, np.zeros_like(ended), info

    def close_extras(self, **kwargs):
        pass


class Coin(Policy):
    def probs(self, obs):
        return torch.full((len(obs), 2), 0.5)


def spec(**protocol) -> EnvSpec:
    return EnvSpec(env_id="test:restarting", obs_shape=(1,), obs_dtype="float32",
                   obs_kind="vector", num_actions=2, horizon=20, eval_episodes=len(LENGTHS),
                   eval_every=10, default_steps=10, default_arch="mlp5",
                   normaliser=Normaliser(name="raw", low=0.0, high=10.0), **protocol)  # fmt: skip


class Scripted(Task):
    def __init__(self, **protocol) -> None:
        self.spec = spec(**protocol)

    def dataset(self, root):
        raise NotImplementedError

    def make_vec_env(self, num_envs, seed):
        return Restarting()


def _play(counting: str, venv: VectorEnv | None = None):
    venv = venv or Restarting()
    generator = torch.Generator().manual_seed(0)
    return run_episodes(venv, Coin(), spec(eval_counting=counting), 7, CPU, generator)


def test_first_per_env_scores_each_sub_environments_first_episode():
    episodes = _play("first_per_env")
    assert episodes.scores.tolist() == [2.0, 5.0, 3.0]
    assert episodes.envs is None and episodes.successes is None


def test_first_to_finish_scores_the_episodes_in_the_order_they_end():
    # Ends: env 0 at steps 2 and 4, env 2 at step 3; the third episode ends at step 4.
    # Every sub-environment keeps playing (and is asked to act) until then.
    episodes = _play("first_to_finish")
    assert episodes.scores.tolist() == [2.0, 3.0, 2.0]
    assert episodes.envs.tolist() == [0, 2, 0]
    assert episodes.forwarded == 4 * 3
    # env 1's long episode is not waited for: it ends at step 5
    assert 5.0 not in episodes.scores


def test_first_to_finish_counts_every_episode_ending_on_the_last_step():
    # Steps 2 and 4 end env 0, steps 3 end env 1, step 4 also ends env 2 (length 4):
    # the count reaches 3 at step 4 with two episodes ending there; both are scored.
    episodes = _play("first_to_finish", Restarting((2, 3, 4)))
    assert episodes.scores.tolist() == [2.0, 3.0, 2.0, 4.0]
    assert episodes.envs.tolist() == [0, 1, 0, 2]


def test_first_to_finish_records_success_per_episode_and_groups_by_sub_environment():
    venv = Restarting(success_every=2)  # an env's 1st, 3rd, ... episodes succeed
    episodes = _play("first_to_finish", venv)
    assert episodes.successes.tolist() == [True, True, False]
    assert episodes.played_by(np.array([0])).tolist() == [True, False, True]


def test_fixed_starts_reset_with_eval_seed_and_fresh_ones_per_step_and_run_seed():
    fixed = spec()
    assert {evaluation_seed(fixed, run, step) for run in (0, 1) for step in (500, 1000)} == {
        fixed.eval_seed
    }
    fresh = spec(eval_starts="fresh")
    seeds = {(run, step): evaluation_seed(fresh, run, step) for run in (0, 1)
             for step in (500, 1000)}  # fmt: skip
    assert len(set(seeds.values())) == 4  # new starts per evaluation and per run seed
    assert evaluation_seed(fresh, 1, 500) == seeds[(1, 500)]  # a pure function
    assert evaluation_seed(spec(eval_starts="fresh", eval_seed=1), 1, 500) != seeds[(1, 500)]


def test_the_evaluator_resets_as_the_protocol_says():
    evaluator = Evaluator(Scripted(eval_starts="fresh"), CPU, run_seed=3)
    first, again = evaluator(Coin(), 500), evaluator(Coin(), 500)
    later = evaluator(Coin(), 1000)
    assert first == again  # the same step replays the same evaluation
    fresh = spec(eval_starts="fresh")
    assert evaluator.venv.seeds == [evaluation_seed(fresh, 3, 500)] * 2 + [
        evaluation_seed(fresh, 3, 1000)
    ]
    assert later.returns == first.returns  # the scripted episodes ignore the seed
    fixed = Evaluator(Scripted(), CPU, run_seed=3)
    for step in (500, 1000):
        fixed(Coin(), step)
    assert fixed.venv.seeds == [fixed.spec.eval_seed] * 2


def test_first_to_finish_evaluations_score_every_counted_episode():
    result = Evaluator(Scripted(eval_counting="first_to_finish"), CPU)(Coin(), 10)
    assert result.returns == (2.0, 3.0, 2.0)
    assert result.mean_return == pytest.approx(7 / 3) and result.score == pytest.approx(7 / 30)


def test_the_new_fields_change_the_protocol_only_away_from_their_defaults():
    plain = spec()
    dumped = plain.model_dump(mode="json")
    assert "eval_starts" not in dumped and "eval_counting" not in dumped  # ids stay
    fingerprints = {protocol_fingerprint(s) for s in (plain, spec(eval_starts="fresh"),
                    spec(eval_counting="first_to_finish"))}  # fmt: skip
    assert len(fingerprints) == 3
    assert spec(eval_starts="fixed").model_dump(mode="json") == dumped
