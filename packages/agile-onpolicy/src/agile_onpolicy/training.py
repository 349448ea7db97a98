"""The on-policy training loop with evolutionary HPO (``train_on_policy``).

Each generation every agent collects ``ceil(evo_steps / learn_step)`` whole rollouts of
``learn_step`` environment steps (over its sub-environments, ``ceil(learn_step / num_envs)``
vector steps) and learns from each (:class:`~agile_core.training.budget.StepBudget`, whole
rollouts); its steps count toward ``max_steps`` as taken. Then the population is
evaluated, selected and mutated by the shared generation loop of agile-core, which also handles
reporting, checkpoints, elite saving, Ctrl-C and resuming.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import VectorEnv

from agile_core.hpo.mutation import Mutations
from agile_core.hpo.protocols import SelectionStrategy
from agile_core.training import as_vector_env, check_next_step_autoreset
from agile_core.training.envs import population_vector_env
from agile_core.training.generations import GenerationLoop, PhaseResult
from agile_core.training.options import RunOptions, documents_run_options
from agile_core.training.profiling import PROFILER
from agile_onpolicy.collect import collect_rollouts
from agile_onpolicy.population import can_batch, collect_and_learn_population, evaluate_batched
from agile_onpolicy.rollout import RolloutBuffer

__all__ = ["OnPolicyPhase", "make_phase", "run_on_policy", "train_on_policy"]


def _buffer_for(agent: Any, current: RolloutBuffer | None, num_envs: int) -> RolloutBuffer:
    """Reuse a slot's buffer when it still fits the agent (learn_step may have mutated)."""
    if current is not None and current.num_steps == agent.rollout_steps(num_envs) \
            and current.recurrent == agent.recurrent:
        return current
    return agent.create_rollout_buffer(num_envs)


class OnPolicyPhase:
    """One agent's training phase in `env` (the generation loop's ``PhaseFn``): whole rollouts of
    ``learn_step`` steps, each followed by a learning step, until `vector_steps` are taken.

    It keeps one rollout buffer per slot between phases. Built by :func:`train_on_policy`, or
    outside any loop by :func:`make_phase` (a Ray worker rebuilding its phase from the manifest).
    """

    def __init__(self, env: gym.Env | VectorEnv, collect: Callable[..., Any] | None = None,
                 swap_channels: bool = False) -> None:
        self.env = as_vector_env(env)
        check_next_step_autoreset(self.env)
        self.num_envs = int(self.env.num_envs)
        self.collect = collect or collect_rollouts
        self.swap_channels = swap_channels
        self.buffers: list[RolloutBuffer | None] = []

    def buffer(self, slot: int, agent: Any) -> RolloutBuffer:
        """Slot `slot`'s rollout buffer, rebuilt when it no longer fits `agent`."""
        if slot >= len(self.buffers):
            self.buffers.extend([None] * (slot + 1 - len(self.buffers)))
        buffer = self.buffers[slot] = _buffer_for(agent, self.buffers[slot], self.num_envs)
        return buffer

    def __call__(self, slot: int, agent: Any, vector_steps: int, should_stop: Callable[[], bool]) -> PhaseResult:
        buffer = self.buffer(slot, agent)
        result = PhaseResult(vector_steps=0)
        state = None  # the env was stepped by others since: start from a reset
        while result.vector_steps < vector_steps and not should_stop():
            state = self.collect(agent, self.env, buffer, state=state, swap_channels=self.swap_channels)
            with PROFILER.learn:
                stats = agent.learn(buffer)
            for key, value in stats.items():
                result.losses.setdefault(key, []).append(float(value))
            result.vector_steps += buffer.num_steps
            returns, lengths = state.pop_finished()
            result.episodic_returns += returns
            result.episode_lengths += lengths
        if result.episodic_returns:
            agent.scores.append(float(np.mean(result.episodic_returns)))
        return result


def make_phase(manifest: Any, env: gym.Env | VectorEnv, device: str = "cpu") -> OnPolicyPhase:
    """Paradigm hook ``make_phase``: the phase :func:`train_on_policy` runs for `manifest`, built
    outside the loop (``device`` is where the agents live; the phase itself does not need it)."""
    del device
    swap_channels = bool(manifest.algorithm.hyperparameters().get("CHANNELS_LAST", False))
    return OnPolicyPhase(env, swap_channels=swap_channels)


