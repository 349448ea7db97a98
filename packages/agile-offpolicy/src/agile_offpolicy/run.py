"""What the off-policy loop needs beyond the population: replay memory and exploration schedule."""

from __future__ import annotations

from typing import Any

from agile_core.specs.manifest import TrainingManifest
from agile_core.specs.training import ReplayBufferSpec
from agile_offpolicy.buffers import ReplayBuffer


def build_buffer(spec: ReplayBufferSpec, algo_spec: Any, device: Any, *, observation_space: Any = None,
                 action_space: Any = None, n_step: bool = False) -> ReplayBuffer:
    """The uniform replay buffer a manifest asks for (PER and n-step come with RainbowDQN)."""
    if n_step or spec.per_buffer or spec.n_step_buffer:
        raise ValueError("prioritized and n-step replay are used by RainbowDQN, which is not available yet")
    if observation_space is None or action_space is None:
        raise ValueError("a replay buffer needs the environment's observation and action spaces")
    return ReplayBuffer(spec.max_size, observation_space, action_space, device=device)


def loop_kwargs(manifest: TrainingManifest, env: Any, device: str) -> dict[str, Any]:
    """Arguments of `train_off_policy` that come from the manifest: memory, warm-up, epsilon."""
    training = manifest.training
    memory = build_buffer(manifest.resolved_replay_buffer(), manifest.algorithm, device,
                          observation_space=env.single_observation_space, action_space=env.single_action_space)
    kwargs: dict[str, Any] = {"memory": memory, "learning_delay": training.learning_delay}
    for name in ("eps_start", "eps_end", "eps_decay"):
        value = getattr(training, name)
        if value is not None:
            kwargs[name] = value
    return kwargs
