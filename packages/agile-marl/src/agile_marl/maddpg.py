"""Multi-Agent DDPG (Lowe et al., 2017): decentralised actors, centralised critics.

Every agent ``i`` has a deterministic actor ``mu_i(o_i)`` reading only its own observation, and a
critic ``Q_i(x, a_1, ..., a_N)`` reading every agent's observation ``x`` and action (each with a
target copy)::

    critic target  y_i = r_i + gamma * (1 - terminated_i) * Q_i_target(x', mu_1_target(o'_1), ..., mu_N_target(o'_N))
    critic loss        = mean over the agent's valid rows of (Q_i(x, a) - y_i)^2
    actor loss         = - mean Q_i(x, a_1, ..., mu_i(o_i), ..., a_N)   (other agents: replayed actions)
    target update      theta_target <- tau * theta + (1 - tau) * theta_target    (every learn step)

Rows where agent ``i`` was not alive weigh 0 in its losses (each loss is the sum over the agent's
valid rows divided by the batch size).

Critic inputs. When every agent observes a flat (1-D) Box, the critic reads their concatenation
(one Box); otherwise a Dict space of the agents' observations, which the core's multi-input
encoder handles (images, Dicts). Actions enter the critic normalised: Box actions as
``(a - centre) / half_range`` in ``[-1, 1]``, Discrete actions one-hot.

Actions. Box agents: the actor's tanh output scaled to the bounds; while training, Gaussian or
Ornstein-Uhlenbeck noise (relative to half the action range, one stream per row acting is called
with, drawn from the member's ``rng``) is added and the action clipped. Discrete agents: the
actor gives logits; acting greedily takes the argmax, acting in training *samples from the
softmax* (one uniform draw per row from the member's ``rng``); action masks (True = allowed)
restrict both. The actor update uses a straight-through Gumbel-softmax (hard one-hot forward,
softmax gradient, Gumbel noise from the member's ``rng``, temperature ``gumbel_temperature``);
target actions are the target actor's greedy one-hots. The replay buffer stores env actions
(ints for Discrete); the learning step one-hots them.

Evolution. The first agent's actor is the policy: an architecture mutation sampled on it is
applied to every actor and critic that has it (same resolved parameters; all built from one
network section, they share a layout) and replayed on the targets, which then restart from their
online networks. Parameter mutations perturb every actor.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, cast

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces

from agile_core.algorithms.base import NoiseBands, perturb_weights
from agile_core.algorithms.exploration import (
    ActionNoise,
    GaussianNoise,
    OrnsteinUhlenbeckNoise,
    make_action_noise,
)
from agile_core.algorithms.group import MemberGroup
from agile_core.algorithms.spaces import UnsupportedSpaceError
from agile_core.hpo.hyperparameters import HyperparameterConfig
from agile_core.networks import ContinuousQNetwork, DeterministicActor, EvolvableNetwork, QNetwork
from agile_core.specs.network import NetworkSpec
from agile_marl.agent_ids import group_id
from agile_marl.base import MultiAgentAgent
from agile_marl.buffers.replay import MultiAgentBatch
from agile_marl.population import MultiAgentActions
from agile_marl.specs.maddpg import MADDPGSpec

__all__ = ["MADDPG", "agent_network_configs"]

NOISE_HYPERPARAMETERS = frozenset({"O_U_noise", "expl_noise", "mean_noise", "theta", "dt"})
"""Hyperparameters the exploration-noise processes read (changing one reconfigures them)."""

_DEFAULTS = MADDPGSpec.defaults()
"""The registered spec's defaults: the one home of this algorithm's keyword defaults."""


def agent_network_configs(net_config: Any, agent_ids: Sequence[str]) -> dict[str, NetworkSpec | None]:
    """Each agent's network section: its own id's section, else its group's, else the shared one
    (`net_config`: None, a ``NetworkSpec``, a ``MultiAgentNetworkSpec`` or their dict forms)."""
    if net_config is None:
        return dict.fromkeys(agent_ids)
    from agile_marl.specs.network import MultiAgentNetworkSpec

    if isinstance(net_config, Mapping):
        net_config = MultiAgentNetworkSpec.model_validate(dict(net_config))
    sections = dict(getattr(net_config, "groups", None) or {})
    # unset fields stay unset (e.g. an encoder's arch, inferred per observation space)
    shared = NetworkSpec.model_validate(net_config.model_dump(exclude={"groups"}, exclude_unset=True))
    return {agent: sections.get(agent) or sections.get(group_id(agent)) or shared for agent in agent_ids}


def joint_observation_space(observation_spaces: Mapping[str, spaces.Space]) -> spaces.Space:
    """The critics' observation space: the concatenation of flat Box observations, else a Dict of
    every agent's observation (a Dict or Tuple observation contributes its parts, ``agent.key``)."""
    parts = list(observation_spaces.values())
    if all(isinstance(space, spaces.Box) and len(space.shape) == 1 for space in parts):
        boxes = cast(list[spaces.Box], parts)
        return spaces.Box(np.concatenate([box.low.astype(np.float32) for box in boxes]),
                          np.concatenate([box.high.astype(np.float32) for box in boxes]), dtype=np.float32)
    return spaces.Dict({name: space for agent, space in observation_spaces.items()
                        for name, space in _parts(agent, space).items()})


