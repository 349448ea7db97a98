"""Seeded learning tests: a population of 2 DDPG / TD3 agents trained on Pendulum-v1 by
``train_off_policy`` with tournament selection (elitism) and mutations.

The off-policy loop is epsilon-greedy: for DDPG/TD3 its decaying epsilon is the probability of
a uniformly random action (``get_action(obs, epsilon=...)``), i.e. a random warm-up that fills
the replay memory with diverse actions before the policy (plus Gaussian noise) takes over.
The actor's learning rate is kept below the critic's (3e-4 vs 1e-3): a faster actor can follow an
untrained critic's action gradient into the tanh saturation at a bound, where it stays stuck
(seen as a flat return of about -1500 on Pendulum).
"""

from __future__ import annotations

import time

import gymnasium as gym
import pytest
import torch

from agile_core.hpo.hyperparameters import HyperparameterConfig, RLParameter
from agile_core.hpo.mutation import Mutations
from agile_core.hpo.selection import TournamentSelection
from agile_core.training import evaluate_policy
from agile_offpolicy.buffers import ReplayBuffer
from agile_offpolicy.ddpg import DDPG
from agile_offpolicy.td3 import TD3
from agile_offpolicy.training import train_off_policy
from tests.seeds import learning_seed

MAX_STEPS = 30_000
"""Environment steps per agent."""
NUM_ENVS = 4
LEARN_STEP = 2
"""Environment steps (over all sub-envs) per learning step."""


def _train_pendulum(cls: type[DDPG], seed: int) -> tuple[float, float, DDPG]:
    """Train a population of 2; return the best agent's greedy score on 10 fresh episodes, the
    training time in seconds, and the agent."""
    torch.set_num_threads(1)
    env = gym.make_vec("Pendulum-v1", num_envs=NUM_ENVS, vectorization_mode="sync")
    env.reset(seed=seed)
    obs_space, act_space = env.single_observation_space, env.single_action_space
    net = {"latent_dim": 64, "encoder_config": {"hidden_size": [64]}, "head_config": {"hidden_size": [64]}}
    hp = HyperparameterConfig(lr_actor=RLParameter("lr_actor", 1e-4, 3e-3),
                              lr_critic=RLParameter("lr_critic", 1e-4, 3e-3),
                              batch_size=RLParameter("batch_size", 64, 512, int))
    pop = [cls(obs_space, act_space, index=i, hp_config=hp, net_config=net, batch_size=128, lr_actor=3e-4,
                       lr_critic=1e-3, learn_step=LEARN_STEP, gamma=0.98, tau=5e-3, policy_freq=2, O_U_noise=False,
                       expl_noise=0.1, vect_noise_dim=NUM_ENVS, seed=seed * 100 + i) for i in range(2)]
    memory = ReplayBuffer(2 * MAX_STEPS, obs_space, act_space, seed=seed)  # shared by the population
    start = time.monotonic()
    pop, _ = train_off_policy(
        env, "Pendulum-v1", cls.__name__, pop, memory, max_steps=MAX_STEPS, evo_steps=2_000, learning_delay=1_000,
        eps_start=1.0, eps_end=0.0, eps_decay=0.998,
        selection_strategy=TournamentSelection(2, True, 2, rng=seed),
        mutation=Mutations(no_mutation=0.4, architecture=0.2, parameters=0.2, rl_hp=0.2, rand_seed=seed),
        verbose=False, seed=seed,
    )
    elapsed = time.monotonic() - start
    best = max(pop, key=lambda agent: agent.fitness[-1])
    eval_env = gym.make_vec("Pendulum-v1", num_envs=10, vectorization_mode="sync")
    score = evaluate_policy(eval_env, lambda obs, info: best.get_action(obs, training=False), seed=1234)
    env.close()
    eval_env.close()
    return score, elapsed, best


@pytest.mark.learning
def test_td3_population_learns_pendulum_within_30k_steps_per_agent() -> None:
    """Best TD3 agent scores >= -250 over 10 fresh greedy episodes."""
    score, elapsed, best = _train_pendulum(TD3, seed=learning_seed())
    print(f"Pendulum TD3: {best.steps} env steps per agent, {elapsed:.0f} s, best greedy return {score:.1f}")
    assert isinstance(best, TD3) and best.steps <= MAX_STEPS
    assert score >= -250.0


@pytest.mark.learning
def test_ddpg_population_learns_pendulum_within_30k_steps_per_agent() -> None:
    """Best DDPG agent scores >= -300 over 10 fresh greedy episodes."""
    score, elapsed, best = _train_pendulum(DDPG, seed=learning_seed())
    print(f"Pendulum DDPG: {best.steps} env steps per agent, {elapsed:.0f} s, best greedy return {score:.1f}")
    assert isinstance(best, DDPG) and best.steps <= MAX_STEPS
    assert score >= -300.0
