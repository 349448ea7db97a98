"""The multi-agent on-policy loop with evolutionary HPO (``train_multi_agent_on_policy``).

One generation: the whole population steps one widened vector env (member ``p`` owns its own
``num_envs`` sub-envs), sampling actions through each algorithm's population-shaped rule. Every
member fills its own rollout (``ceil(learn_step / num_envs)`` vector steps, its own length after
mutations); when a member's rollout is full its advantages are computed (GAE with its own
``gamma``/``gae_lambda``; a dead agent's steps count for nothing) and it learns, together with
every member of its group whose rollout filled at the same step. A member collects
``ceil(evo_steps / learn_step)`` whole rollouts (core's
:class:`~agile_core.training.budget.StepBudget`, whole rollouts); then it sits out while the
others finish, and its steps count toward ``max_steps`` as taken. Then every member is evaluated
greedily and the shared generation loop selects, mutates, checkpoints and logs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from agile_core.hpo.mutation import Mutations
from agile_core.hpo.protocols import SelectionStrategy
from agile_core.training.generations import GenerationLoop, PhaseResult
from agile_core.training.options import RunOptions, documents_run_options
from agile_core.training.profiling import PROFILER
from agile_marl.buffers.rollout import (
    MultiAgentRolloutBuffer,
    compute_advantages_together,
    population_batch,
)
from agile_marl.population import act_groups, member_view
from agile_marl.training.common import (
    PopulationRun,
    check_population,
    no_agent_phase,
    population_env,
    record_losses,
    run_generations,
)

__all__ = ["run_multi_agent_on_policy", "train_multi_agent_on_policy"]


def _rows(value: Any, rows: slice) -> Any:
    if isinstance(value, Mapping):
        return {key: _rows(item, rows) for key, item in value.items()}
    return value[rows]


class _Rollouts:
    """Each member's rollout buffer (rebuilt when its rollout length changes) and phase progress."""

    def __init__(self) -> None:
        self.buffers: dict[int, MultiAgentRolloutBuffer] = {}

    def start(self, population: list[Any], num_envs: int) -> list[MultiAgentRolloutBuffer]:
        buffers = []
        for slot, agent in enumerate(population):
            buffer = self.buffers.get(slot)
            if buffer is None or buffer.num_steps != agent.rollout_steps(num_envs):
                buffer = self.buffers[slot] = agent.create_rollout_buffer(num_envs)
            buffer.reset()
            buffers.append(buffer)
        return buffers


def _learn(run: PopulationRun, population: list[Any], buffers: list[MultiAgentRolloutBuffer], full: list[int],
           next_obs: Any, results: list[PhaseResult]) -> None:
    """Advantages of the members whose rollout just filled (bootstrapping from ``V(next_obs)``
    under the policy that collected it), then one update per group for those members."""
    members = len(population)
    assert run.groups is not None
    with PROFILER.learn:
        last_values: dict[int, dict[str, Any]] = {}
        for slots, group in run.groups:
            chosen = [slot for slot in slots if slot in full]
            if not chosen:
                continue
            first = group.members[0]
            values = group.algorithm.value_population(group, first.population_inputs(
                {agent: member_view(next_obs[agent], members, slots) for agent in first.agent_ids}))
            for position, slot in enumerate(slots):
                if slot in full:
                    last_values[slot] = {agent: value[position] for agent, value in values.items()}
        compute_advantages_together([buffers[slot] for slot in full], [last_values[slot] for slot in full],
                                    [population[slot].gamma for slot in full],
                                    [population[slot].gae_lambda for slot in full])
        for slots, group in run.groups:
            active = [slot in full for slot in slots]
            if not any(active):
                continue
            batch = population_batch([buffers[slot] if on else None for slot, on in zip(slots, active, strict=True)],
                                     group.members[0].agent_groups)
            for slot, stats in zip(slots, group.algorithm.learn_population(group, batch, active), strict=True):
                record_losses(results[slot].losses, stats)
    for slot in full:
        buffers[slot].reset()