def _parts(agent: str, value: Any) -> dict[str, Any]:
    """An agent's observation (or space) as named parts: Dict/Tuple ones split into ``agent.key``."""
    if isinstance(value, spaces.Dict | Mapping):
        items = value.spaces.items() if isinstance(value, spaces.Dict) else value.items()
        return {f"{agent}.{key}": part for key, part in items}
    if isinstance(value, spaces.Tuple | tuple):
        return {f"{agent}.{index}": part for index, part in enumerate(value)}
    return {agent: value}


class MADDPG(MultiAgentAgent):
    """MADDPG agent: per agent an actor, a centralised critic, their targets and two Adam optimizers.

    Attributes per agent ``a`` (names from :meth:`net_name`): ``actor_a``, ``actor_target_a``,
    ``critic_a``, ``critic_target_a``, ``actor_optimizer_a``, ``critic_optimizer_a``.

    Args:
        observation_spaces: Each agent's observation space (PettingZoo ``possible_agents`` order).
        action_spaces: Each agent's action space: Box with finite bounds, or Discrete.
        index: Agent index in the population.
        hp_config: Hyperparameters RL-HP mutation may change, with their ranges.
        net_config: Network section (``NetworkSpec``, ``MultiAgentNetworkSpec`` or dict): an
            agent's actor and critic use its own section (see :func:`agent_network_configs`).
        batch_size, lr_actor, lr_critic, learn_step, gamma, tau, O_U_noise, expl_noise,
        vect_noise_dim, mean_noise, theta, dt, normalize_images: see
            :class:`~agile_marl.specs.maddpg.MADDPGSpec`.
        device: Torch device of the networks.
        seed: Seeds network initialisation, exploration noise and sampling (``rng``).
    """

    spec_class = MADDPGSpec
    supported_action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Box, spaces.Discrete)
    critic_names: ClassVar[tuple[str, ...]] = ("critic",)
    """Critic roles per agent; each ``<role>_target`` is its target network."""
    gumbel_temperature: ClassVar[float] = 1.0
    """Temperature of the Gumbel-softmax of Discrete agents' actor updates."""
    policy_freq: int = 1
    """Critic updates per actor and target update (MATD3 makes it a hyperparameter)."""

    # hyperparameters, set from MADDPGSpec (declared here for the type checker)
    batch_size: int
    lr_actor: float
    lr_critic: float
    learn_step: int
    gamma: float
    tau: float
    O_U_noise: bool
    expl_noise: float
    vect_noise_dim: int
    mean_noise: float
    theta: float
    dt: float

    exploration: dict[str, ActionNoise]

    def __init__(
        self,
        observation_spaces: Mapping[str, spaces.Space],
        action_spaces: Mapping[str, spaces.Space],
        index: int = 0,
        hp_config: HyperparameterConfig | None = None,
        net_config: Any = None,
        batch_size: int = _DEFAULTS["batch_size"],
        lr_actor: float = _DEFAULTS["lr_actor"],
        lr_critic: float = _DEFAULTS["lr_critic"],
        learn_step: int = _DEFAULTS["learn_step"],
        gamma: float = _DEFAULTS["gamma"],
        tau: float = _DEFAULTS["tau"],
        O_U_noise: bool = _DEFAULTS["O_U_noise"],
        expl_noise: float = _DEFAULTS["expl_noise"],
        vect_noise_dim: int = _DEFAULTS["vect_noise_dim"],
        mean_noise: float = _DEFAULTS["mean_noise"],
        theta: float = _DEFAULTS["theta"],
        dt: float = _DEFAULTS["dt"],
        normalize_images: bool = _DEFAULTS["normalize_images"],
        device: str | torch.device = "cpu",
        seed: int | None = None,
    ) -> None:
        self.adopt_hyperparameters(locals())
        super().__init__(observation_spaces, action_spaces, index=index, hp_config=hp_config, device=device)
        self.rng = np.random.default_rng(seed)
        self._describe_actions()
        self.joint_observation_space = joint_observation_space(self.observation_spaces)
        self.joint_action_dim = sum(self.action_widths.values())
        joint_actions = spaces.Box(-1.0, 1.0, (self.joint_action_dim,), np.float32)
        configs = agent_network_configs(net_config, self.agent_ids)

        with torch.random.fork_rng(devices=[]):
            if seed is not None:
                torch.manual_seed(seed)
            for agent in self.agent_ids:
                actor = self._build_actor(agent, configs[agent])
                if actor.recurrent:
                    raise ValueError(f"{type(self).__name__} does not support recurrent (LSTM) networks")
                setattr(self, self.net_name("actor", agent), actor.to(self.device))
                setattr(self, self.net_name("actor_target", agent), actor.clone())
            for agent in self.agent_ids:
                for role in self.critic_names:
                    critic = ContinuousQNetwork(self.joint_observation_space, joint_actions, configs[agent]).to(self.device)
                    setattr(self, self.net_name(role, agent), critic)
                    setattr(self, self.net_name(f"{role}_target", agent), critic.clone())
        self._freeze_targets()
        for agent in self.agent_ids:
            self.register_network_group(self.net_name("actor", agent), self.net_name("actor_target", agent))
        for agent in self.agent_ids:
            for role in self.critic_names:
                self.register_network_group(self.net_name(role, agent), self.net_name(f"{role}_target", agent))
        for agent in self.agent_ids:
            self.register_optimizer(self.net_name("actor_optimizer", agent), [self.net_name("actor", agent)], "lr_actor")
            self.register_optimizer(self.net_name("critic_optimizer", agent),
                                    [self.net_name(role, agent) for role in self.critic_names], "lr_critic")
        self.exploration = {agent: self._make_noise(agent, self.vect_noise_dim) for agent in self.box_agents}

    # ------------------------------------------------------------------ spaces
    def _describe_actions(self) -> None:
        """Per agent: the critic's action width; Box bounds (numpy and torch) or Discrete size/start."""
        self.action_widths: dict[str, int] = {}
        self.box_agents: list[str] = []
        self._bounds: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._scale: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        for agent in self.agent_ids:
            space = self.action_spaces[agent]
            if isinstance(space, spaces.Discrete):
                self.action_widths[agent] = int(space.n)
                continue
            assert isinstance(space, spaces.Box)
            low, high = np.asarray(space.low, np.float64), np.asarray(space.high, np.float64)
            if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high)) and np.all(high > low)):
                raise UnsupportedSpaceError(f"{type(self).__name__} needs finite action bounds with high > low "
                                            f"(its actors squash into them), got {space} for {agent}")
            self.box_agents.append(agent)
            self.action_widths[agent] = int(np.prod(space.shape))
            self._bounds[agent] = (low, high)
            self._scale[agent] = tuple(torch.as_tensor(v.reshape(-1), dtype=torch.float32, device=self.device)
                                       for v in ((high + low) / 2, (high - low) / 2))  # type: ignore[assignment]

    def _build_actor(self, agent: str, config: NetworkSpec | None) -> EvolvableNetwork:
        space = self.action_spaces[agent]
        if isinstance(space, spaces.Discrete):  # a logits network: encoder + head with n outputs
            return QNetwork(self.observation_spaces[agent], spaces.Discrete(int(space.n)), config)
        return DeterministicActor(self.observation_spaces[agent], space, config)

    def actor(self, agent: str) -> EvolvableNetwork:
        """Agent `agent`'s actor."""
        return cast(EvolvableNetwork, getattr(self, self.net_name("actor", agent)))

    def target_pairs(self) -> list[tuple[EvolvableNetwork, EvolvableNetwork]]:
        """Every (online, target) pair: actors first, then critics, in agent order."""
        roles = ("actor", *self.critic_names)
        return [(getattr(self, self.net_name(role, agent)), getattr(self, self.net_name(f"{role}_target", agent)))
                for role in roles for agent in self.agent_ids]

    def _freeze_targets(self) -> None:
        for _, target in self.target_pairs():
            target.requires_grad_(False)

    # ------------------------------------------------------------------ evolution
    def apply_architecture_mutation(self, name: str, rng: np.random.Generator | None = None,
                                    **kwargs: Any) -> dict[str, Any]:
        """Apply mutation `name` agent by agent: its parameters are resolved on the agent's actor
        (unless given) and applied to the agent's critics too, replayed on the targets (agents with
        their own network sections thus mutate within their own bounds); then restart each
        target from its online network."""
        groups = self._groups
        applied: dict[str, Any] = {"mutation": name, "networks": [], "kwargs": {}}
        try:
            for agent in self.agent_ids:
                own = {self.net_name(role, agent) for role in ("actor", *self.critic_names)}
                self._groups = [group for group in groups if group.policy in own]
                part = super().apply_architecture_mutation(name, rng, **kwargs)
                applied["networks"].extend(part["networks"])
                applied["kwargs"][agent] = part.get("kwargs")
        finally:
            self._groups = groups
        with torch.no_grad():
            for online, target in self.target_pairs():
                if online.config == target.config:
                    target.load_state_dict(online.state_dict())
        return applied

    def after_architecture_change(self) -> None:
        """Keep target networks out of autograd (mutations add fresh layers)."""
        self._freeze_targets()

    def mutate_parameters(self, rng: np.random.Generator, sd: float, *,
                          bands: NoiseBands | None = None) -> dict[str, Any] | None:
        """Perturb a few weights of every agent's actor (see :func:`perturb_weights`)."""
        changed = sum(perturb_weights(self.actor(agent), rng, sd, bands=bands) for agent in self.agent_ids)
        return {"mutation_sd": sd, "weights_changed": changed}

    def clone(self, index: int | None = None, wrap: bool = True) -> MADDPG:
        """A deep, independent copy; the noise processes follow the clone's own ``rng``."""
        twin = super().clone(index=index, wrap=wrap)
        for noise in twin.exploration.values():
            noise.rng = twin.rng
        return twin

    def set_hyperparameter(self, name: str, value: Any) -> None:
        """Set a hyperparameter; learning rates update their optimizers, noise settings the noise."""
        super().set_hyperparameter(name, value)
        if name in NOISE_HYPERPARAMETERS:
            self._configure_noise()

    # ------------------------------------------------------------------ exploration noise
    def _make_noise(self, agent: str, streams: int) -> ActionNoise:
        return make_action_noise(self.O_U_noise, (self.action_widths[agent],), streams, self.expl_noise,
                                 self.mean_noise, self.theta, self.dt, rng=self.rng)

    def _configure_noise(self) -> None:
        """Push the noise hyperparameters into the processes (state kept unless the kind changed)."""
        for agent, noise in list(self.exploration.items()):
            if isinstance(noise, OrnsteinUhlenbeckNoise) != bool(self.O_U_noise):
                self.exploration[agent] = self._make_noise(agent, noise.num_envs)
            elif isinstance(noise, OrnsteinUhlenbeckNoise):
                noise.mean, noise.sigma = float(self.mean_noise), float(self.expl_noise)
                noise.theta, noise.dt = float(self.theta), float(self.dt)
            elif isinstance(noise, GaussianNoise):
                noise.mean, noise.std = float(self.mean_noise), float(self.expl_noise)

    def _noise(self, agent: str, rows: int) -> np.ndarray:
        """The next noise ``[rows, action_dim]`` of `agent`; the streams follow `rows` (a process
        called with another number of rows restarts with that many streams)."""
        if self.exploration[agent].num_envs != rows:
            self.exploration[agent] = self._make_noise(agent, rows)
        return self.exploration[agent].sample()

    def reset_action_noise(self, mask: Any = None) -> None:
        """Restart the noise streams of sub-envs whose episode ended (bool ``[num_envs]``; all when None)."""
        for agent, noise in list(self.exploration.items()):
            if mask is None:
                noise.reset()
                continue
            selected = np.asarray(mask, dtype=bool).reshape(-1)
            if selected.shape[0] == noise.num_envs:
                noise.reset(selected)
            else:
                self.exploration[agent] = self._make_noise(agent, selected.shape[0])

    def explore(self, agent: str, actions: np.ndarray) -> np.ndarray:
        """Box agent `agent`'s training actions: `actions` ``[rows, *shape]`` (float64) plus noise
        scaled by half the action range, clipped to the bounds."""
        low, high = self._bounds[agent]
        rows = actions.shape[0]
        noise = self._noise(agent, rows).reshape(actions.shape)
        return np.clip(actions + noise * (high - low) / 2, low, high)

    def sample_discrete(self, logits: np.ndarray) -> np.ndarray:
        """Indices ``[rows]`` sampled from the softmax of `logits` ``[rows, n]`` (float64, -inf
        where masked) with one uniform draw per row from ``rng``."""
        probs = np.exp(logits - logits.max(axis=1, keepdims=True))
        cumulative = np.cumsum(probs / probs.sum(axis=1, keepdims=True), axis=1)
        uniform = self.rng.random((logits.shape[0], 1))
        return np.minimum((cumulative < uniform).sum(axis=1), logits.shape[1] - 1)

    # ------------------------------------------------------------------ acting
    @classmethod
    def act_population(cls, group: MemberGroup, inputs: Any, *args: Any, training: bool = True,
                       action_masks: Mapping[str, Any] | None = None, **kwargs: Any) -> MultiAgentActions:
        """Env actions ``{agent: [P, rows, ...]}`` for network inputs ``{agent: [P, rows, ...]}``: one
        stacked actor call per agent, then (with `training`) each member's own exploration, agent by
        agent in ``agent_ids`` order; greedy without `training`."""
        first = cast(MADDPG, group.members[0])
        members = len(group)
        with torch.no_grad():
            outputs = {agent: group.nets[cls.net_name("actor", agent)](inputs[agent]) for agent in first.agent_ids}
        actions: dict[str, np.ndarray] = {}
        for agent in first.agent_ids:
            space = first.action_spaces[agent]
            out = outputs[agent]
            if isinstance(space, spaces.Box):
                chosen = out.reshape(members, -1, *space.shape).cpu().numpy().astype(np.float64)
                if training:
                    chosen = np.stack([member.explore(agent, chosen[p]) for p, member in enumerate(group.members)])
                actions[agent] = chosen.astype(space.dtype, copy=False)
                continue
            assert isinstance(space, spaces.Discrete)
            logits = out.reshape(members, -1, int(space.n)).cpu().numpy().astype(np.float64)
            if action_masks is not None and action_masks.get(agent) is not None:
                allowed = np.asarray(action_masks[agent], dtype=bool).reshape(logits.shape)
                logits = np.where(allowed, logits, -np.inf)
            if training:
                index = np.stack([member.sample_discrete(logits[p]) for p, member in enumerate(group.members)])
            else:
                index = logits.argmax(axis=-1)
            actions[agent] = (index + int(space.start)).astype(np.int64)
        return MultiAgentActions(actions)

    # ------------------------------------------------------------------ learning
    def learn(self, experiences: MultiAgentBatch) -> dict[str, float]:
        """One learning step on a batch from :meth:`MultiAgentReplayBuffer.sample` (``[B, ...]``);
        the ``P = 1`` case of :meth:`learn_population`. Returns ``{"critic": ..., ["actor": ...]}``
        (summed over the agents)."""
        batch = experiences.with_member_axis()
        return cast(dict[str, float], type(self).learn_population(self.solo_group(), batch, [True])[0])

    def population_stacks(self) -> dict[str, tuple[str, ...]]:
        """Per agent: the actor and its target on their own, its critics in one stack (``K * P``
        rows) and their targets in another."""
        stacks: dict[str, tuple[str, ...]] = {}
        for agent in self.agent_ids:
            stacks[self.net_name("actor", agent)] = (self.net_name("actor", agent),)
            stacks[self.net_name("actor_target", agent)] = (self.net_name("actor_target", agent),)
            stacks[self.net_name("critics", agent)] = tuple(self.net_name(r, agent) for r in self.critic_names)
            stacks[self.net_name("critic_targets", agent)] = tuple(self.net_name(f"{r}_target", agent)
                                                                   for r in self.critic_names)
        return stacks

    def population_key(self) -> str:
        """Members of one group also share image scaling."""
        return f"{super().population_key()}|{self.normalize_images}"

    @classmethod
    def learn_population(cls, group: MemberGroup, batch: MultiAgentBatch, active: Sequence[bool]) -> list[Any]:
        """One learning step for every active member on its rows of `batch` ``[P, B, ...]``: every
        agent's critic(s) regress on the (clipped double-Q) TD target; members whose learn counter
        reaches a multiple of their ``policy_freq`` also update every actor and move every target."""
        first = cast(MADDPG, group.members[0])
        agents = first.agent_ids
        obs, next_obs = first.population_inputs(batch.obs), first.population_inputs(batch.next_obs)
        joint_obs, joint_next = first.joint_inputs(obs), first.joint_inputs(next_obs)
        taken = {agent: first.critic_action(agent, batch.action[agent]) for agent in agents}
        joint_taken = torch.cat([taken[agent] for agent in agents], dim=-1)
        due = [on and (member.learn_counter + 1) % member.policy_freq == 0
               for member, on in zip(group.members, active, strict=True)]
        gamma = group.column("gamma")
        with torch.no_grad():
            next_actions = cls._target_actions(group, next_obs, batch.weights)
            joint_next_actions = torch.cat([next_actions[agent] for agent in agents], dim=-1)
        critic_total = batch.weights.new_zeros(len(group))
        for agent in agents:
            weights = batch.weights * batch.mask[agent].to(batch.weights.dtype)
            with torch.no_grad():
                bootstrap = cls._critic_values(group, agent, "critic_targets", joint_next, joint_next_actions).amin(0)
                target = batch.reward[agent] + gamma * (1.0 - batch.done[agent].float()) * bootstrap
            errors = (cls._critic_values(group, agent, "critics", joint_obs, joint_taken) - target).square()
            losses = (errors * weights).sum(dim=2)  # [K, P]
            group.step(cls.net_name("critic_optimizer", agent), losses.reshape(-1), active)
            critic_total += losses.detach().sum(dim=0)
        actor_total = None
        if any(due):
            actor_total = batch.weights.new_zeros(len(group))
            for agent in agents:
                actor_total += cls._actor_step(group, agent, obs[agent], joint_obs, taken, batch, due)
            tau = group.column("tau")
            for agent in agents:
                group.soft_update(cls.net_name("actor_target", agent), cls.net_name("actor", agent), tau, due)
                group.soft_update(cls.net_name("critic_targets", agent), cls.net_name("critics", agent), tau, due)
        critic_values = critic_total.tolist()
        actor_values = None if actor_total is None else actor_total.tolist()
        results: list[dict[str, float]] = []
        for index, (member, on) in enumerate(zip(group.members, active, strict=True)):
            member.learn_counter += int(on)
            results.append({"critic": critic_values[index]})
            if due[index] and actor_values is not None:
                results[-1]["actor"] = actor_values[index]
        return group.finish(active, results)

    @classmethod
    def _actor_step(cls, group: MemberGroup, agent: str, obs: Any, joint_obs: Any, taken: dict[str, torch.Tensor],
                    batch: MultiAgentBatch, due: Sequence[bool]) -> torch.Tensor:
        """Agent `agent`'s actor update for the `due` members: ascend its first critic along its own
        action (the other agents' actions as replayed). Returns the losses ``[P]``."""
        first = cast(MADDPG, group.members[0])
        with group.frozen_stack(cls.net_name("critics", agent)):  # the gradient flows through the critic, not into it
            own = cls._policy_actions(group, agent, obs, batch.weights, due)
            joint = torch.cat([own if other == agent else taken[other] for other in first.agent_ids], dim=-1)
            q_values = cls._critic_values(group, agent, "critics", joint_obs, joint)[0]
            weights = batch.weights * batch.mask[agent].to(batch.weights.dtype)
            losses = -(q_values * weights).sum(dim=1)
            group.step(cls.net_name("actor_optimizer", agent), losses, due)
        return losses.detach()

    # ------------------------------------------------------------------ learning helpers
    def joint_inputs(self, inputs: Mapping[str, Any]) -> Any:
        """The critics' observation inputs from per-agent network inputs ``[P, B, ...]``."""
        if isinstance(self.joint_observation_space, spaces.Box):
            return torch.cat([inputs[agent] for agent in self.agent_ids], dim=-1)
        return {name: part for agent in self.agent_ids for name, part in _parts(agent, inputs[agent]).items()}

    def critic_action(self, agent: str, action: torch.Tensor) -> torch.Tensor:
        """Stored env actions ``[P, B, ...]`` as the critic reads them ``[P, B, width]``:
        normalised Box actions, or Discrete one-hots."""
        space = self.action_spaces[agent]
        lead = action.shape[:2]
        if isinstance(space, spaces.Discrete):
            index = action.reshape(*lead).long() - int(space.start)
            return F.one_hot(index, int(space.n)).to(torch.float32)
        centre, half = self._scale[agent]
        return (action.reshape(*lead, -1).to(torch.float32) - centre) / half

    @classmethod
    def _policy_actions(cls, group: MemberGroup, agent: str, obs: Any, weights: torch.Tensor,
                        due: Sequence[bool]) -> torch.Tensor:
        """Agent `agent`'s differentiable actions ``[P, B, width]`` as the critic reads them: Box
        actions normalised; Discrete ones a straight-through Gumbel-softmax one-hot (noise from each
        `due` member's ``rng`` for its own rows)."""
        first = cast(MADDPG, group.members[0])
        out = group.nets[cls.net_name("actor", agent)](obs)
        space = first.action_spaces[agent]
        if isinstance(space, spaces.Box):
            centre, half = first._scale[agent]
            return (out.reshape(*out.shape[:2], -1) - centre) / half
        noise = np.zeros(tuple(out.shape), dtype=np.float64)
        for index, (member, size) in enumerate(zip(group.members, _sizes(weights), strict=True)):
            if due[index] and size:
                noise[index, :size] = member.rng.gumbel(size=(size, out.shape[-1]))
        soft = torch.softmax((out + torch.as_tensor(noise, dtype=out.dtype, device=out.device))
                             / cls.gumbel_temperature, dim=-1)
        hard = F.one_hot(soft.argmax(dim=-1), soft.shape[-1]).to(soft.dtype)
        return hard - soft.detach() + soft

    @classmethod
    def _target_actions(cls, group: MemberGroup, next_obs: Mapping[str, Any],
                        weights: torch.Tensor) -> dict[str, torch.Tensor]:
        """Every agent's target-policy action in s' as the critic reads it ``[P, B, width]``
        (Discrete: the greedy one-hot); MATD3 adds smoothing noise."""
        first = cast(MADDPG, group.members[0])
        actions = {}
        for agent in first.agent_ids:
            out = group.nets[cls.net_name("actor_target", agent)](next_obs[agent])
            space = first.action_spaces[agent]
            if isinstance(space, spaces.Discrete):
                actions[agent] = F.one_hot(out.argmax(dim=-1), int(space.n)).to(torch.float32)
            else:
                centre, half = first._scale[agent]
                actions[agent] = (out.reshape(*out.shape[:2], -1) - centre) / half
        return actions

    @classmethod
    def _critic_values(cls, group: MemberGroup, agent: str, role: str, obs: Any, actions: torch.Tensor) -> torch.Tensor:
        """``Q_k(x, a)`` ``[K, P, B]`` of agent `agent`'s ``K`` critics (`role`: critics or critic_targets)."""
        return group.each_copy(cls.net_name(role, agent), obs, actions)[..., 0]

    # ------------------------------------------------------------------ checkpoints
    def extra_tensors(self) -> dict[str, Any]:
        """The Ornstein-Uhlenbeck state of every Box agent's noise streams."""
        return {"ou_state": {agent: noise.state.copy() for agent, noise in self.exploration.items()
                             if isinstance(noise, OrnsteinUhlenbeckNoise)}}

    def load_extra_state(self, state: dict[str, Any], tensors: dict[str, Any]) -> None:
        """Restore the noise processes (kind, settings, streams, state) on the restored ``rng``."""
        self._configure_noise()
        saved = dict(tensors.get("ou_state") or {})
        for agent in self.box_agents:
            noise = self.exploration[agent]
            noise.rng = self.rng
            if agent in saved and isinstance(noise, OrnsteinUhlenbeckNoise):
                values = np.asarray(saved[agent], dtype=np.float64)
                if values.shape != noise.state.shape:
                    noise = self.exploration[agent] = self._make_noise(agent, values.shape[0])
                cast(OrnsteinUhlenbeckNoise, noise).state = values.copy()


def _sizes(weights: torch.Tensor) -> list[int]:
    """Each member's own rows (those with a positive weight)."""
    return [int(size) for size in (weights > 0).sum(dim=1).tolist()]

