"""Expected SARSA over a leading member axis: the worked example of docs/writing-an-algorithm.md.

One Q network, no target network. For a batch of transitions ``(s, a, r, s', terminated)``:

    target  y = r + gamma * (1 - terminated) * V(s')
            V(s') = (1 - policy_epsilon) * max_a Q(s', a) + policy_epsilon * mean_a Q(s', a)
    loss      = mean squared error (Q(s, a), y)

V(s') is the expected value of the next state under an epsilon-greedy policy of the same network,
computed without gradient. The learning step and the acting rule are written once, for a group
of ``P`` members; a single agent's `learn` and `get_action` are their ``P = 1`` case.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, cast

import numpy as np
import torch
from gymnasium import spaces

from agile_core.algorithms.base import SingleAgentAlgorithm
from agile_core.algorithms.group import (
    MemberGroup,
    PopulationBatch,
    forward_with_free_rows,
    with_member_axis,
)
from agile_core.hpo.hyperparameters import HyperparameterConfig
from agile_core.networks import QNetwork, preprocess_observation
from agile_core.training.evaluation import evaluate_policy
from tests.core.example_algorithm.spec import ExpectedSarsaSpec

_DEFAULTS = ExpectedSarsaSpec.defaults()
"""The spec's defaults: the one home of the constructor's keyword defaults."""


class ExpectedSarsa(SingleAgentAlgorithm):
    """An Expected SARSA agent: an evolvable Q network and its Adam optimizer."""

    spec_class = ExpectedSarsaSpec
    supported_action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Discrete,)

    # set by adopt_hyperparameters (declared for the type checker)
    lr: float
    batch_size: int
    learn_step: int
    gamma: float
    policy_epsilon: float
    max_grad_norm: float | None

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        index: int = 0,
        hp_config: HyperparameterConfig | None = None,
        net_config: Mapping[str, Any] | None = None,
        lr: float = _DEFAULTS["lr"],
        batch_size: int = _DEFAULTS["batch_size"],
        learn_step: int = _DEFAULTS["learn_step"],
        gamma: float = _DEFAULTS["gamma"],
        policy_epsilon: float = _DEFAULTS["policy_epsilon"],
        max_grad_norm: float | None = _DEFAULTS["max_grad_norm"],
        device: str | torch.device = "cpu",
        seed: int | None = None,
    ) -> None:
        self.adopt_hyperparameters(locals())
        super().__init__(observation_space, action_space, index=index, hp_config=hp_config, device=device)
        discrete = cast(spaces.Discrete, action_space)
        self.num_actions, self.action_start = int(discrete.n), int(discrete.start)
        self.rng = np.random.default_rng(seed)  # exploration and replay sampling: saved, cloned, resumed
        with torch.random.fork_rng(devices=[]):
            if seed is not None:
                torch.manual_seed(seed)
            self.q_net = QNetwork(observation_space, action_space, net_config).to(self.device)
        self.register_network_group("q_net")
        self.register_optimizer("optimizer", ["q_net"], "lr")

    # ------------------------------------------------------------------ acting
    def get_action(self, obs: Any, epsilon: float = 0.0, action_mask: Any = None) -> np.ndarray:
        """Epsilon-greedy env actions ``[num_envs]`` for a batch of observations."""
        if action_mask is not None:
            raise ValueError("ExpectedSarsa does not take action masks")
        inputs = preprocess_observation(self.observation_space, obs, self.device)
        return type(self).act_population(self.solo_group(), with_member_axis(inputs), [epsilon])

    @classmethod
    def act_population(cls, group: MemberGroup, inputs: Any, epsilons: Sequence[float],
                       action_masks: Sequence[Any] | None = None, training: bool = True) -> np.ndarray:
        """Env actions ``[P * rows]`` (member-major) for inputs ``[P, rows, ...]``: one stacked
        forward pass, then each member explores with its own epsilon and random stream."""
        if action_masks is not None and any(mask is not None for mask in action_masks):
            raise ValueError("ExpectedSarsa does not take action masks")
        with torch.no_grad():
            greedy = group.nets["q_net"](inputs).argmax(dim=-1).cpu().numpy()  # [P, rows]
        return np.concatenate([member.explore(greedy[p], epsilons[p] if training else 0.0)
                               for p, member in enumerate(group.members)])

    def explore(self, greedy: np.ndarray, epsilon: float) -> np.ndarray:
        """Each greedy action ``[rows]`` replaced by a uniform one with probability `epsilon`."""
        rows = greedy.shape[0]
        explore = self.rng.random(rows) < epsilon
        actions = np.where(explore, self.rng.integers(self.num_actions, size=rows), greedy)
        return actions.astype(np.int64) + self.action_start

    # ------------------------------------------------------------------ learning
    def learn(self, experiences: Sequence[Any]) -> float:
        """One gradient step on ``(obs, action, reward, next_obs, terminated, ...)``; the loss."""
        batch = PopulationBatch.of_one(experiences, self.device)
        return float(type(self).learn_population(self.solo_group(), batch, [True])[0])

    @classmethod
    def learn_population(cls, group: MemberGroup, batch: PopulationBatch, active: Sequence[bool]) -> list[Any]:
        """One gradient step for every active member on its rows of `batch` ``[P, rows, ...]``."""
        first = group.members[0]
        obs, next_obs = first.population_inputs(batch.obs), first.population_inputs(batch.next_obs)
        q_values, next_q = forward_with_free_rows(group.nets["q_net"], obs, next_obs)  # [P, rows, n] each
        actions = batch.action.long().reshape(*batch.weights.shape, 1) - first.action_start
        q_taken = q_values.gather(-1, actions).squeeze(-1)  # [P, rows]
        epsilon = group.column("policy_epsilon")  # [P, 1]: each member's own value
        next_value = (1.0 - epsilon) * next_q.max(dim=-1).values + epsilon * next_q.mean(dim=-1)
        target = batch.reward + group.column("gamma") * (1.0 - batch.done) * next_value
        losses = ((q_taken - target) ** 2 * batch.weights).sum(dim=1)  # [P]: each member's mean
        group.step("optimizer", losses, active, first.max_grad_norm)
        for member, on in zip(group.members, active, strict=True):
            member.learn_counter += int(on)
        return group.finish(active, losses.tolist())

    def population_key(self) -> str:
        """`max_grad_norm` is read from the first member: members of one group share it."""
        return f"{super().population_key()}|{self.max_grad_norm}"

    # ------------------------------------------------------------------ evaluation
    def test(self, env: Any, swap_channels: bool = False, max_steps: int | None = None, loop: int = 1) -> float:
        """Greedy fitness: the mean return of `loop` episodes per sub-env; appended to `fitness`."""
        fitness = evaluate_policy(env, lambda obs, info: self.get_action(obs), loop=loop, max_steps=max_steps,
                                  swap_channels=swap_channels)
        self.fitness.append(fitness)
        return fitness