def _phase(population: list[Any], run: PopulationRun, rollouts: _Rollouts, vector_steps: list[int],
           should_stop: Callable[[], bool]) -> list[PhaseResult]:
    """Every member collects and learns from whole rollouts until it took its `vector_steps`."""
    members, num_envs = len(population), run.num_envs
    run.groups_for(population)
    assert run.groups is not None
    buffers = rollouts.start(population, num_envs)
    results = [PhaseResult(vector_steps=0) for _ in population]
    taken = [0] * members
    stopping = False

    def collecting(slot: int) -> bool:
        return buffers[slot].size > 0 or (not stopping and taken[slot] < vector_steps[slot])

    with PROFILER.env:
        obs, info = run.start()
    while any(collecting(slot) for slot in range(members)):
        active = [collecting(slot) for slot in range(members)]
        with PROFILER.act:
            actions, acted = act_groups(run.groups, obs, members, training=True, action_masks=info.get("action_mask"))
        masks = info.get("action_mask")
        with PROFILER.env:
            next_obs, rewards, terminations, truncations, info = run.env.step(actions)
        run.account(rewards, info)
        full = []
        for slots, result in acted:
            for position, slot in enumerate(slots):
                if not active[slot]:
                    continue
                rows = slice(slot * num_envs, (slot + 1) * num_envs)
                extras = result.extras
                buffers[slot].add(
                    _rows(obs, rows), {agent: value[position] for agent, value in extras["action"].items()},
                    {agent: value[position] for agent, value in extras["log_prob"].items()},
                    {agent: value[position] for agent, value in extras["value"].items()},
                    _rows(rewards, rows), _rows(terminations, rows), _rows(truncations, rows), _rows(info["valid"], rows),
                    action_masks=None if masks is None else _rows(masks, rows))
                population[slot].steps += num_envs
                taken[slot] += 1
                if buffers[slot].full:
                    full.append(slot)
        if full:
            _learn(run, population, buffers, full, next_obs, results)
        obs = next_obs
        if not stopping and should_stop():
            stopping = True
    return run.finish(population, results, taken)


@documents_run_options
def train_multi_agent_on_policy(
    env: Any,
    env_name: str,
    algo: str,
    pop: list[Any],
    sum_scores: bool = True,
    init_hp: dict[str, Any] | None = None,
    mut_p: dict[str, Any] | None = None,
    max_steps: int = 50000,
    evo_steps: int = 25,
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
    *,
    resume_from_checkpoint: str | None = None,
    seed: int | None = None,
    csv_path: str | None = None,
    batch_population: bool = True,
) -> tuple[list[Any], list[float] | list[dict[str, float]]]:
    """Train a population of multi-agent on-policy agents (IPPO) with evolutionary HPO.

    Step counts are environment steps per member; each generation, every member collects
    ``ceil(evo_steps / learn_step)`` whole rollouts of ``learn_step`` steps (at least one), and
    `max_steps` is checked after each generation, so the last may pass it (docs/step-budgets.md).

    Args:
        env: A PettingZoo ``ParallelEnv`` (one sub-env) or an ``agile_marl.envs`` vector env;
            widened to one slice of sub-envs per member.
        env_name: Environment name (logged).
        algo: Algorithm name (logged).
        pop: The agents (``IPPO``, or any algorithm with its rollout interface and the multi-agent
            population-shaped ``act_population``/``value_population``/``learn_population``).
        sum_scores: Fitness is the sum of the agents' returns (True); when False the per-agent
            mean returns are kept too and returned as dicts. Selection ranks by the sum.

    Returns:
        The population after its last evaluation and each member's fitness from it (dicts of
        per-agent fitness when `sum_scores` is false).
    """
    options = RunOptions.of_call(locals(), "train_multi_agent_on_policy")
    return run_multi_agent_on_policy(env, env_name, algo, pop, options, sum_scores=sum_scores)


def run_multi_agent_on_policy(env: Any, env_name: str, algo: str, pop: list[Any], options: RunOptions, *,
                              sum_scores: bool = True) -> tuple[list[Any], list[float] | list[dict[str, float]]]:
    """The multi-agent on-policy loop on `options` (see :func:`train_multi_agent_on_policy` for
    the other arguments)."""
    check_population(pop)
    widened = population_env(env, len(pop))
    run = PopulationRun(widened, widened.num_envs // len(pop), batched=options.batch_population)
    rollouts = _Rollouts()

    def phase(population: list[Any], vector_steps: list[int], should_stop: Callable[[], bool]) -> list[PhaseResult]:
        return _phase(population, run, rollouts, vector_steps, should_stop)

    config = {"env_name": env_name, "algo": algo, "population_size": len(pop), "num_envs": run.num_envs,
              **options.logged(), "sum_scores": sum_scores}
    loop = GenerationLoop.create(pop, widened, no_agent_phase, algo, env_name, options, config=config,
                                 whole_rollouts=True)
    return run_generations(loop, run, phase, options, sum_scores=sum_scores)
