"""Q-learning with a deep network: what DQN (off-policy) and CQN (offline) share.

A :class:`QLearner` learns Q(s, a) for discrete actions with an online network and a slowly moving
target network (Mnih et al., 2015; double Q-learning: van Hasselt et al., 2016):

    target  y = r + gamma * (1 - terminated) * Q_target(s', a*)
            a* = argmax_a Q_online(s', a)   (double DQN)   or   argmax_a Q_target(s', a)
    loss      = mean squared error (Q_online(s, a), y)

Truncated transitions keep ``terminated == 0`` and so bootstrap from s'. After every gradient
step the target moves towards the online network: ``theta_target <- tau * theta + (1 - tau) *
theta_target``. Exploration is epsilon-greedy; the epsilon schedule belongs to the training loop.
Subclasses add a per-transition term to the loss (:meth:`QLearner.extra_loss`: CQN's conservative
penalty) and give the constructor the defaults of their registered spec.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, cast

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces
from gymnasium.vector import VectorEnv

from agile_core.algorithms.base import SingleAgentAlgorithm
from agile_core.algorithms.group import (
    MemberGroup,
    PopulationBatch,
    forward_with_free_rows,
    with_member_axis,
)
from agile_core.hpo.hyperparameters import HyperparameterConfig
from agile_core.networks import (
    EvolvableModule,
    QNetwork,
    preprocess_observation,
)
from agile_core.specs.network import NetworkSpec
from agile_core.training.evaluation import evaluate_policy

TD_LOSSES = ("mse", "huber")
"""The TD losses a Q-learner can minimise (the ``loss`` hyperparameter)."""


def td_loss(q_taken: torch.Tensor, td_target: torch.Tensor, kind: str, reduction: str = "mean") -> torch.Tensor:
    """The TD loss `kind` ("huber": smooth L1 with beta 1; "mse": squared error)."""
    if kind == "huber":
        return F.smooth_l1_loss(q_taken, td_target, reduction=reduction)
    if kind == "mse":
        return F.mse_loss(q_taken, td_target, reduction=reduction)
    raise ValueError(f"unknown TD loss {kind!r}; choose 'huber' or 'mse'")


class QLearner(SingleAgentAlgorithm):
    """A Q-learning agent: an evolvable Q network, its target copy and an Adam optimizer.

    Subclasses (DQN, CQN) set `spec_class`, take the spec's hyperparameters as constructor
    keywords, adopt them (:meth:`adopt_hyperparameters`) and then call this constructor; the
    learning step reads ``batch_size``, ``lr``, ``learn_step``, ``gamma``, ``tau``, ``double``,
    ``normalize_images``, ``loss`` and ``max_grad_norm`` from the agent.

    Args:
        observation_space: Space of one observation (not batched).
        action_space: Discrete action space (any ``start``).
        index: Agent index in the population.
        hp_config: Hyperparameters that RL-HP mutation may change, with their ranges.
        net_config: Architecture of the Q network (a ``NetworkSpec`` or its dict form).
        device: Torch device of the networks.
        seed: Seeds network initialisation and the exploration RNG (None: fresh entropy).
        actor_network: A pre-built ``QNetwork`` to start from (cloned; `net_config` is ignored).

    Loss: ``loss`` ``"mse"`` (squared TD error) or ``"huber"`` (smooth L1, beta 1), each update's
    gradient clipped to ``max_grad_norm`` when set. The algorithms' specs hold the defaults (DQN: the
    squared error, as the field's reference trainer uses, clipped at norm 10). On CartPole the
    squared error beat Huber (5 of 5 seeds against 2 of 5, docs/learning.md); on LunarLander, whose
    rewards reach -100/+100 in one step, the unclipped squared error collapsed and clipping at 10
    fixed it, with CartPole as fast as unclipped.
    """

    supported_action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Discrete,)

    # hyperparameters, set from the subclass's spec (declared here for the type checker)
    batch_size: int
    lr: float
    learn_step: int
    gamma: float
    tau: float
    double: bool
    normalize_images: bool
    loss: str
    max_grad_norm: float | None

    actor: QNetwork
    actor_target: QNetwork
    optimizer: torch.optim.Optimizer

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        index: int = 0,
        hp_config: HyperparameterConfig | None = None,
        net_config: NetworkSpec | Mapping[str, Any] | None = None,
        *,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        actor_network: EvolvableModule | None = None,
    ) -> None:
        super().__init__(observation_space, action_space, index=index, hp_config=hp_config, device=device)
        discrete = cast(spaces.Discrete, action_space)
        self.num_actions = int(discrete.n)
        self.action_start = int(discrete.start)
        self.rng = np.random.default_rng(seed)

        if actor_network is not None:
            if not isinstance(actor_network, QNetwork) or actor_network.num_actions != self.num_actions:
                raise ValueError(f"actor_network must be a QNetwork with {self.num_actions} outputs, "
                                 f"got {type(actor_network).__name__}")
            actor = actor_network.clone()
        else:
            with torch.random.fork_rng(devices=[]):
                if seed is not None:
                    torch.manual_seed(seed)
                actor = QNetwork(observation_space, action_space, net_config)
        if actor.recurrent:
            raise ValueError(f"{type(self).__name__} does not support recurrent (LSTM) Q networks")
        self.actor = actor.to(self.device)
        self.actor_target = self.actor.clone()
        self.actor_target.requires_grad_(False)

        self.register_network_group("actor", "actor_target")
        self.register_optimizer("optimizer", ["actor"], "lr")

    def after_architecture_change(self) -> None:
        """Keep the target network frozen: layers a mutation adds to it start out trainable."""
        self.actor_target.requires_grad_(False)

    # ------------------------------------------------------------------ acting
    def get_action(self, obs: Any, epsilon: float = 0.0, action_mask: Any = None) -> np.ndarray:
        """Epsilon-greedy actions ``[num_envs]`` (int64) for a batch of observations.

        Each row independently explores with probability `epsilon` (a uniform random action) and
        otherwise takes the greedy action. `action_mask` (``[num_envs, n]``, truthy = allowed)
        restricts both the greedy and the random choice; every row needs an allowed action.
        A single unbatched observation gives an array of one action. The ``P = 1`` case of
        :meth:`act_population`.
        """
        inputs = preprocess_observation(self.observation_space, obs, self.device, self.normalize_images)
        masks = None if action_mask is None else [action_mask]
        return type(self).act_population(self.solo_group(), with_member_axis(inputs), [epsilon], masks)

    @classmethod
    def act_population(cls, group: MemberGroup, inputs: Any, epsilons: Sequence[float],
                       action_masks: Sequence[Any] | None = None, training: bool = True) -> np.ndarray:
        """Epsilon-greedy env actions ``[P * rows]`` (member-major) for network inputs
        ``[P, rows, ...]``: one stacked Q computation, then each member's own exploration
        (:meth:`epsilon_greedy`) with its epsilon and, when given, its ``[rows, n]`` action mask;
        without `training`, epsilon is 0 for every member."""
        if not training:
            epsilons = [0.0] * len(group)
        with torch.no_grad():
            q_values = group.nets["actor"](inputs)
        if action_masks is None:
            greedy = q_values.argmax(dim=-1).cpu().numpy()
            return np.concatenate([member.explore(greedy[index], epsilons[index])
                                   for index, member in enumerate(group.members)])
        return np.concatenate([member.epsilon_greedy(q_values[index], epsilons[index], action_masks[index])
                               for index, member in enumerate(group.members)])

    def epsilon_greedy(self, q_values: torch.Tensor, epsilon: float, action_mask: Any = None) -> np.ndarray:
        """Actions ``[rows]`` from Q values ``[rows, n]``: greedy, or uniform with probability `epsilon`.

        Draws from the agent's ``rng`` exactly as :meth:`get_action` does.
        """
        q_values = q_values.reshape(-1, self.num_actions)
        rows = q_values.shape[0]
        allowed = None
        if action_mask is not None:
            allowed = np.asarray(action_mask, dtype=bool).reshape(rows, self.num_actions)
            if not allowed.any(axis=1).all():
                raise ValueError("action_mask leaves no allowed action for some sub-environment")
            q_values = q_values.masked_fill(~torch.as_tensor(allowed, device=q_values.device), -torch.inf)
        return self.explore(q_values.argmax(dim=-1).cpu().numpy(), epsilon, allowed)

    def explore(self, greedy: np.ndarray, epsilon: float, allowed: np.ndarray | None = None) -> np.ndarray:
        """Replace each greedy action ``[rows]`` (0-based) by a uniform random one (among the
        `allowed` ones, when given) with probability `epsilon`; return env actions (int64, with
        the space's ``start``). The population-batched loop computes every agent's greedy actions
        at once and calls this per agent."""
        rows = greedy.shape[0]
        explore = self.rng.random(rows) < epsilon
        if allowed is None:
            random_actions = self.rng.integers(self.num_actions, size=rows)
        else:  # uniform over the allowed actions: the largest of independent uniforms among them
            random_actions = np.where(allowed, self.rng.random((rows, self.num_actions)), -1.0).argmax(axis=1)
        actions = np.where(explore, random_actions, greedy).astype(np.int64, copy=False)
        return actions + self.action_start

    # ------------------------------------------------------------------ learning
    def learn(self, experiences: Sequence[Any]) -> float:
        """One gradient step on a batch ``(obs, action, reward, next_obs, terminated, ...)``; return the loss.

        Any sequence whose first five items are those works (a ``ReplayBatch`` does). ``terminated``
        is 1 only for true terminations; truncated transitions must carry 0. This is the ``P = 1``
        case of :meth:`learn_population`, run through the agent's group of one.
        """
        batch = PopulationBatch.of_one(experiences, self.device)
        return float(type(self).learn_population(self.solo_group(), batch, [True])[0])

    @classmethod
    def learn_population(cls, group: MemberGroup, batch: PopulationBatch, active: Sequence[bool]) -> list[Any]:
        """One gradient step for every active member of `group` on its rows of `batch` ``[P, rows, ...]``.

        Each member uses its own ``gamma``, ``tau``, learning rate and Adam state; padding rows and
        idle members weigh nothing, and idle members' weights, targets and moments stay as they were.
        """
        first = group.members[0]
        online = group.nets["actor"]
        obs, next_obs = first.population_inputs(batch.obs), first.population_inputs(batch.next_obs)
        actions = batch.action.long().reshape(*batch.weights.shape, 1)
        if first.action_start:
            actions = actions - first.action_start
        if first.double:  # the online network's choice in s' comes from the same call
            q_values, next_q_online = forward_with_free_rows(online, obs, next_obs)
        else:
            q_values, next_q_online = online(obs), None
        td_target = cls._td_target(group, next_obs, batch.reward, batch.done, next_q_online)
        q_taken = q_values.gather(-1, actions).squeeze(-1)
        per_row = td_loss(q_taken, td_target, first.loss, reduction="none")
        extra = cls.extra_loss(group, q_values, q_taken)
        if extra is not None:
            per_row = per_row + extra
        losses = (per_row * batch.weights).sum(dim=1)
        group.step("optimizer", losses, active, first.max_grad_norm)
        group.soft_update("actor_target", "actor", group.column("tau"), active)
        for member, on in zip(group.members, active, strict=True):
            member.learn_counter += int(on)
        return group.finish(active, losses.tolist())

    @classmethod
    def extra_loss(cls, group: MemberGroup, q_values: torch.Tensor, q_taken: torch.Tensor) -> torch.Tensor | None:
        """A per-transition term ``[P, rows]`` added to the TD loss, from the Q values of every
        action ``[P, rows, n]`` and of the taken one ``[P, rows]`` (None: plain Q-learning)."""
        return None

    def population_key(self) -> str:
        """Members of one group share double Q, image scaling, the TD loss and its clipping norm."""
        return f"{super().population_key()}|{self.double}|{self.normalize_images}|{self.loss}|{self.max_grad_norm}"

    @staticmethod
    def _td_target(group: MemberGroup, next_inputs: Any, rewards: torch.Tensor, done: torch.Tensor,
                   next_q_online: torch.Tensor | None = None) -> torch.Tensor:
        """``r + gamma * (1 - terminated) * Q_target(s', a*)`` ``[P, rows]``, without gradient.

        With double DQN the online network picks ``a* = argmax_a Q_online(s', a)`` (from
        `next_q_online` when already computed); otherwise ``a* = argmax_a Q_target(s', a)`` (the
        classic max over the target network).
        """
        with torch.no_grad():
            next_q_target = group.nets["actor_target"](next_inputs)
            if not group.members[0].double:
                chooser = next_q_target
            else:
                chooser = group.nets["actor"](next_inputs) if next_q_online is None else next_q_online
            next_q = next_q_target.gather(-1, chooser.argmax(dim=-1, keepdim=True)).squeeze(-1)
            return torch.addcmul(rewards, group.column("gamma") * (1.0 - done), next_q)

    def td_target(self, rewards: torch.Tensor, next_obs: Any, terminated: torch.Tensor) -> torch.Tensor:
        """The TD target ``[B]`` of this agent's flat batch (the ``P = 1`` case of :meth:`_td_target`)."""
        inputs = self.population_inputs(PopulationBatch.of_one((next_obs, 0, rewards, next_obs, terminated), self.device).obs)
        rewards = torch.as_tensor(rewards, dtype=torch.float32, device=self.device).reshape(1, -1)
        done = torch.as_tensor(terminated, dtype=torch.float32, device=self.device).reshape(1, -1)
        return self._td_target(self.solo_group(), inputs, rewards, done)[0]

    def soft_update(self) -> None:
        """Move the target network towards the online one: ``target <- tau * online + (1 - tau) * target``."""
        group = self.solo_group()
        group.soft_update("actor_target", "actor", group.column("tau"), [True])

    # ------------------------------------------------------------------ evaluation
    def test(self, env: gym.Env | VectorEnv, swap_channels: bool = False, max_steps: int | None = None,
             loop: int = 1) -> float:
        """Greedy fitness: the mean return of `loop` episodes per sub-env; appended to ``fitness``.

        See :func:`agile_core.training.evaluation.evaluate_policy`: each round resets `env`, and
        every sub-env contributes its first episode (cut at `max_steps` vector steps when given).
        An ``action_mask`` in the step info is respected.
        """

        def act(obs: Any, info: dict[str, Any]) -> np.ndarray:
            return self.get_action(obs, epsilon=0.0, action_mask=info.get("action_mask"))

        fitness = evaluate_policy(env, act, loop=loop, max_steps=max_steps, swap_channels=swap_channels)
        self.fitness.append(fitness)
        return fitness
