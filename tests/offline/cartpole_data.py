"""Small CartPole datasets made in the tests: random episodes, and a mixed-quality set recorded
from a partly trained DQN with epsilon noise (what a user's logged data often looks like)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from agile_offline.datasets import TransitionData
from agile_offline.recorder import record

FIELDS = ("observations", "actions", "rewards", "next_observations", "terminations", "truncations")


def concatenate(parts: list[TransitionData]) -> TransitionData:
    """The transitions of `parts` in order (flat observations)."""
    return TransitionData(**{name: np.concatenate([getattr(part, name) for part in parts]) for name in FIELDS})


def random_cartpole(episodes: int, seed: int) -> TransitionData:
    """`episodes` CartPole-v1 episodes of a uniformly random policy."""
    return record("CartPole-v1", None, episodes=episodes, seed=seed, progress=False)


def partly_trained_dqn(seed: int, target: float = 200.0, max_steps: int = 40_000):
    """A DQN trained on CartPole-v1 only until its greedy return first reaches `target` (or
    `max_steps`): a mediocre policy, as logged data usually comes from."""
    from agile_offpolicy import DQN, ReplayBuffer, train_off_policy

    env = gym.make_vec("CartPole-v1", num_envs=8, vectorization_mode="sync")
    agent = DQN(env.single_observation_space, env.single_action_space, lr=5e-4, batch_size=128, learn_step=4,
                tau=0.05, double=True, seed=seed,
                net_config={"latent_dim": 64, "encoder_config": {"hidden_size": [64]},
                            "head_config": {"hidden_size": [64]}})
    memory = ReplayBuffer(50_000, env.single_observation_space, env.single_action_space)
    population, _ = train_off_policy(env, "CartPole-v1", "DQN", [agent], memory, max_steps=max_steps, evo_steps=2_500,
                                     learning_delay=1_000, eps_decay=0.998, target=target, verbose=False, seed=seed)
    env.close()
    return population[0]


def mixed_quality(agent: object, seed: int, episodes_per_level: int = 20, ceiling: float = 200.0) -> TransitionData:
    """Episodes of `agent` with epsilon 0, 0.1, 0.3, 0.5 and 1 (uniform random), then more random
    episodes while the mean return is still >= `ceiling`."""
    parts = [record("CartPole-v1", agent, episodes=episodes_per_level, epsilon=epsilon, seed=seed * 10 + level,
                    progress=False) for level, epsilon in enumerate((0.0, 0.1, 0.3, 0.5, 1.0))]
    data = concatenate(parts)
    extra = 0
    while np.mean(data.episode_returns()) >= ceiling:
        extra += 1
        data = concatenate([data, random_cartpole(episodes_per_level, seed * 10 + 5 + extra)])
    return data
