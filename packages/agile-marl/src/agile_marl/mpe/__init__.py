"""A batched MPE in numpy: mpe2's scenarios with all sub-envs stepped as arrays.

Each scenario module (``agile_marl.mpe.simple_spread_v3`` ...) takes mpe2's keyword arguments
and gives the same agents, spaces, observations, rewards and episode ends as the mpe2 module of
the same name, through two entry points:

- ``parallel_env(**config)``: one sub-env as a PettingZoo ParallelEnv;
- ``vector_env(num_envs, seed=None, **config)``: a `MPEVecEnv` (the layout of
  `agile_marl.envs.PettingZooVecEnv`), which `agile_marl.envs.make_vec_env` uses for a manifest's
  ``environment.name: agile_marl.mpe.<scenario>``.

Sub-env i draws its episodes from its own generator, seeded with ``seed + i`` at a seeded
reset, in mpe2's order: seeded alike, a sub-env starts where the mpe2 env does.
"""

SCENARIOS = (
    "simple_v3",
    "simple_spread_v3",
    "simple_speaker_listener_v4",
    "simple_adversary_v3",
    "simple_tag_v3",
    "simple_reference_v3",
    "simple_push_v3",
    "simple_crypto_v3",
)
"""The scenario modules of this package (each named as its mpe2 module)."""

__all__ = ["SCENARIOS"]
