"""Deep Q-Network (Mnih et al., 2015) with optional double Q-learning (van Hasselt et al., 2016).

The agent learns Q(s, a) for discrete actions with an online network and a slowly moving target
network:

    target  y = r + gamma * (1 - terminated) * Q_target(s', a*)
            a* = argmax_a Q_online(s', a)   (double DQN)   or   argmax_a Q_target(s', a)
    loss      = mean squared error (Q_online(s, a), y)

Truncated transitions keep ``terminated == 0`` and so bootstrap from s'. After every gradient
step the target moves towards the online network: ``theta_target <- tau * theta + (1 - tau) *
theta_target``. Exploration is epsilon-greedy; the epsilon schedule belongs to the training loop.
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
from agile_core.hpo.hyperparameters import HyperparameterConfig
from agile_core.networks import EvolvableModule, QNetwork, preprocess_observation
from agile_core.specs.network import NetworkSpec
from agile_core.training.evaluation import evaluate_policy


def _check_hyperparameters(batch_size: int, lr: float, learn_step: int, gamma: float, tau: float) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int | np.integer) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    if isinstance(learn_step, bool) or not isinstance(learn_step, int | np.integer) or learn_step < 1:
        raise ValueError(f"learn_step must be an integer >= 1, got {learn_step!r}")
    if not lr > 0:
        raise ValueError(f"lr must be > 0, got {lr}")
    if not 0 < gamma <= 1:
        raise ValueError(f"gamma must lie in (0, 1], got {gamma}")
    if not 0 < tau <= 1:
        raise ValueError(f"tau must lie in (0, 1], got {tau}")


def td_loss(q_taken: torch.Tensor, td_target: torch.Tensor, kind: str, reduction: str = "mean") -> torch.Tensor:
    """The TD loss `kind` ("huber": smooth L1 with beta 1; "mse": squared error)."""
    if kind == "huber":
        return F.smooth_l1_loss(q_taken, td_target, reduction=reduction)
    if kind == "mse":
        return F.mse_loss(q_taken, td_target, reduction=reduction)
    raise ValueError(f"unknown DQN loss {kind!r}; choose 'huber' or 'mse'")


class DQN(SingleAgentAlgorithm):
    """DQN agent: an evolvable Q network, its target copy and an Adam optimizer.

    Args:
        observation_space: Space of one observation (not batched).
        action_space: Discrete action space (any ``start``).
        index: Agent index in the population.
        hp_config: Hyperparameters that RL-HP mutation may change, with their ranges.
        net_config: Architecture of the Q network (a ``NetworkSpec`` or its dict form).
        batch_size: Transitions per learning step.
        lr: Adam learning rate.
        learn_step: Environment steps (over all sub-envs) between learning steps.
        gamma: Discount factor.
        tau: Soft target update rate, applied after every learning step (1.0: hard copy).
        double: Double Q-learning (the online network picks the bootstrap action).
        normalize_images: Scale uint8 image observations to [0, 1].
        device: Torch device of the networks.
        seed: Seeds network initialisation and the exploration RNG (None: fresh entropy).
        actor_network: A pre-built ``QNetwork`` to start from (cloned; `net_config` is ignored).

    Loss: the mean squared TD error, without gradient clipping, as the field's reference trainer
    does (``loss = "huber"`` and a ``max_grad_norm`` are class attributes for experiments). On
    CartPole with the reference settings the Huber loss clipped at norm 10 let 3 of 5 seeds miss
    475 within 100k steps per agent; the squared error reached it in 5 of 5 (docs/learning.md).
    A likely reason: Huber caps the pull of the large TD errors at episode ends, the signal
    CartPole is learnt from.
    """

    hyperparameter_names: ClassVar[tuple[str, ...]] = ("lr", "batch_size", "learn_step", "gamma", "tau")
    supported_action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Discrete,)
    max_grad_norm: ClassVar[float | None] = None
    loss: ClassVar[str] = "mse"
    """TD loss: "huber" (smooth L1) or "mse" (squared error)."""

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
        batch_size: int = 64,
        lr: float = 1e-4,
        learn_step: int = 5,
        gamma: float = 0.99,
        tau: float = 1e-3,
        double: bool = True,
        normalize_images: bool = True,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        actor_network: EvolvableModule | None = None,
    ) -> None:
        super().__init__(observation_space, action_space, index=index, hp_config=hp_config, device=device)
        discrete = cast(spaces.Discrete, action_space)
        _check_hyperparameters(batch_size, lr, learn_step, gamma, tau)
        self.num_actions = int(discrete.n)
        self.action_start = int(discrete.start)
        self.batch_size = int(batch_size)
        self.lr = float(lr)
        self.learn_step = int(learn_step)
        self.gamma = float(gamma)
        self.tau = float(tau)
        self.double = bool(double)
        self.normalize_images = bool(normalize_images)
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
            raise ValueError("DQN does not support recurrent (LSTM) Q networks")
        self.actor = actor.to(self.device)
        self.actor_target = self.actor.clone()
        self.actor_target.requires_grad_(False)

        self.register_network_group("actor", "actor_target")
        self.register_optimizer("optimizer", ["actor"], "lr")

    def after_architecture_change(self) -> None:
        """Keep the target network frozen: layers a mutation adds to it start out trainable."""
        self.actor_target.requires_grad_(False)

    # ------------------------------------------------------------------ acting
    def _q_values(self, obs: Any, network: QNetwork | None = None) -> torch.Tensor:
        tensor = preprocess_observation(self.observation_space, obs, self.device, self.normalize_images)
        return (network or self.actor)(tensor)

    def get_action(self, obs: Any, epsilon: float = 0.0, action_mask: Any = None) -> np.ndarray:
        """Epsilon-greedy actions ``[num_envs]`` (int64) for a batch of observations.

        Each row independently explores with probability `epsilon` (a uniform random action) and
        otherwise takes the greedy action. `action_mask` (``[num_envs, n]``, truthy = allowed)
        restricts both the greedy and the random choice; every row needs an allowed action.
        A single unbatched observation gives an array of one action.
        """
        with torch.no_grad():
            q_values = self._q_values(obs)
        return self.epsilon_greedy(q_values, epsilon, action_mask)

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
        actions = np.where(explore, random_actions, greedy)
        return actions.astype(np.int64) + self.action_start

    # ------------------------------------------------------------------ learning
    def learn(self, experiences: Sequence[Any]) -> float:
        """One gradient step on a batch ``(obs, action, reward, next_obs, terminated, ...)``; return the loss.

        Any sequence whose first five items are those works (a ``ReplayBatch`` does). ``terminated``
        is 1 only for true terminations; truncated transitions must carry 0.
        """
        obs, actions, rewards, next_obs, terminated = tuple(experiences)[:5]
        actions = torch.as_tensor(actions, device=self.device).long().reshape(-1, 1) - self.action_start
        rewards = torch.as_tensor(rewards, device=self.device, dtype=torch.float32).reshape(-1)
        terminated = torch.as_tensor(terminated, device=self.device, dtype=torch.float32).reshape(-1)

        td_target = self.td_target(rewards, next_obs, terminated)
        q_taken = self._q_values(obs).gather(-1, actions).squeeze(-1)
        loss = td_loss(q_taken, td_target, self.loss)

        self.optimizer.zero_grad()
        loss.backward()
        if self.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.actor.parameters(), self.max_grad_norm)
        self.optimizer.step()

        self.soft_update()
        self.learn_counter += 1
        return float(loss.detach())

    def td_target(self, rewards: torch.Tensor, next_obs: Any, terminated: torch.Tensor) -> torch.Tensor:
        """``r + gamma * (1 - terminated) * Q_target(s', a*)``, without gradient.

        With double DQN the online network picks ``a* = argmax_a Q_online(s', a)``; otherwise
        ``a* = argmax_a Q_target(s', a)`` (the classic max over the target network).
        """
        with torch.no_grad():
            next_q_target = self._q_values(next_obs, self.actor_target)
            if self.double:
                next_actions = self._q_values(next_obs).argmax(dim=-1, keepdim=True)
            else:
                next_actions = next_q_target.argmax(dim=-1, keepdim=True)
            next_q = next_q_target.gather(-1, next_actions).squeeze(-1)
            return rewards + self.gamma * (1.0 - terminated) * next_q

    def soft_update(self) -> None:
        """Move the target network towards the online one: ``target <- tau * online + (1 - tau) * target``."""
        with torch.no_grad():
            for online, target in zip(self.actor.parameters(), self.actor_target.parameters(), strict=True):
                target.lerp_(online, self.tau)
            for online_buffer, target_buffer in zip(self.actor.buffers(), self.actor_target.buffers(), strict=True):
                target_buffer.copy_(online_buffer)

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
