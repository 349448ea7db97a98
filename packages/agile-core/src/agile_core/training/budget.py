"""Step budgets: what one generation asks of each member, and how the run's budget is spent.

Every loop counts in *steps* of one member, the unit of ``max_steps`` and ``evo_steps``: an
environment step summed over the member's sub-environments (online RL), a gradient step
(offline), a bandit step or a learning step (LLM). A phase takes *vector steps*; one vector step
is ``num_envs`` steps (1 where a step is not an environment step).

* Off-policy and every other step-by-step loop: a generation is ``ceil(evo_steps / num_envs)``
  vector steps, whatever is left of the budget (``evo_steps`` is capped at ``max_steps``).
* On-policy (:attr:`StepBudget.whole_rollouts`): a generation is
  :func:`rollouts_per_generation` whole rollouts of :func:`rollout_vector_steps` each, with each
  member's own ``learn_step``.
* Dataset-driven loops (:attr:`StepBudget.trim_last`): the last generation asks only for what is
  left of ``max_steps``, so the run ends exactly at it (``num_epochs`` stays whole epochs).

What counts is what a phase reports it took (its ``PhaseResult.vector_steps``), never what it
was asked for. The run is over, at a generation boundary, once every member has taken
``max_steps`` (the loop counts each generation by its least-stepped member); it may overshoot by
at most one generation. See ``docs/step-budgets.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["StepBudget", "rollout_vector_steps", "rollouts_per_generation", "vector_steps_for"]


def vector_steps_for(steps: int, num_envs: int) -> int:
    """Vector steps that cover `steps` steps of `num_envs` sub-environments: ``ceil(steps / num_envs)``."""
    return max(0, -(-int(steps) // int(num_envs)))


def rollout_vector_steps(learn_step: int, num_envs: int) -> int:
    """Vector steps of one on-policy rollout: ``ceil(learn_step / num_envs)``, at least 1."""
    return max(1, vector_steps_for(learn_step, num_envs))


def rollouts_per_generation(evo_steps: int, learn_step: int) -> int:
    """Rollouts an on-policy member collects in a generation: ``ceil(evo_steps / learn_step)``, at least 1."""
    return max(1, -(-int(evo_steps) // int(learn_step)))


@dataclass(frozen=True)
class StepBudget:
    """How many steps a run and each of its generations take (see the module docstring).

    `num_envs` is the steps one vector step of a member counts for; `whole_rollouts` makes a
    generation whole rollouts of each agent's ``learn_step`` (on-policy); `trim_last` cuts the last
    generation down to what is left of `max_steps`.
    """

    max_steps: int
    evo_steps: int
    num_envs: int = 1
    whole_rollouts: bool = False
    trim_last: bool = False

    def steps(self, vector_steps: int) -> int:
        """Steps of one member in `vector_steps` vector steps."""
        return int(vector_steps) * self.num_envs

    def exhausted(self, spent: int) -> bool:
        """Whether a member that has taken `spent` steps this run has used up the budget."""
        return spent >= self.max_steps

    def request(self, agent: Any, spent: int) -> int:
        """Vector steps `agent` takes in the next generation, each member having taken `spent` steps."""
        # A generation never asks for more than the whole budget (manifests refuse evo_steps >
        # max_steps; a Python call gets it capped), nor, with trim_last, more than is left of it.
        steps = min(self.evo_steps, self.max_steps - spent if self.trim_last else self.max_steps)
        if steps <= 0:
            return 0
        if self.whole_rollouts:
            learn_step = int(agent.learn_step)
            return rollouts_per_generation(steps, learn_step) * rollout_vector_steps(learn_step, self.num_envs)
        return vector_steps_for(steps, self.num_envs)

    def generation_steps(self, vector_steps: Sequence[int]) -> int:
        """What a generation in which each member took `vector_steps` adds to the run's count of
        steps per member: the least any member took (the run ends once every member is through)."""
        return self.steps(min(vector_steps, default=0))

    def projected_spent(self, population: Sequence[Any], spent: int = 0) -> int:
        """The run's count of steps per member at its end, from `spent`, if no hyperparameter that
        sets a generation's length changes (the progress bar's total when it counts per member)."""
        per_generation = self.generation_steps([self.request(agent, spent) for agent in population])
        if self.exhausted(spent) or per_generation <= 0:
            return spent
        if not self.trim_last:  # every generation the same
            return spent + -(-(self.max_steps - spent) // per_generation) * per_generation
        evo_steps, left = min(self.evo_steps, self.max_steps), self.max_steps - spent
        if left >= evo_steps:  # the generations that still ask for all of evo_steps
            spent += ((left - evo_steps) // per_generation + 1) * per_generation
        while not self.exhausted(spent):  # then at most one trimmed generation
            step = self.generation_steps([self.request(agent, spent) for agent in population])
            if step <= 0:
                break
            spent += step
        return spent

    def projected_total(self, population: Sequence[Any], spent: int = 0) -> int:
        """Steps of the whole population by the end of the run, from `spent` steps per member, if
        no hyperparameter that sets a generation's length changes (the progress bar's total)."""
        total = 0
        taken = [self.request(agent, spent) for agent in population]
        per_generation = self.generation_steps(taken)
        if self.exhausted(spent) or per_generation <= 0:
            return 0
        left = self.max_steps - spent
        if not self.trim_last:  # every generation the same
            return -(-left // per_generation) * self.steps(sum(taken))
        evo_steps = min(self.evo_steps, self.max_steps)
        if left >= evo_steps:  # the generations that still ask for all of evo_steps
            full = (left - evo_steps) // per_generation + 1
            total, spent = full * self.steps(sum(taken)), spent + full * per_generation
        while not self.exhausted(spent):  # then at most one trimmed generation
            taken = [self.request(agent, spent) for agent in population]
            if self.generation_steps(taken) <= 0:
                break
            total += self.steps(sum(taken))
            spent += self.generation_steps(taken)
        return total
