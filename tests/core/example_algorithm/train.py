"""Train the example on CartPole-v1 from a manifest, its paradigm registered for the run only."""

from typing import Any

from agile_core.registry import register_paradigm, unregister_paradigm
from agile_core.trainer import LocalTrainer
from tests.core.example_algorithm.plugin import PARADIGM

MANIFEST: dict[str, Any] = {
    "algorithm": {"name": "ExpectedSARSA", "lr": 1e-3, "batch_size": 64, "learn_step": 4},
    "environment": {"name": "CartPole-v1", "num_envs": 8},
    "training": {"max_steps": 8_000, "evo_steps": 2_000, "pop_size": 2, "learning_delay": 500,
                 "eps_start": 1.0, "eps_end": 0.05, "eps_decay": 0.99},
    "network": {"latent_dim": 64, "encoder_config": {"hidden_size": [64]}, "head_config": {"hidden_size": [64]}},
    "replay_buffer": {"max_size": 20_000},
    "mutation": {"probabilities": {"no_mut": 0.4, "arch_mut": 0.2, "new_layer": 0.2, "params_mut": 0.2,
                                   "act_mut": 0.0, "rl_hp_mut": 0.2}},
    "tournament_selection": {"tournament_size": 2, "elitism": True},
}
"""A population of 2 for 8,000 steps per member, selected and mutated every 2,000."""


def train(seed: int) -> tuple[list[Any], list[float]]:
    """The trained population and its last fitnesses; `seed` seeds the run and its mutations."""
    manifest = {**MANIFEST, "training": {**MANIFEST["training"], "seed": seed},
                "mutation": {**MANIFEST["mutation"], "rand_seed": seed}}
    register_paradigm(PARADIGM)
    try:
        return LocalTrainer.from_manifest(manifest).train(verbose=False)
    finally:
        unregister_paradigm(PARADIGM.name)
