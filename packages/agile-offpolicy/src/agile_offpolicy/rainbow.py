"""Rainbow DQN (Hessel et al., 2018): noisy nets, dueling heads, C51 distributional returns,
n-step returns, prioritized replay and double-Q target selection.

The network (:class:`~agile_core.networks.RainbowQNetwork`) outputs, per action, a categorical
distribution over ``num_atoms`` returns evenly spaced on ``[v_min, v_max]``. For a transition
``(s, a, R, s', done)`` summing ``k`` rewards (``k = 1`` for a 1-step batch, ``n_steps`` per row
for an n-step batch):

    a*      = argmax_a' E[Z_online(s', a')]                   (double Q: the online net picks)
    target  = Proj( R + gamma^k * (1 - done) * z  with  z ~ Z_target(s', a*) )  onto the support
    loss_i  = cross-entropy(target, Z_online(s, a))           (per transition)
    loss    = mean_i w_i * loss_i                               (w: PER importance weights, else 1)

Priorities for prioritized replay are ``loss_i + prior_eps``. With an n-step batch paired to a
1-step batch (PER + n-step), the n-step loss is used; ``combined_reward`` adds the 1-step loss.

Exploration comes from the NoisyLinear output layers (training mode): the noise of the online
and target networks is redrawn, independently, after every learning step. Greedy evaluation
(``training=False``) uses the mean weights. After every learning step the target network moves
towards the online one by ``tau``.

The learning step and the acting rule are written once, for a group of ``P`` members
(:meth:`RainbowDQN.learn_population`, :meth:`RainbowDQN.act_population`: tensors ``[P, rows, ...]``,
``gamma``/``tau``/``prior_eps`` and the learning rate per member, stacked noisy layers in which
each member draws its own noise); ``learn`` and ``get_action`` are their ``P = 1`` case.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from typing import Any, ClassVar, cast

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import VectorEnv

from agile_core.algorithms.base import SingleAgentAlgorithm
from agile_core.algorithms.group import (
    MemberGroup,
    PopulationBatch,
    with_member_axis,
)
from agile_core.hpo.hyperparameters import HyperparameterConfig
from agile_core.networks import (
    EvolvableModule,
    NoisyLinear,
    RainbowQNetwork,
    preprocess_observation,
)
from agile_core.networks.noisy import draw_factorised_noise, mean_weights
from agile_core.specs.network import NetworkSpec
from agile_core.training.evaluation import evaluate_policy
from agile_offpolicy.population import ReplayPopulationBatch
from agile_offpolicy.specs import RainbowDQNSpec

__all__ = ["RainbowDQN", "project_distribution"]

_DEFAULTS = RainbowDQNSpec.defaults()
"""The registered spec's defaults: the one home of this algorithm's keyword defaults."""

def project_distribution(next_probs: torch.Tensor, rewards: torch.Tensor, discounts: torch.Tensor,
                         support: torch.Tensor) -> torch.Tensor:
    """C51 projection of ``rewards + discounts * Z`` onto `support` (Bellemare et al., 2017).

    Args:
        next_probs: ``[B, K]`` probabilities of Z on the atoms of `support`.
        rewards: ``[B]`` (n-step) rewards.
        discounts: ``[B]`` bootstrap discounts, ``gamma ** k * (1 - done)``.
        support: ``[K]`` evenly spaced atoms from ``v_min`` to ``v_max``.

    Each shifted atom ``r + d * z_j`` is clipped to ``[v_min, v_max]`` and its probability split
    between the two nearest atoms in proportion to closeness (all of it when it lands on one).
    """
    num_atoms = support.shape[0]
    v_min, v_max = float(support[0]), float(support[-1])
    delta = (v_max - v_min) / (num_atoms - 1)
    shifted = torch.addcmul(rewards.unsqueeze(-1), discounts.unsqueeze(-1), support).clamp_(v_min, v_max)
    position = shifted.sub_(v_min).div_(delta)  # in [0, num_atoms - 1]
    lower = position.floor()
    upper_share = position - lower  # 0 on an atom: all of it stays there
    lower_share = 1.0 - upper_share
    upper = (lower + 1).clamp_(max=num_atoms - 1)
    projected = torch.zeros_like(next_probs)
    projected.scatter_add_(-1, lower.long(), next_probs * lower_share)
    projected.scatter_add_(-1, upper.long(), next_probs * upper_share)
    return projected


def _own_rows(batch: PopulationBatch) -> list[int]:
    """Each member's own rows in `batch` (its sampled indices, or else its rows of nonzero weight)."""
    indices = getattr(batch, "indices", None)
    if indices:
        return [member_indices.size for member_indices in indices]
    return [int(rows) for rows in (batch.weights > 0).sum(dim=1).tolist()]


