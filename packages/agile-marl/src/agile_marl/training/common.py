"""What both multi-agent loops share: the population check, the population env and its groups,
episode accounting, the generation loop, and the seeds' return value (per-agent fitness dicts
when `sum_scores` is false)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agile_core.algorithms.group import MemberGroup
from agile_core.training.episodes import EpisodeTracker
from agile_core.training.generations import GenerationLoop, PhaseResult
from agile_core.training.options import RunOptions
from agile_core.training.population import record_losses
from agile_marl.base import MultiAgentAgent
from agile_marl.evaluation import evaluate_population
from agile_marl.population import Groups, current_groups

__all__ = ["PopulationRun", "check_population", "fitness_result", "no_agent_phase", "population_env", "record_losses",
           "run_generations", "summed_rewards"]


def summed_rewards(rewards: Mapping[str, Any], info: Mapping[str, Any]) -> np.ndarray:
    """Each sub-env's reward of this step summed over the agents that had a transition in it."""
    total = None
    for agent, reward in rewards.items():
        part = np.where(np.asarray(info["valid"][agent], dtype=bool), np.asarray(reward, dtype=np.float64), 0.0)
        total = part if total is None else total + part
    assert total is not None
    return total


@dataclass
class PopulationRun:
    """The population env (member ``p`` owns sub-envs ``[p * n, (p + 1) * n)``), the groups that
    act and learn together, and episode accounting for one phase."""

    env: Any
    num_envs: int
    batched: bool
    groups: Groups | None = None
    tracker: EpisodeTracker | None = field(default=None, repr=False)

    def groups_for(self, population: Sequence[Any]) -> Groups:
        """Stacked groups (or one group per member when not batching), rebuilt after evolution."""
        if self.batched:
            self.groups = current_groups(population, self.groups)
        elif self.groups is None or [g.members[0] for _, g in self.groups] != list(population) or \
                not all(g.is_current() for _, g in self.groups):
            self.groups = [([slot], MemberGroup([agent])) for slot, agent in enumerate(population)]
        return self.groups

    def start(self) -> tuple[Any, dict[str, Any]]:
        """Reset the env for a phase; episode accounting starts afresh."""
        self.tracker = EpisodeTracker(self.env.num_envs)
        obs, info = self.env.reset()
        return obs, info

    def account(self, rewards: Mapping[str, Any], info: Mapping[str, Any]) -> None:
        """Episode returns (summed over agents) and lengths of this step."""
        assert self.tracker is not None
        over = np.asarray(info["episode_over"], dtype=bool)
        self.tracker.step(summed_rewards(rewards, info), over, np.zeros_like(over))

    def finish(self, population: Sequence[Any], results: list[PhaseResult], steps: Sequence[int]) -> list[PhaseResult]:
        """Each member's vector steps taken (`steps`) and finished training episodes into its
        result (and ``scores``)."""
        assert self.tracker is not None
        for agent, result, taken, (returns, lengths) in zip(population, results, steps,
                                                            self.tracker.pop_finished_by_agent(len(population)),
                                                            strict=True):
            result.vector_steps = int(taken)
            result.episodic_returns, result.episode_lengths = returns, lengths
            if returns:
                agent.scores.append(float(np.mean(returns)))
        return results

    def evaluator(self, *, loop: int, max_steps: int | None, sum_scores: bool) -> Callable[[list[Any]], list[float]]:
        """The population's evaluation in the population env (fitness = summed returns)."""
        def evaluate(population: list[Any]) -> list[float]:
            return evaluate_population(population, self.env, loop=loop, max_steps=max_steps,
                                       sum_scores=sum_scores, groups=self.groups_for(population))
        return evaluate


def population_env(env: Any, members: int) -> Any:
    """The env widened to one slice of sub-envs per member."""
    from agile_marl.envs import as_vec_env

    vec = as_vec_env(env)
    return vec if members == 1 else vec.widened(members)


def fitness_result(population: Sequence[MultiAgentAgent], fitnesses: list[float], sum_scores: bool) -> list[Any]:
    """The seeds' return value: fitnesses, or per-agent fitness dicts when `sum_scores` is false."""
    if sum_scores:
        return fitnesses
    return [dict(agent.agent_fitness[-1]) if agent.agent_fitness else {} for agent in population]


def no_agent_phase(slot: int, agent: Any, vector_steps: int, should_stop: Callable[[], bool]) -> PhaseResult:
    """The agent-by-agent phase the generation loop asks for: never used (the population trains at once)."""
    raise AssertionError("the multi-agent loops train the population at once")


def check_population(pop: Sequence[Any]) -> None:
    """A ValueError unless the population has a member."""
    if not pop:
        raise ValueError("pop must contain at least one agent")


def run_generations(loop: GenerationLoop, run: PopulationRun,
                    phase: Callable[[list[Any], list[int], Callable[[], bool]], list[PhaseResult]], options: RunOptions, *,
                    sum_scores: bool,
                    load_buffers: Callable[[Mapping[str, Any]], None] | None = None) -> tuple[list[Any], list[Any]]:
    """Run `loop` with the population phase and evaluation in `run`'s env; the seeds' return value."""
    evaluate = run.evaluator(loop=options.eval_loop, max_steps=options.eval_steps, sum_scores=sum_scores)
    loop.batch_population(phase, evaluate, run.env, run.num_envs)
    population, fitnesses = loop.train(options.resume_from_checkpoint, load_buffers=load_buffers)
    return population, fitness_result(population, fitnesses, sum_scores)
