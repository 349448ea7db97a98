"""Deep Deterministic Policy Gradient (Lillicrap et al., 2016) for Box action spaces.

DDPG learns a deterministic policy ``mu(s)`` (the *actor*) and its action-value ``Q(s, a)``
(the *critic*), each with a slowly moving *target* copy that stabilises the bootstrap:

    critic target   y = r + gamma * (1 - terminated) * Q_target(s', mu_target(s'))
    critic loss       = mean (Q(s, a) - y)^2
    actor loss        = - mean Q(s, mu(s))            (ascend the critic along the action)
    target update     theta_target <- tau * theta + (1 - tau) * theta_target

The actor is updated (and the targets moved) once every ``policy_freq`` critic updates; with
``policy_freq == 1`` this is the original DDPG, larger values give TD3's delayed updates.
Truncated transitions keep ``terminated == 0`` and so bootstrap from ``s'``.

Actions. The actor's tanh output is rescaled to the action bounds ``[low, high]``. Inside the
algorithm actions are handled in *normalised* units, ``(a - centre) / half_range`` in ``[-1, 1]``:
the critic reads normalised actions, and exploration noise (``expl_noise``) and TD3's smoothing
noise (``policy_noise``, ``noise_clip``) are all relative to half the action range, so the same
hyperparameters suit any action scale. While training, :meth:`DDPG.get_action` adds Gaussian or
Ornstein-Uhlenbeck noise (see :mod:`agile_core.algorithms.exploration`) and clips to the bounds.

Evolution. The actor is the policy network: an architecture mutation sampled on it is applied
with the same resolved parameters to the critic(s), which share the actor's encoder and head
layout (so the encoders of actor and critic stay alike), and replayed on every target network;
each target then restarts from its online network.
:class:`agile_offpolicy.td3.TD3` extends this class with twin critics and target smoothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, cast

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import VectorEnv

from agile_core.algorithms.base import SingleAgentAlgorithm
from agile_core.algorithms.exploration import (
    ActionNoise,
    GaussianNoise,
    OrnsteinUhlenbeckNoise,
    make_action_noise,
)
from agile_core.algorithms.group import MemberGroup, PopulationBatch, with_member_axis
from agile_core.algorithms.spaces import UnsupportedSpaceError
from agile_core.hpo.hyperparameters import HyperparameterConfig
from agile_core.networks import (
    ContinuousQNetwork,
    DeterministicActor,
    EvolvableNetwork,
    preprocess_observation,
)
from agile_core.specs.network import NetworkSpec
from agile_core.training.evaluation import evaluate_policy
from agile_offpolicy.specs import DDPGSpec

__all__ = ["DDPG", "soft_update"]

NOISE_HYPERPARAMETERS = frozenset({"expl_noise", "mean_noise", "theta", "dt"})
"""Hyperparameters the exploration-noise process reads (changing one reconfigures it)."""


def soft_update(online: torch.nn.Module, target: torch.nn.Module, tau: float) -> None:
    """Polyak averaging: ``target <- tau * online + (1 - tau) * target``; buffers are copied.

    Both modules must have the same architecture (parameters in the same order and shapes).
    """
    with torch.no_grad():
        for source, dest in zip(online.parameters(), target.parameters(), strict=True):
            dest.lerp_(source, tau)
        for source_buffer, dest_buffer in zip(online.buffers(), target.buffers(), strict=True):
            dest_buffer.copy_(source_buffer)


def _check_action_space(algorithm: str, action_space: spaces.Space) -> None:
    """Box actions with finite bounds only (the actor squashes into them)."""
    assert isinstance(action_space, spaces.Box)  # the base class already rejected other kinds
    if not (np.all(np.isfinite(action_space.low)) and np.all(np.isfinite(action_space.high))):
        raise UnsupportedSpaceError(
            f"{algorithm} needs finite action bounds (its actor squashes actions into [low, high]), "
            f"got low={action_space.low}, high={action_space.high}"
        )
    if not np.all(action_space.high > action_space.low):
        raise UnsupportedSpaceError(f"{algorithm} needs high > low in every action dimension, got {action_space}")


_DEFAULTS = DDPGSpec.defaults()
"""The registered spec's defaults: the one home of this algorithm's keyword defaults."""

class DDPG(SingleAgentAlgorithm):
    """DDPG agent: a deterministic actor, critic(s), their targets and two Adam optimizers.

    The hyperparameters are ``DDPGSpec``'s fields, with its defaults and rules.

    Args:
        observation_space: Space of one observation (not batched): Box, Discrete, MultiDiscrete,
            MultiBinary, Dict or Tuple.
        action_space: Box with finite bounds; anything else is rejected at construction.
        index: Agent index in the population.
        hp_config: Hyperparameters RL-HP mutation may change, with their ranges.
        net_config: Architecture of the actor and of the critic(s) (one ``NetworkSpec`` or its
            dict form for both, so that architecture mutations can be replayed across them).
        batch_size: Transitions per learning step.
        lr_actor: Adam learning rate of the actor (``actor_optimizer``).
        lr_critic: Adam learning rate of the critic(s) (``critic_optimizer``).
        learn_step: Environment steps (over all sub-envs) between learning steps.
        gamma: Discount factor.
        tau: Soft target update rate (1.0: hard copy).
        policy_freq: Critic updates per actor update (the targets move with the actor).
        O_U_noise: Explore with Ornstein-Uhlenbeck noise; Gaussian noise when False.
        expl_noise: Scale of the exploration noise (OU sigma / Gaussian std), relative to half
            the action range.
        vect_noise_dim: Independent noise streams; use the number of sub-envs. With 1, every
            sub-env receives the same noise.
        mean_noise: Mean of the exploration noise (normalised units).
        theta: Mean-reversion rate of the OU process.
        dt: Time step of the OU process.
        share_encoders: Copy the actor's encoder weights into the critic encoders after every
            learning step (the critics then read the actor's features; their own encoder
            gradients are discarded).
        normalize_images: Scale uint8 image observations to [0, 1].
        device: Torch device of the networks.
        seed: Seeds network initialisation, exploration noise and (TD3) target smoothing.
    """

    spec_class = DDPGSpec
    supported_action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Box,)
    critic_names: ClassVar[tuple[str, ...]] = ("critic",)
    """Attribute names of the critics; each ``<name>_target`` is its target network."""

    # hyperparameters, set from DDPGSpec (declared here for the type checker)
    batch_size: int
    lr_actor: float
    lr_critic: float
    learn_step: int
    gamma: float
    tau: float
    policy_freq: int
    O_U_noise: bool
    expl_noise: float
    vect_noise_dim: int
    mean_noise: float
    theta: float
    dt: float
    share_encoders: bool
    normalize_images: bool

    actor: DeterministicActor
    actor_target: DeterministicActor
    actor_optimizer: torch.optim.Optimizer
    critic_optimizer: torch.optim.Optimizer
    exploration: ActionNoise

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        index: int = 0,
        hp_config: HyperparameterConfig | None = None,
        net_config: NetworkSpec | Mapping[str, Any] | None = None,
        batch_size: int = _DEFAULTS["batch_size"],
        lr_actor: float = _DEFAULTS["lr_actor"],
        lr_critic: float = _DEFAULTS["lr_critic"],
        learn_step: int = _DEFAULTS["learn_step"],
        gamma: float = _DEFAULTS["gamma"],
        tau: float = _DEFAULTS["tau"],
        policy_freq: int = _DEFAULTS["policy_freq"],
        O_U_noise: bool = _DEFAULTS["O_U_noise"],
        expl_noise: float = _DEFAULTS["expl_noise"],
        vect_noise_dim: int = _DEFAULTS["vect_noise_dim"],
        mean_noise: float = _DEFAULTS["mean_noise"],
        theta: float = _DEFAULTS["theta"],
        dt: float = _DEFAULTS["dt"],
        share_encoders: bool = _DEFAULTS["share_encoders"],
        normalize_images: bool = _DEFAULTS["normalize_images"],
        device: str | torch.device = "cpu",
        seed: int | None = None,
    ) -> None:
        self.adopt_hyperparameters(locals())
        super().__init__(observation_space, action_space, index=index, hp_config=hp_config, device=device)
        name = type(self).__name__
        _check_action_space(name, action_space)
        assert isinstance(action_space, spaces.Box)
        self.rng = np.random.default_rng(seed)

        # Action bounds: numpy for acting, torch for learning (normalised <-> environment units).
        self.action_shape = tuple(int(d) for d in action_space.shape)
        self.action_dim = int(np.prod(self.action_shape))
        self.action_low = np.asarray(action_space.low, dtype=np.float64)
        self.action_high = np.asarray(action_space.high, dtype=np.float64)
        self._centre = torch.as_tensor((self.action_high + self.action_low).reshape(-1) / 2, dtype=torch.float32,
                                       device=self.device)
        self._half_range = torch.as_tensor((self.action_high - self.action_low).reshape(-1) / 2,
                                           dtype=torch.float32, device=self.device)

        # Networks: built under a forked torch RNG so a seed fixes them without touching global state.
        with torch.random.fork_rng(devices=[]):
            if seed is not None:
                torch.manual_seed(seed)
            actor = DeterministicActor(observation_space, action_space, net_config)
            critics = [ContinuousQNetwork(observation_space, action_space, net_config) for _ in self.critic_names]
        if actor.recurrent:
            raise ValueError(f"{name} does not support recurrent (LSTM) networks")
        self.actor = actor.to(self.device)
        self.actor_target = self.actor.clone()
        for critic_name, critic in zip(self.critic_names, critics, strict=True):
            setattr(self, critic_name, critic.to(self.device))
            setattr(self, f"{critic_name}_target", critic.clone())
        self._freeze_targets()

        # A mutation sampled on the actor is applied, with the same resolved parameters, to every
        # critic (each its own group, so each draws its new weights from the agent's seeded RNG)
        # and replayed on each network's target.
        self.register_network_group("actor", "actor_target")
        for critic_name in self.critic_names:
            self.register_network_group(critic_name, f"{critic_name}_target")
        self.register_optimizer("actor_optimizer", ["actor"], "lr_actor")
        self.register_optimizer("critic_optimizer", list(self.critic_names), "lr_critic")

        self.exploration = make_action_noise(self.O_U_noise, self.action_shape, self.vect_noise_dim,
                                             self.expl_noise, self.mean_noise, self.theta, self.dt, rng=self.rng)
        if self.share_encoders:
            self._share_encoder_weights()

    # ------------------------------------------------------------------ networks
    @property
    def critics(self) -> list[ContinuousQNetwork]:
        """The online critics, in `critic_names` order."""
        return [getattr(self, name) for name in self.critic_names]

    @property
    def critic_targets(self) -> list[ContinuousQNetwork]:
        """The target critics, in `critic_names` order."""
        return [getattr(self, f"{name}_target") for name in self.critic_names]

    def target_pairs(self) -> list[tuple[EvolvableNetwork, EvolvableNetwork]]:
        """Every (online, target) pair: the actor's first, then each critic's."""
        return [(self.actor, self.actor_target), *zip(self.critics, self.critic_targets, strict=True)]

    def _freeze_targets(self) -> None:
        for _, target in self.target_pairs():
            target.requires_grad_(False)

    def apply_architecture_mutation(self, name: str, rng: np.random.Generator | None = None,
                                    **kwargs: Any) -> dict[str, Any]:
        """Apply mutation `name` to actor and critics (and replay it on their targets), then restart
        every target from its online network.

        The targets repeat the architecture change, but their new weights are drawn apart from the
        online network's; copying makes each pair identical again, and seeded runs reproducible.
        """
        applied = super().apply_architecture_mutation(name, rng, **kwargs)
        for online, target in self.target_pairs():
            if online.config == target.config:
                soft_update(online, target, 1.0)
        return applied

    def after_architecture_change(self) -> None:
        """Keep target networks out of autograd (mutations add fresh, trainable-looking layers)."""
        self._freeze_targets()
        if self.share_encoders:
            self._share_encoder_weights()

    def _share_encoder_weights(self) -> None:
        """Copy the actor's encoder weights into every critic encoder of the same architecture."""
        source = self.actor.encoder
        with torch.no_grad():
            for critic in self.critics:
                if critic.encoder.config == source.config:
                    critic.encoder.load_state_dict(source.state_dict())

    def clone(self, index: int | None = None, wrap: bool = True) -> DDPG:
        """A deep, independent copy; a clone with a new `index` explores with its own RNG stream
        (the base class reseeds ``rng``; the noise process follows it)."""
        twin = super().clone(index=index, wrap=wrap)
        twin.exploration.rng = twin.rng
        return twin

    # ------------------------------------------------------------------ action units
    def _normalise(self, action: torch.Tensor) -> torch.Tensor:
        """Environment-unit actions ``[..., action_dim]`` to ``[-1, 1]``."""
        return (action - self._centre) / self._half_range

    def _observation(self, obs: Any) -> Any:
        return preprocess_observation(self.observation_space, obs, self.device, self.normalize_images)

    # ------------------------------------------------------------------ acting
    def get_action(self, obs: Any, training: bool = True, *, epsilon: float | None = None,
                   action_mask: Any = None) -> np.ndarray:
        """Actions ``[num_envs, *action_shape]`` (the action space's dtype) for a batch of observations.

        With `training`, exploration noise (scaled by half the action range) is added to the
        actor's action and the result is clipped to the bounds; in addition each row is, with
        probability `epsilon`, replaced by a uniformly random action. That is how the
        epsilon-greedy off-policy loop drives this agent: its decaying epsilon schedule becomes
        a random warm-up, which fills the replay memory with diverse actions before the critic's
        action gradient is trusted. Without `training` the action is greedy (`epsilon` ignored).
        Box actions take no `action_mask`. A single unbatched observation gives a batch of one.
        The ``P = 1`` case of :meth:`act_population`.
        """
        if action_mask is not None:
            raise ValueError(f"{type(self).__name__} acts in a Box action space, which takes no action_mask")
        inputs = with_member_axis(self._observation(obs))
        return type(self).act_population(self.solo_group(), inputs, [epsilon], training=training)

    @classmethod
    def act_population(cls, group: MemberGroup, inputs: Any, epsilons: Sequence[float | None],
                       action_masks: Sequence[Any] | None = None, training: bool = True) -> np.ndarray:
        """Env actions ``[P * rows, *action_shape]`` (member-major) for network inputs ``[P, rows, ...]``:
        one stacked actor call, then (with `training`) each member's own exploration
        (:meth:`explore`); greedy without `training`."""
        if action_masks is not None:
            raise ValueError(f"{cls.__name__} acts in a Box action space, which takes no action_mask")
        first = group.members[0]
        with torch.no_grad():
            action = group.nets["actor"](inputs)
        actions = action.reshape(len(group), -1, *first.action_shape).cpu().numpy().astype(np.float64)
        if not training:
            return actions.reshape(-1, *first.action_shape).astype(first.action_space.dtype, copy=False)
        return np.concatenate([member.explore(actions[index], epsilons[index])
                               for index, member in enumerate(group.members)])

    def explore(self, actions: np.ndarray, epsilon: float | None = None) -> np.ndarray:
        """The training branch of :meth:`get_action` for the actor's actions ``[rows, *action_shape]``
        (float64): add exploration noise, clip, and replace each row by a uniform action with
        probability `epsilon`; draws from the agent's noise process and ``rng`` exactly as
        :meth:`get_action` does. The population-batched loop computes every agent's actions at
        once and calls this per agent."""
        rows = actions.shape[0]
        actions = actions + self._exploration_noise(rows) * (self.action_high - self.action_low) / 2
        actions = np.clip(actions, self.action_low, self.action_high)
        if epsilon:
            replace = np.asarray(self.rng.random(rows) < epsilon)
            uniform = self.rng.uniform(self.action_low, self.action_high, size=actions.shape)
            actions = np.where(replace.reshape(rows, *[1] * len(self.action_shape)), uniform, actions)
        return actions.astype(self.action_space.dtype, copy=False)

    def _exploration_noise(self, rows: int) -> np.ndarray:
        """The next noise sample for `rows` sub-envs (one shared stream broadcasts to all)."""
        streams = self.exploration.num_envs
        if streams not in (rows, 1):
            raise ValueError(f"{type(self).__name__} has {streams} exploration noise streams (vect_noise_dim) "
                             f"but got {rows} observations; set vect_noise_dim to the number of sub-envs")
        return self.exploration.sample()

    def reset_action_noise(self, mask: Any = None) -> None:
        """Restart the exploration noise of sub-envs whose episode ended (bool ``[num_envs]``; all when None).

        A single shared stream restarts when any sub-env's episode ended.
        """
        if mask is not None and self.exploration.num_envs == 1:
            mask = np.asarray(mask, dtype=bool).reshape(-1).any(keepdims=True)
        self.exploration.reset(mask)

    def set_hyperparameter(self, name: str, value: Any) -> None:
        """Set a hyperparameter; learning rates update their optimizer, noise settings the noise process."""
        super().set_hyperparameter(name, value)
        if name in NOISE_HYPERPARAMETERS:
            self._configure_noise()

    def _configure_noise(self) -> None:
        """Push ``expl_noise``, ``mean_noise``, ``theta`` and ``dt`` into the noise process (state kept)."""
        noise = self.exploration
        if isinstance(noise, OrnsteinUhlenbeckNoise):
            noise.mean, noise.sigma = float(self.mean_noise), float(self.expl_noise)
            noise.theta, noise.dt = float(self.theta), float(self.dt)
        elif isinstance(noise, GaussianNoise):
            noise.mean, noise.std = float(self.mean_noise), float(self.expl_noise)

    # ------------------------------------------------------------------ learning
    def learn(self, experiences: Sequence[Any]) -> dict[str, float]:
        """One critic update (and, every ``policy_freq``-th call, one actor and target update).

        `experiences` is any sequence whose first five items are ``(obs, action, reward,
        next_obs, terminated)`` (a ``ReplayBatch`` is); actions are in environment units and
        ``terminated`` is 1 only for true terminations. Returns ``{"critic": loss}``, plus
        ``"actor"`` when the actor was updated. The ``P = 1`` case of :meth:`learn_population`.
        """
        batch = PopulationBatch.of_one(experiences, self.device)
        return cast(dict[str, float], type(self).learn_population(self.solo_group(), batch, [True])[0])

    def population_stacks(self) -> dict[str, tuple[str, ...]]:
        """The actor and its target on their own; all critics in one stack (``K * P`` rows), and
        their targets in another, so twin critics run as one call."""
        return {"actor": ("actor",), "actor_target": ("actor_target",), "critics": self.critic_names,
                "critic_targets": tuple(f"{name}_target" for name in self.critic_names)}

    def population_key(self) -> str:
        """Members of one group share image scaling and encoder sharing."""
        return f"{super().population_key()}|{self.normalize_images}|{self.share_encoders}"

    @classmethod
    def learn_population(cls, group: MemberGroup, batch: PopulationBatch, active: Sequence[bool]) -> list[Any]:
        """One learning step for every active member of `group` on its rows of `batch` ``[P, rows, ...]``:
        a critic update (every critic regresses on the clipped TD target), and for members whose
        learn counter reaches a multiple of their ``policy_freq`` an actor update and a target
        update. Returns each member's ``{"critic": ..., ["actor": ...]}`` (None if idle)."""
        first = group.members[0]
        members, rows = batch.weights.shape
        obs, next_obs = first.population_inputs(batch.obs), first.population_inputs(batch.next_obs)
        actions = first._normalise(batch.action.to(torch.float32).reshape(members, rows, first.action_dim))
        due = [on and (member.learn_counter + 1) % member.policy_freq == 0
               for member, on in zip(group.members, active, strict=True)]
        with torch.no_grad():
            next_actions = cls._target_actions(group, next_obs, batch.weights)
            bootstrap = cls._critic_values(group, "critic_targets", next_obs, next_actions).amin(dim=0)
            td_target = batch.reward + group.column("gamma") * (1.0 - batch.done) * bootstrap
        errors = (cls._critic_values(group, "critics", obs, actions) - td_target).square() * batch.weights
        critic_losses = errors.sum(dim=2)  # [K, P]
        group.step("critic_optimizer", critic_losses.reshape(-1), active)
        actor_losses = None
        if any(due):
            with group.frozen_stack("critics"):  # the actor's gradient flows through the critics, not into them
                first_critic = group.copy_of("critics", 0)  # the actor's objective: Q_1 alone
                q_values = first_critic(obs, cls._policy_actions(group, "actor", obs)).reshape(members, rows)
                actor_losses = -(q_values * batch.weights).sum(dim=1)
                group.step("actor_optimizer", actor_losses, due)
            tau = group.column("tau")
            group.soft_update("actor_target", "actor", tau, due)
            group.soft_update("critic_targets", "critics", tau, due)
        results: list[dict[str, float]] = []
        critic_sums = critic_losses.detach().sum(dim=0).tolist()
        actor_values = None if actor_losses is None else actor_losses.detach().tolist()
        for index, (member, on) in enumerate(zip(group.members, active, strict=True)):
            member.learn_counter += int(on)
            results.append({"critic": critic_sums[index]})
            if due[index] and actor_values is not None:
                results[-1]["actor"] = actor_values[index]
            if on and member.share_encoders:
                member._share_encoder_weights()
        return group.finish(active, results)

    @staticmethod
    def _policy_actions(group: MemberGroup, network: str, obs: Any) -> torch.Tensor:
        """Normalised actions ``[P, rows, action_dim]`` of the stacked actor `network`."""
        first = group.members[0]
        action = group.nets[network](obs)
        return first._normalise(action.reshape(*action.shape[:2], first.action_dim))

    @classmethod
    def _target_actions(cls, group: MemberGroup, next_obs: Any, weights: torch.Tensor) -> torch.Tensor:
        """Normalised actions the target policy takes in s' ``[P, rows, action_dim]`` (TD3 adds smoothing noise)."""
        return cls._policy_actions(group, "actor_target", next_obs)

    @staticmethod
    def _critic_values(group: MemberGroup, stack: str, obs: Any, actions: torch.Tensor) -> torch.Tensor:
        """``Q_k(s, a)`` ``[K, P, rows]`` of every member's ``K`` critics in `stack`."""
        return group.each_copy(stack, obs, actions)[..., 0]

    # ------------------------------------------------------------------ evaluation
    def test(self, env: gym.Env | VectorEnv, swap_channels: bool = False, max_steps: int | None = None,
             loop: int = 1) -> float:
        """Greedy (noise-free) fitness: the mean return of `loop` episodes per sub-env; appended to ``fitness``.

        See :func:`agile_core.training.evaluation.evaluate_policy`.
        """

        def act(obs: Any, info: dict[str, Any]) -> np.ndarray:
            return self.get_action(obs, training=False)

        fitness = evaluate_policy(env, act, loop=loop, max_steps=max_steps, swap_channels=swap_channels)
        self.fitness.append(fitness)
        return fitness

    # ------------------------------------------------------------------ checkpoints
    def extra_tensors(self) -> dict[str, Any]:
        """The Ornstein-Uhlenbeck state of every noise stream (none for Gaussian noise)."""
        if isinstance(self.exploration, OrnsteinUhlenbeckNoise):
            return {"ou_state": self.exploration.state.copy()}
        return {}

    def load_extra_state(self, state: dict[str, Any], tensors: dict[str, Any]) -> None:
        """Restore the noise state and point the noise process at the restored generator."""
        self._configure_noise()
        self.exploration.rng = self.rng
        if "ou_state" in tensors and isinstance(self.exploration, OrnsteinUhlenbeckNoise):
            saved = np.asarray(tensors["ou_state"], dtype=np.float64)
            if saved.shape == self.exploration.state.shape:
                self.exploration.state = saved.copy()

