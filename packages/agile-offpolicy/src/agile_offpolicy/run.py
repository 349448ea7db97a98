"""What the off-policy loop needs beyond the population: replay memories and exploration schedule."""

from __future__ import annotations

from typing import Any

from agile_core.specs.manifest import TrainingManifest
from agile_core.specs.training import ReplayBufferSpec, TrainingSpec
from agile_core.training.options import RunOptions
from agile_core.training.schedule import EpsilonSchedule
from agile_offpolicy.buffers import MultiStepReplayBuffer, PrioritizedReplayBuffer, ReplayBuffer


def buffer_n_step(spec: ReplayBufferSpec, algo_spec: Any) -> int:
    """Steps of the n-step buffer: the replay section's `n_step` (or `n_step_buffer_args.n_step`)
    when it sets one, else the algorithm's `n_step` (RainbowDQN), else the section's default."""
    explicit = "n_step" in spec.model_fields_set or "n_step" in spec.n_step_buffer_args.model_fields_set
    algo_n_step = getattr(algo_spec, "n_step", None)
    if explicit or algo_n_step is None:
        return int(spec.n_step_buffer_args.n_step)
    return int(algo_n_step)


def build_buffer(spec: ReplayBufferSpec, algo_spec: Any, device: Any, *, observation_space: Any = None,
                 action_space: Any = None, n_step: bool = False, num_envs: int = 1,
                 ) -> ReplayBuffer | MultiStepReplayBuffer:
    """A replay buffer of the kind the manifest's `replay_buffer` section asks for.

    With `n_step` (what ``ReplayBufferSpec.init_n_step_buffer`` asks for when PER and n-step are
    both on): the n-step companion buffer. Otherwise the main memory: prioritized when
    `per_buffer`, else n-step when `n_step_buffer` (n-step returns alone), else uniform. The
    n-step buffer discounts with the algorithm's `gamma` and keeps one window per sub-env
    (`num_envs`); paired buffers share `max_size`, which keeps their storage indices aligned.
    """
    if observation_space is None or action_space is None:
        raise ValueError("a replay buffer needs the environment's observation and action spaces")
    if n_step or (spec.n_step_buffer and not spec.per_buffer):
        gamma = getattr(algo_spec, "gamma", None)
        if gamma is None:
            raise ValueError(f"{getattr(algo_spec, 'name', algo_spec)} has no gamma to discount n-step returns")
        return MultiStepReplayBuffer(spec.max_size, observation_space, action_space,
                                     n_step=buffer_n_step(spec, algo_spec), gamma=float(gamma),
                                     num_envs=num_envs, device=device)
    if spec.per_buffer:
        return PrioritizedReplayBuffer(spec.max_size, observation_space, action_space,
                                       alpha=spec.per_buffer_args.alpha, device=device)
    return ReplayBuffer(spec.max_size, observation_space, action_space, device=device)


def build_memories(manifest: TrainingManifest, env: Any, device: str) -> tuple[Any, MultiStepReplayBuffer | None]:
    """The replay memory of the manifest's replay-buffer section, and the n-step memory paired
    with a prioritized one (None when the section asks for no pair)."""
    spec = manifest.resolved_replay_buffer()
    spaces = {"observation_space": env.single_observation_space, "action_space": env.single_action_space,
              "num_envs": int(getattr(env, "num_envs", 1))}
    return (spec.init_buffer(manifest.algorithm, device, **spaces),
            spec.init_n_step_buffer(manifest.algorithm, device, **spaces))


def epsilon_schedule(training: TrainingSpec) -> EpsilonSchedule:
    """The exploration schedule of the training section (the loop's defaults where it sets none)."""
    values = {"start": training.eps_start, "end": training.eps_end, "decay": training.eps_decay}
    return EpsilonSchedule(**{name: value for name, value in values.items() if value is not None})


def run_loop(manifest: TrainingManifest, env: Any, population: list[Any], options: RunOptions,
             device: str) -> tuple[list[Any], list[float]]:
    """Paradigm hook ``run_loop``: :func:`~agile_offpolicy.training.run_off_policy` with the
    memories, warm-up and epsilon schedule of the manifest."""
    from agile_offpolicy.training import run_off_policy

    memory, n_step_memory = build_memories(manifest, env, device)
    return run_off_policy(env, manifest.environment.name, manifest.algorithm.name, population, options, memory,
                          n_step_memory=n_step_memory, learning_delay=manifest.training.learning_delay,
                          schedule=epsilon_schedule(manifest.training))