class RainbowDQN(SingleAgentAlgorithm):
    """Rainbow DQN agent: a noisy dueling C51 network, its target copy and an Adam optimizer.

    Args:
        observation_space: Space of one observation (not batched).
        action_space: Discrete action space (any ``start``).
        index: Agent index in the population.
        hp_config: Hyperparameters that RL-HP mutation may change, with their ranges (not
            ``num_atoms``, ``v_min``, ``v_max``, ``noise_std`` or ``n_step``: they are fixed).
        net_config: Architecture of the network (a ``NetworkSpec`` or its dict form).
        batch_size: Transitions per learning step.
        lr: Adam learning rate.
        learn_step: Environment steps (over all sub-envs) between learning steps.
        gamma: Discount factor.
        tau: Soft target update rate, applied after every learning step (1.0: hard copy).
        beta: Initial importance-sampling exponent of prioritized replay; the training loop
            anneals it linearly to 1 over the run.
        prior_eps: Added to every new priority so no transition has zero probability.
        num_atoms: Atoms of the return distribution.
        v_min: Lowest atom (smallest representable return).
        v_max: Highest atom (largest representable return).
        noise_std: Initial standard deviation scale of the noisy layers.
        n_step: Steps of the n-step return. Informational for the agent (each n-step
            transition carries its own step count); the manifest trainer sizes the n-step
            buffer with it unless the replay buffer section sets ``n_step`` itself.
        combined_reward: With a 1-step batch and its n-step view (PER + n-step), train on the
            sum of both losses instead of the n-step loss alone.
        normalize_images: Scale uint8 image observations to [0, 1].
        device: Torch device of the networks.
        seed: Seeds network initialisation, the first noise draw and the agent's RNG (None:
            fresh entropy).
        actor_network: A pre-built ``RainbowQNetwork`` to start from (cloned; `net_config`,
            `num_atoms`, `v_min` and `v_max` must agree with it).

    ``learn`` returns ``(loss, new_priorities)``; the training loop writes the priorities back
    into a prioritized replay buffer. Gradients are clipped to a global norm of
    ``max_grad_norm`` (class attribute, None disables).
    """

    spec_class = RainbowDQNSpec
    supported_action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Discrete,)
    max_grad_norm: ClassVar[float | None] = 10.0
    supports_per_and_n_step: ClassVar[bool] = True
    """Tells ``train_off_policy`` that ``learn`` takes ``n_experiences`` and returns priorities."""

    # hyperparameters, set from RainbowDQNSpec (declared here for the type checker)
    batch_size: int
    lr: float
    learn_step: int
    gamma: float
    tau: float
    beta: float
    prior_eps: float
    num_atoms: int
    v_min: float
    v_max: float
    noise_std: float
    n_step: int
    combined_reward: bool
    normalize_images: bool

    actor: RainbowQNetwork
    actor_target: RainbowQNetwork
    optimizer: torch.optim.Optimizer

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        index: int = 0,
        hp_config: HyperparameterConfig | None = None,
        net_config: NetworkSpec | Mapping[str, Any] | None = None,
        batch_size: int = _DEFAULTS["batch_size"],
        lr: float = _DEFAULTS["lr"],
        learn_step: int = _DEFAULTS["learn_step"],
        gamma: float = _DEFAULTS["gamma"],
        tau: float = _DEFAULTS["tau"],
        beta: float = _DEFAULTS["beta"],
        prior_eps: float = _DEFAULTS["prior_eps"],
        num_atoms: int = _DEFAULTS["num_atoms"],
        v_min: float = _DEFAULTS["v_min"],
        v_max: float = _DEFAULTS["v_max"],
        noise_std: float = _DEFAULTS["noise_std"],
        n_step: int = _DEFAULTS["n_step"],
        combined_reward: bool = _DEFAULTS["combined_reward"],
        normalize_images: bool = _DEFAULTS["normalize_images"],
        device: str | torch.device = "cpu",
        seed: int | None = None,
        actor_network: EvolvableModule | None = None,
    ) -> None:
        self.adopt_hyperparameters(locals())
        super().__init__(observation_space, action_space, index=index, hp_config=hp_config, device=device)
        discrete = cast(spaces.Discrete, action_space)
        fixed = sorted(set(self.hp_config) - set(self.hyperparameter_names))
        if fixed:
            raise ValueError(f"RainbowDQN cannot mutate {', '.join(fixed)}: fixed at construction")
        self.num_actions = int(discrete.n)
        self.action_start = int(discrete.start)
        self.rng = np.random.default_rng(seed)

        if actor_network is not None:
            if (not isinstance(actor_network, RainbowQNetwork) or actor_network.num_actions != self.num_actions
                    or (actor_network.num_atoms, actor_network.v_min, actor_network.v_max)
                    != (self.num_atoms, self.v_min, self.v_max)):
                raise ValueError(f"actor_network must be a RainbowQNetwork with {self.num_actions} actions, "
                                 f"num_atoms={self.num_atoms}, v_min={self.v_min}, v_max={self.v_max}")
            actor = actor_network.clone()
        else:
            with torch.random.fork_rng(devices=[]):
                if seed is not None:
                    torch.manual_seed(seed)
                actor = RainbowQNetwork(observation_space, action_space, net_config, num_atoms=self.num_atoms,
                                        v_min=self.v_min, v_max=self.v_max, noise_std=self.noise_std)
        if actor.recurrent:
            raise ValueError("RainbowDQN does not support recurrent (LSTM) networks")
        actor_target = actor.clone()
        self.actor = actor.to(self.device)
        self.actor_target = actor_target.to(self.device)
        self.actor_target.requires_grad_(False)

        self.register_network_group("actor", "actor_target")
        self.register_optimizer("optimizer", ["actor"], "lr", foreach=True)
        self.reset_noise()

    def set_hyperparameter(self, name: str, value: Any) -> None:
        """Set a mutable hyperparameter; the others (network shape, n-step) are refused."""
        if name not in self.hyperparameter_names:
            raise ValueError(f"RainbowDQN cannot change {name} after construction")
        super().set_hyperparameter(name, value)

    def after_architecture_change(self) -> None:
        """Keep the target network frozen: layers a mutation adds to it start out trainable."""
        self.actor_target.requires_grad_(False)

    def reset_noise(self) -> None:
        """Redraw the noise of the online and target networks, independently, from the agent's RNG
        (so seeded runs repeat and resume exactly): one draw of standard normals split over the
        noisy layers in module order (the heads' output layers, online network first)."""
        draw_factorised_noise([layer for network in (self.actor, self.actor_target) for name in network.head_names
                               if isinstance(layer := getattr(network, name).output_layer, NoisyLinear)], self.rng)

    @property
    def reads_one_step_transitions(self) -> bool:
        """A step paired with an n-step view reads the 1-step transitions only for ``combined_reward``."""
        return self.combined_reward

    def population_key(self) -> str:
        """Members of one group share the support (atoms, bounds), the loss form and image scaling."""
        return (f"{super().population_key()}|{self.num_atoms}|{self.v_min}|{self.v_max}|{self.combined_reward}"
                f"|{self.normalize_images}")

    # ------------------------------------------------------------------ acting
    def _observation(self, obs: Any) -> Any:
        return preprocess_observation(self.observation_space, obs, self.device, self.normalize_images)

    def get_action(self, obs: Any, epsilon: float = 0.0, action_mask: Any = None,
                   training: bool = True) -> np.ndarray:
        """Actions ``[num_envs]`` (int64) maximising the expected return of the distribution.

        With `training` the online network acts with its current noise (NoisyNets exploration);
        without it, with its mean weights (greedy). `epsilon` is accepted for the loop's calling
        convention and ignored: the noise explores. `action_mask` (``[num_envs, n]``, truthy =
        allowed) restricts the choice; every row needs an allowed action. The ``P = 1`` case of
        :meth:`act_population`.
        """
        masks = None if action_mask is None else [action_mask]
        return type(self).act_population(self.solo_group(), with_member_axis(self._observation(obs)), [epsilon],
                                         masks, training=training)

    @classmethod
    def act_population(cls, group: MemberGroup, inputs: Any, epsilons: Sequence[float],
                       action_masks: Sequence[Any] | None = None, training: bool = True) -> np.ndarray:
        """Greedy env actions ``[P * rows]`` (member-major) of the expected returns for network inputs
        ``[P, rows, ...]``: with each member's noise when `training`, with the mean weights
        otherwise (`epsilons` are ignored: the noise explores). Each member's ``[rows, n]`` action
        mask, when given, restricts its choice."""
        del epsilons
        online = group.nets["actor"]
        if not online.training:
            online.train()
        with torch.no_grad(), (nullcontext() if training else mean_weights()):
            q_values = online(inputs, "q")
        first = group.members[0]
        if action_masks is not None:
            allowed = torch.stack([torch.as_tensor(np.asarray(mask, dtype=bool).reshape(q_values.shape[1:]))
                                   for mask in action_masks]).to(q_values.device)
            if not bool(allowed.any(dim=-1).all()):
                raise ValueError("action_mask leaves no allowed action for some sub-environment")
            q_values = q_values.masked_fill(~allowed, -torch.inf)
        return q_values.argmax(dim=-1).reshape(-1).cpu().numpy().astype(np.int64) + first.action_start

    # ------------------------------------------------------------------ learning
    def learn(self, experiences: Sequence[Any], n_experiences: Sequence[Any] | None = None) -> tuple[float, np.ndarray]:
        """One gradient step; return ``(loss, new_priorities)`` (priorities: numpy ``[B]``).

        `experiences` is any sequence whose first five items are ``(obs, action, reward, next_obs,
        terminated)``: a ``ReplayBatch`` (1-step), a ``PrioritizedBatch`` (its ``weights`` scale
        each transition's loss) or an ``NStepBatch`` (reward is the n-step return; its
        ``n_steps`` discount the bootstrap). `n_experiences` is the n-step view of the same
        transitions (``n_step_memory.sample_from_indices(batch.indices)``): its loss replaces the
        1-step loss, or is added to it with ``combined_reward``. The ``P = 1`` case of
        :meth:`learn_population`, run through the agent's group of one.
        """
        batch = ReplayPopulationBatch.of_one(experiences, self.device, n_experiences)
        loss, priorities = type(self).learn_population(self.solo_group(), batch, [True])[0]
        return float(loss), priorities

    @classmethod
    def learn_population(cls, group: MemberGroup, batch: PopulationBatch, active: Sequence[bool]) -> list[Any]:
        """One gradient step for every active member of `group` on its rows of `batch` ``[P, rows, ...]``;
        return each member's ``(loss, new_priorities)`` (priorities: numpy ``[own rows]``), None if idle.

        `batch` may carry (:class:`~agile_offpolicy.population.ReplayPopulationBatch`) the rows'
        ``n_steps`` (an n-step memory, or the n-step view alone when the 1-step rows are not read:
        :attr:`reads_one_step_transitions`), prioritized replay ``importance`` weights and a paired
        ``n_step`` batch at the same indices. Each member uses its own ``gamma``, ``tau``,
        ``prior_eps``, learning rate and Adam state, and after its step redraws its noise from its
        own RNG; idle members' weights, targets, moments and noise stay as they were.
        """
        first = group.members[0]
        for network in (group.nets["actor"], group.nets["actor_target"]):
            if not network.training:
                network.train()
        paired = getattr(batch, "n_step", None)
        if paired is None:
            per_row = cls._distribution_loss(group, batch)
        else:
            per_row = cls._distribution_loss(group, paired)
            if first.combined_reward:
                per_row = per_row + cls._distribution_loss(group, batch)
        importance = getattr(batch, "importance", None)
        weighted = per_row if importance is None else per_row * importance
        losses = (weighted * batch.weights).sum(dim=1)
        group.step("optimizer", losses, active, cls.max_grad_norm)
        group.soft_update("actor_target", "actor", group.column("tau"), active)
        priorities = per_row.detach().cpu().numpy().astype(np.float64)
        priorities += np.array([[member.prior_eps] for member in group.members])
        rows = _own_rows(batch)
        values = losses.detach().tolist()
        results: list[Any] = []
        for index, (member, on) in enumerate(zip(group.members, active, strict=True)):
            if on:
                member.reset_noise()
                member.learn_counter += 1
                results.append((values[index], priorities[index, :rows[index]]))
            else:
                results.append(None)
        return results

    @classmethod
    def _distribution_loss(cls, group: MemberGroup, batch: PopulationBatch) -> torch.Tensor:
        """Per-row cross-entropy ``[P, rows]`` between the projected target and the online distribution."""
        first = group.members[0]
        obs, next_obs = first.population_inputs(batch.obs), first.population_inputs(batch.next_obs)
        actions = batch.action.long().reshape(batch.weights.shape)
        if first.action_start:
            actions = actions - first.action_start
        gamma = group.column("gamma")
        n_steps = getattr(batch, "n_steps", None)
        discounts = (gamma if n_steps is None else torch.pow(gamma, n_steps)) * (1.0 - batch.done)
        target = cls._target_distribution(group, batch.reward, next_obs, discounts)
        online = cast(RainbowQNetwork, group.nets["actor"])
        return torch.linalg.vecdot(target.neg_(), online.action_distribution(obs, actions, log=True))

    @staticmethod
    def _target_distribution(group: MemberGroup, rewards: torch.Tensor, next_inputs: Any,
                             discounts: torch.Tensor) -> torch.Tensor:
        """Projected target distributions ``[P, rows, num_atoms]`` (no gradient), double-Q action choice.

        The online network picks ``a* = argmax_a E[Z_online(s', a)]``, the target network's
        distribution for ``a*`` is shifted by the rewards, scaled by `discounts` (0 where the
        episode terminated) and projected onto the support.
        """
        with torch.no_grad():
            chosen = group.nets["actor"](next_inputs, "q").argmax(dim=-1)
            next_probs = cast(RainbowQNetwork, group.nets["actor_target"]).action_distribution(next_inputs, chosen)
            return project_distribution(next_probs, rewards, discounts, group.members[0].actor.support)

    def target_distribution(self, rewards: torch.Tensor, next_obs: Any, discounts: torch.Tensor) -> torch.Tensor:
        """The projected target ``[B, num_atoms]`` of this agent's flat batch (the ``P = 1`` case of
        :meth:`_target_distribution`)."""
        group = self.solo_group()
        for network in (group.nets["actor"], group.nets["actor_target"]):
            if not network.training:
                network.train()
        inputs = with_member_axis(self._observation(next_obs))
        return self._target_distribution(group, torch.as_tensor(rewards, device=self.device).reshape(1, -1), inputs,
                                         torch.as_tensor(discounts, device=self.device).reshape(1, -1))[0]

    def soft_update(self) -> None:
        """Move the target weights towards the online ones: ``target <- tau * online + (1 - tau) * target``.

        Noise buffers are left alone: the target network keeps its own noise draw.
        """
        group = self.solo_group()
        group.soft_update("actor_target", "actor", group.column("tau"), [True])

    # ------------------------------------------------------------------ evaluation
    def test(self, env: gym.Env | VectorEnv, swap_channels: bool = False, max_steps: int | None = None,
             loop: int = 1) -> float:
        """Greedy fitness (mean weights, no noise): the mean return of `loop` episodes per sub-env;
        appended to ``fitness``. See :func:`agile_core.training.evaluation.evaluate_policy`."""

        def act(obs: Any, info: dict[str, Any]) -> np.ndarray:
            return self.get_action(obs, action_mask=info.get("action_mask"), training=False)

        fitness = evaluate_policy(env, act, loop=loop, max_steps=max_steps, swap_channels=swap_channels)
        self.fitness.append(fitness)
        return fitness