@documents_run_options
def train_on_policy(
    env: gym.Env | VectorEnv,
    env_name: str,
    algo: str,
    pop: list[Any],
    init_hp: dict[str, Any] | None = None,
    mut_p: dict[str, Any] | None = None,
    max_steps: int = 1_000_000,
    evo_steps: int = 10_000,
    eval_steps: int | None = None,
    eval_loop: int = 1,
    target: float | None = None,
    selection_strategy: SelectionStrategy | None = None,
    tournament: SelectionStrategy | None = None,
    mutation: Mutations | None = None,
    checkpoint: int | None = None,
    checkpoint_path: str | None = None,
    overwrite_checkpoints: bool = False,
    save_elite: bool = False,
    elite_path: str | None = None,
    wb: bool = False,
    tensorboard: bool = False,
    tensorboard_log_dir: str | None = None,
    verbose: bool = True,
    accelerator: Any = None,
    wandb_api_key: str | None = None,
    wandb_kwargs: dict[str, Any] | None = None,
    collect_rollouts_fn: Callable[..., Any] | None = None,
    *,
    resume_from_checkpoint: str | None = None,
    seed: int | None = None,
    csv_path: str | None = None,
    batch_population: bool = True,
) -> tuple[list[Any], list[float]]:
    """Train a population of on-policy agents (PPO) with evolutionary HPO.

    Step counts are environment steps per agent; each agent collects
    ``ceil(evo_steps / learn_step)`` whole rollouts per generation (at least one), and `max_steps`
    is checked after each generation, so the last may pass it (docs/step-budgets.md). With
    `batch_population`, the population trains at once when it can (plain feed-forward PPO agents
    with Discrete, MultiDiscrete or MultiBinary actions, no `collect_rollouts_fn`, and an env that
    can be widened: Gymnasium native vector envs and ``SyncVectorEnv``s of fresh-env factories):
    one vector env with ``len(pop) * num_envs`` sub-envs (agent ``i`` owns the i-th slice), agents
    sharing an architecture acting and learning as one stacked computation, each with its own
    rollout length and hyperparameters (see :mod:`agile_onpolicy.population`); otherwise agents
    train one after the other in `env`.

    Args:
        env: Gymnasium env or vector env (next-step autoreset); a plain env runs as one sub-env.
        env_name: Environment name (logged).
        algo: Algorithm name (logged).
        pop: The agents (PPO).
        collect_rollouts_fn: Replaces :func:`agile_onpolicy.collect.collect_rollouts`; it is
            called as ``fn(agent, env, buffer, state=state, swap_channels=...)`` and must return
            the collection state to pass to the next call (see that function's contract).

    Returns:
        The population after its last evaluation and each agent's fitness from that evaluation.
    """
    options = RunOptions.of_call(locals(), "train_on_policy")
    return run_on_policy(env, env_name, algo, pop, options, collect_rollouts_fn=collect_rollouts_fn)


def run_on_policy(env: gym.Env | VectorEnv, env_name: str, algo: str, pop: list[Any], options: RunOptions, *,
                  collect_rollouts_fn: Callable[..., Any] | None = None) -> tuple[list[Any], list[float]]:
    """The on-policy loop on `options` (see :func:`train_on_policy` for the other arguments)."""
    if not pop:
        raise ValueError("pop must contain at least one agent")
    swap_channels = options.swap_channels
    eval_loop, eval_steps = options.eval_loop, options.eval_steps
    phase = OnPolicyPhase(env, collect_rollouts_fn, swap_channels)
    vec_env, num_envs = phase.env, phase.num_envs
    config = {"env_name": env_name, "algo": algo, "population_size": len(pop), "num_envs": num_envs,
              **options.logged()}
    loop = GenerationLoop.create(pop, vec_env, phase, algo, env_name, options, config=config,
                                 swap_channels=swap_channels, whole_rollouts=True)
    population_env = population_vector_env(vec_env, len(pop)) \
        if options.batch_population and collect_rollouts_fn is None and can_batch(pop) else None
    if population_env is not None:
        def population_phase(agents: list[Any], vector_steps: list[int],
                             should_stop: Callable[[], bool]) -> list[PhaseResult]:
            slot_buffers = [phase.buffer(slot, agent) for slot, agent in enumerate(agents)]
            return collect_and_learn_population(agents, population_env, slot_buffers, vector_steps, swap_channels,
                                                should_stop)

        def population_evaluate(agents: list[Any]) -> list[float]:
            return evaluate_batched(agents, population_env, loop=eval_loop, max_steps=eval_steps,
                                    swap_channels=swap_channels)

        loop.batch_population(population_phase, population_evaluate, population_env, num_envs)
    return loop.train(options.resume_from_checkpoint)

