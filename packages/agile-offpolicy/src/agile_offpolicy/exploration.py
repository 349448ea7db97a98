"""Exploration noise of DDPG and TD3: re-exported from :mod:`agile_core.algorithms.exploration`,
where it lives so that the multi-agent algorithms share it."""

from agile_core.algorithms.exploration import (
    ActionNoise,
    GaussianNoise,
    OrnsteinUhlenbeckNoise,
    make_action_noise,
)

__all__ = ["ActionNoise", "GaussianNoise", "OrnsteinUhlenbeckNoise", "make_action_noise"]
