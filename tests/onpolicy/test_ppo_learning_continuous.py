"""PPO with a Gaussian policy learns Pendulum-v1 (a short CI variant of the benchmark)."""

import gymnasium as gym
import pytest
import torch

from agile_onpolicy.ppo import PPO
from agile_onpolicy.training import train_on_policy
from tests.seeds import learning_seed

torch.set_num_threads(1)
NET = {"latent_dim": 64, "encoder_config": {"hidden_size": [64]}, "head_config": {"hidden_size": [64]}}
# configs/training/ppo_pendulum.yaml's settings, one agent, no evolution.
SETTINGS = {"lr": 1e-3, "learn_step": 2048, "batch_size": 64, "gamma": 0.9, "gae_lambda": 0.95, "update_epochs": 10,
            "ent_coef": 0.0, "action_std_init": 0.6, "share_encoders": False, "net_config": NET}


def pendulum(num_envs: int) -> gym.vector.VectorEnv:
    return gym.make_vec("Pendulum-v1", num_envs=num_envs, vectorization_mode="sync")


def train_pendulum(seed: int, max_steps: int) -> tuple[float, float]:
    """Greedy return (10 episodes) of one seeded agent before and after `max_steps` steps."""
    env, evaluation = pendulum(8), pendulum(10)
    evaluation.reset(seed=1000 + seed)
    torch.manual_seed(seed)
    agent = PPO(env.single_observation_space, env.single_action_space, seed=seed, **SETTINGS)
    before = agent.test(evaluation)
    (agent,), _ = train_on_policy(env, "Pendulum-v1", "PPO", [agent], max_steps=max_steps, evo_steps=20_480,
                                  verbose=False, seed=seed)
    evaluation.reset(seed=1000 + seed)
    return before, agent.test(evaluation)


@pytest.mark.learning
def test_ppo_improves_on_pendulum():
    """From about -1,400 (untrained) to better than -800 in 61k steps; the full benchmark reaches
    -400 with the population manifest (docs/paradigms/on-policy.md)."""
    before, after = train_pendulum(seed=learning_seed(), max_steps=61_440)
    assert before < -1000, before
    assert after > -800, (before, after)
