"""Independent PPO (IPPO): every agent learns PPO on its own observations and rewards.

Agents of one *group* (ids sharing a prefix: ``agent_0, agent_1`` -> ``agent``, see
:mod:`agile_marl.agent_ids`) share one actor (``actor_<group>``) and one critic
(``critic_<group>``): their rows are stacked as extra rows of the same network call, in acting and
in learning. Groups with different spaces (a speaker and a listener) have networks of their own.
Each group's actor and critic are trained by one Adam optimizer (``optimizer_<group>``), the critic
follows the actor's architecture mutations (as PPO's separate critic does).

Learning (:meth:`IPPO.learn_population`, written once over a leading member axis) runs, for every
agent group in turn, PPO's update on that group's valid rows of the member's rollout:
``update_epochs`` passes in shuffled minibatches of ``batch_size`` rows drawn from the member's own
``rng``, the clipped surrogate + value + entropy loss of
:func:`agile_core.algorithms.ppo_losses.ppo_minibatch_losses`, gradient clipping to
``max_grad_norm`` and, with ``target_kl``, an early stop of that group's update when a minibatch's
approximate KL exceeds it (that minibatch is not applied). Advantages are GAE(gamma, lambda) per
agent (:mod:`agile_marl.buffers.rollout`): an agent's episode ends at its own termination, and steps
where it is absent (``valid`` False) are neither advantage sources nor loss rows.

Actions: categorical (Discrete, with action masks), independent categoricals (MultiDiscrete),
Bernoulli (MultiBinary) or a diagonal Gaussian with a learnt state-independent log-std initialised
to ``log(action_std_init)`` (Box). A Gaussian sample is stored and scored unclipped
(``extras["action"]``); only the env's copy is clipped to the bounds. A member with a Gaussian
policy or a convolutional encoder does not stack with others and learns as a group of one
(the same code, with its own networks).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar, cast

import numpy as np
import torch
from gymnasium import spaces

from agile_core.algorithms.group import MemberGroup, member_rows
from agile_core.algorithms.ppo_losses import (
    LOSS_NAMES,
    ppo_minibatch_losses,
    prepare_action_mask,
    step_minibatch,
    to_env_action,
)
from agile_core.hpo.hyperparameters import HyperparameterConfig
from agile_core.networks import EvolvableNetwork, StochasticActor, ValueNetwork
from agile_core.networks.distributions import ActionDistribution
from agile_core.networks.preprocessing import preprocess_population_observation
from agile_core.specs.network import NetworkSpec
from agile_core.training.budget import rollout_vector_steps
from agile_core.training.tensor_tree import map_tree
from agile_marl.base import MultiAgentAgent
from agile_marl.buffers.rollout import (
    AgentGroupRows,
    MultiAgentRolloutBatch,
    MultiAgentRolloutBuffer,
    RolloutMinibatch,
    population_batch,
)
from agile_marl.population import MultiAgentActions
from agile_marl.specs.ippo import IPPOSpec

__all__ = ["IPPO"]

_DEFAULTS = IPPOSpec.defaults()
"""The registered spec's defaults: the one home of IPPO's keyword defaults."""

GROUP_STATS = (*LOSS_NAMES, "explained_variance", "epochs", "minibatches", "early_stop")
"""What :meth:`IPPO.learn` reports per agent group (``"<group>.<name>"``) and averaged over groups."""


def network_section(net_config: Any, key: str, agents: Sequence[str]) -> Any:
    """The network section of agent group `key`: a section keyed by the group (or its first
    agent's id) in ``net_config.groups``, else the shared fields (``MultiAgentNetworkSpec``)."""
    if net_config is None:
        return None
    data = net_config.model_dump() if isinstance(net_config, NetworkSpec) else dict(net_config)
    sections = dict(data.pop("groups", None) or {})
    for name in (key, *agents):
        if name in sections:
            section = sections[name]
            return section.model_dump() if isinstance(section, NetworkSpec) else dict(section)
    return data


def _cat_rows(trees: Sequence[Any]) -> Any:
    """Network inputs ``[P, rows_i, ...]`` (tensors or dict/tuple trees) joined along the rows."""
    if len(trees) == 1:
        return trees[0]
    return map_tree(lambda *leaves: torch.cat(leaves, dim=1), trees[0], *trees[1:])


def _rows(tree: Any) -> int:
    """The rows (dim 1) of network inputs ``[P, rows, ...]``."""
    if isinstance(tree, Mapping):
        return _rows(next(iter(tree.values())))
    if isinstance(tree, tuple):
        return _rows(tree[0])
    return int(tree.shape[1])


class IPPO(MultiAgentAgent):
    """Independent PPO for a PettingZoo Parallel env (see the module docstring).

    Args:
        observation_spaces: Space of one sub-env's observation per agent id.
        action_spaces: Discrete, Box, MultiDiscrete (1-D) or MultiBinary space per agent id;
            agents of one group must share their spaces.
        index: Agent index in the population.
        hp_config: Hyperparameters that RL-HP mutation may change, with their ranges.
        device: Torch device of the networks.
        net_config: Network architecture (``NetworkSpec`` or dict; a ``MultiAgentNetworkSpec``'s
            ``groups`` may give an agent group its own section).
        seed: Seeds network initialisation and minibatch shuffling (None: fresh entropy); action
            sampling uses torch's global generator.
        batch_size, lr, learn_step, gamma, gae_lambda, action_std_init, clip_coef, ent_coef,
        vf_coef, max_grad_norm, target_kl, update_epochs, normalize_advantages, clip_vloss:
            as in :class:`agile_marl.specs.ippo.IPPOSpec`.
    """

    spec_class = IPPOSpec
    supported_action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (
        spaces.Discrete, spaces.Box, spaces.MultiDiscrete, spaces.MultiBinary,
    )

    # hyperparameters, set from IPPOSpec (declared here for the type checker)
    batch_size: int
    lr: float
    learn_step: int
    gamma: float
    gae_lambda: float
    action_std_init: float
    clip_coef: float
    ent_coef: float
    vf_coef: float
    max_grad_norm: float
    target_kl: float | None
    update_epochs: int
    normalize_advantages: bool
    clip_vloss: bool

    def __init__(
        self,
        observation_spaces: Mapping[str, spaces.Space],
        action_spaces: Mapping[str, spaces.Space],
        *,
        index: int = 0,
        hp_config: HyperparameterConfig | None = None,
        device: str | torch.device = "cpu",
        net_config: NetworkSpec | Mapping[str, Any] | None = None,
        seed: int | None = None,
        batch_size: int = _DEFAULTS["batch_size"],
        lr: float = _DEFAULTS["lr"],
        learn_step: int = _DEFAULTS["learn_step"],
        gamma: float = _DEFAULTS["gamma"],
        gae_lambda: float = _DEFAULTS["gae_lambda"],
        action_std_init: float = _DEFAULTS["action_std_init"],
        clip_coef: float = _DEFAULTS["clip_coef"],
        ent_coef: float = _DEFAULTS["ent_coef"],
        vf_coef: float = _DEFAULTS["vf_coef"],
        max_grad_norm: float = _DEFAULTS["max_grad_norm"],
        target_kl: float | None = _DEFAULTS["target_kl"],
        update_epochs: int = _DEFAULTS["update_epochs"],
        normalize_advantages: bool = _DEFAULTS["normalize_advantages"],
        clip_vloss: bool = _DEFAULTS["clip_vloss"],
    ) -> None:
        self.adopt_hyperparameters(locals())
        super().__init__(observation_spaces, action_spaces, index=index, hp_config=hp_config, device=device)
        self.rng = np.random.default_rng(seed)
        for key, agents in self.agent_groups.items():
            first = agents[0]
            for agent in agents[1:]:
                if repr(self.observation_spaces[agent]) != repr(self.observation_spaces[first]) or \
                        repr(self.action_spaces[agent]) != repr(self.action_spaces[first]):
                    raise ValueError(f"IPPO: agents of group {key!r} share networks and need equal spaces "
                                     f"({first} and {agent} differ)")
            action_space = self.action_spaces[first]
            if isinstance(action_space, spaces.MultiDiscrete) and np.asarray(action_space.nvec).ndim != 1:
                raise ValueError(f"IPPO supports 1-D MultiDiscrete action spaces only, got {action_space}")
        with torch.random.fork_rng(devices=[]):
            if seed is not None:
                torch.manual_seed(seed)
            for key, agents in self.agent_groups.items():
                section = network_section(net_config, key, agents)
                obs_space, action_space = self.observation_spaces[agents[0]], self.action_spaces[agents[0]]
                actor = StochasticActor(obs_space, action_space, section, action_std_init=self.action_std_init)
                critic = ValueNetwork(obs_space, section)
                setattr(self, self.net_name("actor", key), actor.to(self.device))
                setattr(self, self.net_name("critic", key), critic.to(self.device))
        for key in self.agent_groups:
            actor_name, critic_name = self.net_name("actor", key), self.net_name("critic", key)
            self.register_network_group(actor_name, critic_name)
            self.register_optimizer(self.optimizer_name(key), [actor_name, critic_name], "lr", eps=1e-5)

    @staticmethod
    def optimizer_name(key: str) -> str:
        """The attribute of agent group `key`'s optimizer: ``optimizer_<group>``."""
        return f"optimizer_{key}"

    def group_space(self, key: str) -> spaces.Space:
        """The action space of agent group `key`."""
        return self.action_spaces[self.agent_groups[key][0]]

    # ------------------------------------------------------------------ networks over a group
    @classmethod
    def _head(cls, group: MemberGroup, role: str, key: str, inputs: Any) -> torch.Tensor:
        """``head(encoder(inputs))`` of network `role` of agent group `key` for every member,
        inputs and outputs ``[P, rows, ...]``: the stacked network, or (a group of one that does not
        stack) the member's own network with the member axis removed and restored."""
        name = MultiAgentAgent.net_name(role, key)
        if group.stacked:
            return cast(EvolvableNetwork, group.nets[name]).head_of_latent(inputs)
        network = getattr(group.members[0], name)
        return network.head_of_latent(map_tree(lambda leaf: leaf.squeeze(0), inputs)).unsqueeze(0)

    @classmethod
    def _policy(cls, group: MemberGroup, key: str) -> StochasticActor:
        """The actor whose distributions agent group `key`'s head outputs parameterise."""
        name = MultiAgentAgent.net_name("actor", key)
        net = group.nets[name] if group.stacked else getattr(group.members[0], name)
        assert isinstance(net, StochasticActor)
        return net

    @classmethod
    def _distribution(cls, group: MemberGroup, key: str, inputs: Any,
                      masks: torch.Tensor | None) -> ActionDistribution:
        return cls._policy(group, key).distribution_from_head(cls._head(group, "actor", key, inputs), masks)

    @classmethod
    def _value(cls, group: MemberGroup, key: str, inputs: Any) -> torch.Tensor:
        return cls._head(group, "critic", key, inputs).squeeze(-1)

    def _group_masks(self, key: str, action_masks: Mapping[str, Any] | None, lead: tuple[int, ...],
                     rows: Sequence[int]) -> torch.Tensor | None:
        """Agent group `key`'s prepared masks ``[P, rows, n]`` joined along the rows (an agent
        without one allows everything), or None."""
        space = self.group_space(key)
        agents = self.agent_groups[key]
        given = [None if not action_masks or action_masks.get(agent) is None
                 else prepare_action_mask(space, action_masks[agent], self.device) for agent in agents]
        if all(mask is None for mask in given):
            return None
        width = next(mask.shape[-1] for mask in given if mask is not None)
        parts = [torch.ones(*lead, count, width, dtype=torch.bool, device=self.device) if mask is None
                 else mask.reshape(*lead, count, width) for mask, count in zip(given, rows, strict=True)]
        return torch.cat(parts, dim=1)

    # ------------------------------------------------------------------ acting
    @classmethod
    def act_population(cls, group: Any, inputs: Any, *args: Any, training: bool = True,
                       action_masks: Mapping[str, Any] | None = None, **kwargs: Any) -> MultiAgentActions:
        """The policy of every member of `group` on network inputs ``{agent: [P, rows, ...]}``
        (``agent.population_inputs``): env actions ``[P, rows, ...]`` per agent (Box clipped to the
        bounds, ``start`` added), sampled (torch's global RNG, one draw per agent group) or, without
        `training`, greedy (mode / mean). ``extras``: ``"action"`` (the raw actions to store),
        ``"log_prob"`` and ``"value"`` ``[P, rows]``. `action_masks` ``{agent: [P, rows, n]}``
        (truthy = allowed) restrict discrete choices."""
        first: IPPO = group.members[0]
        actions: dict[str, np.ndarray] = {}
        extras: dict[str, dict[str, torch.Tensor]] = {"action": {}, "log_prob": {}, "value": {}}
        with torch.no_grad():
            for key, agents in first.agent_groups.items():
                parts = [inputs[agent] for agent in agents]
                rows = [_rows(part) for part in parts]
                joined = _cat_rows(parts)
                lead = (len(group),)
                dist = cls._distribution(group, key, joined, first._group_masks(key, action_masks, lead, rows))
                raw = dist.sample() if training else dist.mode()
                log_prob, value = dist.log_prob(raw), cls._value(group, key, joined)
                space = first.group_space(key)
                shape = () if isinstance(space, spaces.Discrete) else tuple(space.shape or ())
                for agent, raw_part, log_part, value_part in zip(agents, raw.split(rows, dim=1),
                                                                 log_prob.split(rows, dim=1),
                                                                 value.split(rows, dim=1), strict=True):
                    shaped = raw_part.reshape(*raw_part.shape[:2], *shape)
                    extras["action"][agent], extras["log_prob"][agent] = shaped, log_part
                    extras["value"][agent] = value_part
                    actions[agent] = to_env_action(space, shaped.cpu().numpy())
        return MultiAgentActions(actions=actions, extras=extras)

    @classmethod
    def value_population(cls, group: Any, inputs: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """``V(obs)`` ``[P, rows]`` per agent for network inputs ``{agent: [P, rows, ...]}``."""
        first: IPPO = group.members[0]
        values: dict[str, torch.Tensor] = {}
        with torch.no_grad():
            for key, agents in first.agent_groups.items():
                parts = [inputs[agent] for agent in agents]
                value = cls._value(group, key, _cat_rows(parts))
                values.update(zip(agents, value.split([_rows(part) for part in parts], dim=1), strict=True))
        return values

    def get_value(self, obs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """``V(obs)`` float32 ``[rows]`` per agent for observations ``{agent: [rows, ...]}``."""
        inputs = self.population_inputs({agent: member_rows(obs[agent], 1) for agent in self.agent_ids})
        values = type(self).value_population(self.solo_group(), inputs)
        return {agent: value[0].cpu().numpy().astype(np.float32) for agent, value in values.items()}

    # ------------------------------------------------------------------ rollouts
    def rollout_steps(self, num_envs: int) -> int:
        """Vector steps per rollout: ``ceil(learn_step / num_envs)``, at least 1."""
        return rollout_vector_steps(self.learn_step, num_envs)

    def create_rollout_buffer(self, num_envs: int, num_steps: int | None = None) -> MultiAgentRolloutBuffer:
        """An empty rollout buffer of :meth:`rollout_steps` rows for this agent's spaces."""
        return MultiAgentRolloutBuffer(num_steps or self.rollout_steps(num_envs), num_envs, self.observation_spaces,
                                       self.action_spaces, self.device)

    # ------------------------------------------------------------------ learning
    def learn(self, experiences: MultiAgentRolloutBuffer | MultiAgentRolloutBatch) -> dict[str, float]:
        """The IPPO update on one rollout whose advantages are computed (the ``P = 1`` case of
        :meth:`learn_population`): per agent group ``"<group>.<stat>"`` for the stats in
        ``GROUP_STATS`` (means over the applied minibatches), and each stat averaged over groups."""
        batch = experiences if isinstance(experiences, MultiAgentRolloutBatch) else [experiences]
        stats = type(self).learn_population(self.solo_group(), batch, [True])[0]
        assert stats is not None
        return stats

    @classmethod
    def learn_population(cls, group: MemberGroup, batch: Any,
                         active: Sequence[bool] | None = None) -> list[dict[str, float] | None]:
        """The IPPO update of every active member of `group` on its own rollout: `batch` is a
        :class:`MultiAgentRolloutBatch` (:func:`population_batch`) or the members' buffers (None
        for an idle member). Each member keeps its own learning rule (minibatch order from its own
        ``rng``, ``update_epochs``, ``batch_size``, ``clip_coef``, ``ent_coef``, ``vf_coef``,
        ``max_grad_norm``, ``target_kl``, learning rate and Adam state); agent groups learn one
        after the other. Returns each member's statistics, None for the idle ones."""
        members: list[IPPO] = list(group.members)
        first = members[0]
        if not isinstance(batch, MultiAgentRolloutBatch):
            buffers = list(batch)
            if len(buffers) != len(members):
                raise ValueError(f"expected {len(members)} rollouts (None for idle members), got {len(buffers)}")
            buffers = [buffer if active is None or active[slot] else None for slot, buffer in enumerate(buffers)]
            if not any(buffer is not None for buffer in buffers):
                return [None] * len(members)
            batch = population_batch(buffers, first.agent_groups)
        if len(batch.present) != len(members):
            raise ValueError(f"the batch holds {len(batch.present)} members, the group {len(members)}")
        learning = [present and (active is None or bool(active[slot])) for slot, present in enumerate(batch.present)]
        if not any(learning):
            return [None] * len(members)
        for member, on in zip(members, learning, strict=True):
            for name in member.network_names if on else ():
                getattr(member, name).train()
        per_group = {key: cls._learn_agent_group(group, key, batch.groups[key], learning) for key in first.agent_groups}
        results: list[dict[str, float] | None] = []
        for slot, member in enumerate(members):
            if not learning[slot]:
                results.append(None)
                continue
            member.learn_counter += 1
            result: dict[str, float] = {}
            for key, stats in per_group.items():
                result.update({f"{key}.{name}": value for name, value in stats[slot].items()})
            for name in GROUP_STATS:
                result[name] = float(np.mean([stats[slot][name] for stats in per_group.values()]))
            results.append(result)
        return results

    def _schedule(self, count: int, epochs: list[int], slot: int) -> Iterator[np.ndarray]:
        """This member's minibatches (row indices) over all its epochs, each epoch one
        ``rng.permutation`` of its `count` rows; ``epochs[slot]`` counts the epochs started."""
        for _ in range(self.update_epochs):
            epochs[slot] += 1
            order = self.rng.permutation(count)
            for begin in range(0, count, self.batch_size):
                yield order[begin: begin + self.batch_size]

    @classmethod
    def _learn_agent_group(cls, group: MemberGroup, key: str, rows: AgentGroupRows,
                           learning: Sequence[bool]) -> list[dict[str, float]]:
        """PPO's epochs over agent group `key`'s rows for every learning member (see
        :meth:`learn_population`); each member's stats for this agent group."""
        members: list[IPPO] = list(group.members)
        size = len(members)
        epochs = [0] * size
        schedules = [member._schedule(rows.counts[slot], epochs, slot) if learning[slot] and rows.counts[slot] else None
                     for slot, member in enumerate(members)]
        running, stopped = [schedule is not None for schedule in schedules], [False] * size
        steps = np.zeros(size, dtype=np.int64)
        totals = torch.zeros(size, len(LOSS_NAMES), device=group.device)
        targets = [member.target_kl for member in members]
        optimizer = cls.optimizer_name(key)
        while True:
            picks = [next(schedule, None) if running[slot] and schedule is not None else None
                     for slot, schedule in enumerate(schedules)]
            running = [pick is not None for pick in picks]
            if not any(running):
                break
            minibatch = rows.minibatch([np.zeros(0, np.int64) if pick is None else pick for pick in picks])
            losses, stats = cls._losses(group, key, minibatch)
            step_minibatch(group, optimizer, losses, stats, running, stopped, targets, totals, steps)
        sums = totals.cpu().tolist()
        results = []
        for slot in range(size):
            count = int(steps[slot])
            result = {name: (sums[slot][i] / count if count else float("nan")) for i, name in enumerate(LOSS_NAMES)}
            result.update(explained_variance=_explained_variance(rows, slot), epochs=float(epochs[slot]),
                          minibatches=float(count), early_stop=float(stopped[slot]))
            results.append(result)
        return results

    @classmethod
    def _losses(cls, group: MemberGroup, key: str, minibatch: RolloutMinibatch) -> tuple[torch.Tensor, torch.Tensor]:
        """The PPO losses ``[P]`` and statistics ``[P, 6]`` of agent group `key`'s minibatches."""
        first: IPPO = group.members[0]
        inputs = preprocess_population_observation(first.observation_spaces[first.agent_groups[key][0]], minibatch.obs,
                                                   first.device, first.normalize_images)
        dist = cls._distribution(group, key, inputs, minibatch.action_masks)
        return ppo_minibatch_losses(group, dist, cls._value(group, key, inputs), minibatch)


def _explained_variance(rows: AgentGroupRows, slot: int) -> float:
    """``1 - Var(R - V) / Var(R)`` over a member's rows (nan when fewer than 2 or Var(R) = 0)."""
    count = rows.counts[slot]
    if count < 2:
        return float("nan")
    values, returns = rows.scalars[slot, :count, 1], rows.scalars[slot, :count, 3]
    var = returns.var(correction=0)
    return float("nan") if float(var) == 0.0 else float(1.0 - (returns - values).var(correction=0) / var)
