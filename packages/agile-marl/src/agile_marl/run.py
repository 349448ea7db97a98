"""What the trainer needs from the multi-agent paradigms beyond the specs: the vector env, the
agents' spaces, the replay memory, and the loop calls of a manifest run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from agile_core.specs.manifest import TrainingManifest
from agile_core.specs.training import ReplayBufferSpec

if TYPE_CHECKING:
    from agile_core.training.options import RunOptions


def make_env(spec: Any, *, base_dir: str | Path | None = None, seed: int | None = None,
             num_envs: int | None = None) -> Any:
    """The manifest's PettingZoo env as a vector env (checked against the Parallel API first)."""
    from agile_marl.envs import make_vec_env

    return make_vec_env(spec, num_envs=num_envs, seed=seed, base_dir=base_dir)


def agent_spaces(env: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The constructor's leading arguments: every agent's observation and action space."""
    return dict(env.observation_spaces), dict(env.action_spaces)


def build_buffer(spec: ReplayBufferSpec, algo_spec: Any, device: Any, *, observation_spaces: Any = None,
                 action_spaces: Any = None, n_step: bool = False, **_: Any) -> Any:
    """The shared multi-agent replay memory of the manifest's `replay_buffer` section (uniform only)."""
    from agile_marl.buffers import MultiAgentReplayBuffer

    if n_step or spec.per_buffer or spec.n_step_buffer:
        from agile_core.errors import ManifestError, ManifestIssue

        # A manifest problem (a ValueError too), so `agile train` reports the field and exits 2.
        field = "per_buffer" if spec.per_buffer else "n_step_buffer"
        raise ManifestError([ManifestIssue(("replay_buffer", field), f"{algo_spec.name} learns from a uniform "
                                           "replay buffer: prioritized and n-step replay_buffer settings are not "
                                           "supported for multi-agent algorithms", True)])
    if observation_spaces is None or action_spaces is None:
        raise ValueError("a multi-agent replay buffer needs every agent's observation and action spaces")
    return MultiAgentReplayBuffer(spec.max_size, observation_spaces, action_spaces, device=device)


def off_policy_run_loop(manifest: TrainingManifest, env: Any, population: list[Any], options: RunOptions,
                        device: str) -> tuple[list[Any], list[Any]]:
    """Paradigm hook ``run_loop`` of multi-agent off-policy: the shared replay memory of the
    manifest's replay-buffer section, its warm-up and score summing."""
    from agile_marl.training.off_policy import run_multi_agent_off_policy

    spaces = {"observation_spaces": dict(env.observation_spaces), "action_spaces": dict(env.action_spaces)}
    memory = manifest.resolved_replay_buffer().init_buffer(manifest.algorithm, device, **spaces)
    return run_multi_agent_off_policy(env, manifest.environment.name, manifest.algorithm.name, population, options,
                                      memory, learning_delay=manifest.training.learning_delay,
                                      sum_scores=manifest.training.sum_scores)


def on_policy_run_loop(manifest: TrainingManifest, env: Any, population: list[Any], options: RunOptions,
                       device: str) -> tuple[list[Any], list[Any]]:
    """Paradigm hook ``run_loop`` of multi-agent on-policy (score summing from the manifest)."""
    from agile_marl.training.on_policy import run_multi_agent_on_policy

    return run_multi_agent_on_policy(env, manifest.environment.name, manifest.algorithm.name, population, options,
                                     sum_scores=manifest.training.sum_scores)
