"""On-policy rollout storage of one population member in a multi-agent vector env, and the
population batch IPPO learns from.

Row contract (vector step ``t``, sub-env ``n``, per agent), following the env contract of
:mod:`agile_marl.envs`: row ``t`` holds the observation the policy acted on, the raw action it
sampled (Box: unclipped), its log-probability and value, and what ``env.step`` returned for that
agent: reward, termination, truncation and ``info["valid"]`` (the agent was alive before the step
and the sub-env was not autoresetting). Invalid rows (a dead agent, an autoreset step) get
advantage 0, never feed another row's advantage and never reach a minibatch.

Bootstrapping, per agent (its episode ends at its own termination or truncation):

* termination: no bootstrap; the recursion is cut;
* truncation: ``V(final observation)``. The env returns that observation at the truncating step,
  so the policy acts on it at the next step (the agent is then dead, or the sub-env autoresets,
  so that row is invalid) and the value stored there *is* ``V(final observation)``; it is used
  unless ``add(..., final_values=...)`` gave one (on the last row: ``last_values``);
* otherwise: the value of the next row (``last_values`` after the last row).

A training loop (P = 1; a population keeps one buffer per member)::

    buffer = agent.create_rollout_buffer(env.num_envs)
    obs, info = env.reset()
    while not buffer.full:
        out = IPPO.act_population(group, agent.population_inputs(with_axis(obs)), training=True,
                                  action_masks=...)
        next_obs, rewards, terms, truncs, info = env.step(take_member(out.actions))
        buffer.add(obs, raw_actions, log_probs, values, rewards, terms, truncs, info["valid"])
        obs = next_obs
    buffer.compute_advantages(last_values=V(obs), gamma=agent.gamma, gae_lambda=agent.gae_lambda)
    agent.learn(buffer)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from agile_core.training.advantages import compute_gae
from agile_core.training.population import pad_index_batches
from agile_core.training.tensor_tree import TensorTree, allocate, as_tensor, map_tree, write_row

__all__ = [
    "AgentGroupRows",
    "MultiAgentRolloutBatch",
    "MultiAgentRolloutBuffer",
    "RolloutMinibatch",
    "compute_advantages_together",
    "population_batch",
]

SCALARS = ("log_probs", "values", "rewards", "truncation_values", "advantages", "returns")
FLAGS = ("terminations", "truncations", "valid", "has_truncation_value")


def _mask_size(space: spaces.Space) -> int | None:
    """Entries of an action mask for `space` (None when it takes none)."""
    if isinstance(space, spaces.Discrete):
        return int(space.n)
    if isinstance(space, spaces.MultiDiscrete):
        return int(np.asarray(space.nvec).sum())
    return None


class AgentRollout:
    """One agent's preallocated ``[T, N, ...]`` storage (see :class:`MultiAgentRolloutBuffer`)."""

    def __init__(self, num_steps: int, num_envs: int, observation_space: spaces.Space,
                 action_space: spaces.Space, device: torch.device) -> None:
        lead = (num_steps, num_envs)
        self.observation_space, self.action_space = observation_space, action_space
        self.observations: TensorTree = allocate(observation_space, lead, device)
        self.actions: torch.Tensor = allocate(action_space, lead, device)
        for name in SCALARS:
            setattr(self, name, torch.zeros(lead, dtype=torch.float32, device=device))
        for name in FLAGS:
            setattr(self, name, torch.zeros(lead, dtype=torch.bool, device=device))
        self.action_masks: torch.Tensor | None = None
        self.mask_size = _mask_size(action_space)

    log_probs: torch.Tensor
    values: torch.Tensor
    rewards: torch.Tensor
    truncation_values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    terminations: torch.Tensor
    truncations: torch.Tensor
    valid: torch.Tensor
    has_truncation_value: torch.Tensor


class MultiAgentRolloutBuffer:
    """Fixed-size rollout of one member: per agent ``[num_steps, num_envs, ...]`` storage
    (``buffer.agents[agent_id]``: ``observations``, ``actions`` (raw), ``log_probs``, ``values``,
    ``rewards``, ``terminations``, ``truncations``, ``valid``, ``truncation_values``,
    ``advantages``, ``returns`` and, once a mask was given, ``action_masks``).

    Spaces may differ between agents (heterogeneous agents), observations may be Dict/Tuple.
    """

    def __init__(self, num_steps: int, num_envs: int, observation_spaces: Mapping[str, spaces.Space],
                 action_spaces: Mapping[str, spaces.Space], device: str | torch.device = "cpu") -> None:
        if num_steps < 1 or num_envs < 1:
            raise ValueError("num_steps and num_envs must be >= 1")
        self.num_steps, self.num_envs = int(num_steps), int(num_envs)
        self.device = torch.device(device)
        self.agent_ids = list(observation_spaces)
        self.agents = {agent: AgentRollout(self.num_steps, self.num_envs, observation_spaces[agent],
                                           action_spaces[agent], self.device) for agent in self.agent_ids}
        self._pos = 0
        self.computed = False

    @property
    def size(self) -> int:
        """Vector steps stored (rows ``0 .. size - 1``)."""
        return self._pos

    @property
    def full(self) -> bool:
        """True once ``num_steps`` rows were added."""
        return self._pos == self.num_steps

    def reset(self) -> None:
        """Empty the buffer (storage is reused)."""
        self._pos = 0
        self.computed = False
        for rollout in self.agents.values():
            for name in ("valid", "has_truncation_value"):
                getattr(rollout, name).zero_()
            for name in ("advantages", "returns", "truncation_values"):
                getattr(rollout, name).zero_()

    def _vector(self, value: Any, dtype: torch.dtype, name: str) -> torch.Tensor:
        return as_tensor(value, torch.empty(self.num_envs, dtype=dtype, device=self.device), name)

    def add(self, obs: Mapping[str, Any], actions: Mapping[str, Any], log_probs: Mapping[str, Any],
            values: Mapping[str, Any], rewards: Mapping[str, Any], terminations: Mapping[str, Any],
            truncations: Mapping[str, Any], valid: Mapping[str, Any], *,
            final_values: Mapping[str, Any] | None = None, action_masks: Mapping[str, Any] | None = None) -> int:
        """Write one vector step of every agent (each value ``[num_envs, ...]``) and return its row.

        `actions` are the raw policy actions (IPPO's ``extras["action"]``), `log_probs` and
        `values` the policy's for the observation acted on; `valid` is the env's
        ``info["valid"]``. `final_values` (optional, per agent ``[num_envs]``) are ``V(final
        observation)`` used where the agent truncated without terminating; `action_masks` the
        masks the actions were sampled under (bool, True = allowed)."""
        if self.full:
            raise RuntimeError("rollout buffer is full; call reset() first")
        row = self._pos
        for agent, rollout in self.agents.items():
            write_row(rollout.observations, row, obs[agent], f"obs[{agent}]")
            write_row(rollout.actions, row, actions[agent], f"actions[{agent}]")
            rollout.log_probs[row] = self._vector(log_probs[agent], torch.float32, "log_probs")
            rollout.values[row] = self._vector(values[agent], torch.float32, "values")
            rollout.rewards[row] = self._vector(rewards[agent], torch.float32, "rewards")
            term = self._vector(terminations[agent], torch.bool, "terminations")
            trunc = self._vector(truncations[agent], torch.bool, "truncations")
            rollout.terminations[row], rollout.truncations[row] = term, trunc
            rollout.valid[row] = self._vector(valid[agent], torch.bool, "valid")
            rollout.truncation_values[row] = 0.0
            rollout.has_truncation_value[row] = False
            if final_values is not None and agent in final_values and final_values[agent] is not None:
                rollout.truncation_values[row] = self._vector(final_values[agent], torch.float32, "final_values")
                rollout.has_truncation_value[row] = trunc & ~term
            mask = None if action_masks is None else action_masks.get(agent)
            if mask is not None and rollout.mask_size is not None:
                if rollout.action_masks is None:
                    rollout.action_masks = torch.ones(self.num_steps, self.num_envs, rollout.mask_size,
                                                      dtype=torch.bool, device=self.device)
                rollout.action_masks[row] = torch.as_tensor(mask, device=self.device).reshape(self.num_envs, -1).bool()
            elif rollout.action_masks is not None:
                rollout.action_masks[row] = True
        self._pos += 1
        self.computed = False
        return row

    # ------------------------------------------------------------------ advantages
    def estimator_inputs(self, last_values: Mapping[str, Any]) -> tuple[torch.Tensor, ...]:
        """``(rewards, values, terminations, truncations, truncation_values, valid, last_value)``
        of the stored rows, agents side by side (``[T, agents * N]``, agent-major columns), with
        the truncation bootstrap filled in (see the module docstring)."""
        n = self._pos
        if n == 0:
            raise RuntimeError("cannot compute advantages of an empty buffer")
        parts: list[tuple[torch.Tensor, ...]] = []
        for agent, rollout in self.agents.items():
            last = self._vector(last_values[agent], torch.float32, "last_values")
            valid, term, trunc = rollout.valid[:n], rollout.terminations[:n], rollout.truncations[:n]
            next_values = torch.cat([rollout.values[1:n], last[None]], dim=0)
            next_invalid = torch.cat([~valid[1:], torch.ones_like(valid[:1])], dim=0)
            missing = valid & trunc & ~term & ~rollout.has_truncation_value[:n]
            if bool((missing & ~next_invalid).any()):
                raise ValueError(f"{agent} truncated but is still valid at the next step: give final_values")
            trunc_values = torch.where(missing, next_values, rollout.truncation_values[:n])
            parts.append((rollout.rewards[:n], rollout.values[:n], term, trunc, trunc_values, valid, last))
        return tuple(torch.cat(column, dim=-1) for column in zip(*parts, strict=True))

    def store_estimates(self, advantages: torch.Tensor, returns: torch.Tensor) -> None:
        """Write ``[T, agents * N]`` estimates (agent-major columns) back per agent."""
        n = self._pos
        for index, rollout in enumerate(self.agents.values()):
            columns = slice(index * self.num_envs, (index + 1) * self.num_envs)
            rollout.advantages.zero_()
            rollout.returns.zero_()
            rollout.advantages[:n], rollout.returns[:n] = advantages[:, columns], returns[:, columns]
        self.computed = True

    def compute_advantages(self, last_values: Mapping[str, Any], gamma: float, gae_lambda: float) -> None:
        """GAE(gamma, lambda) advantages and returns of every agent's stored rows; `last_values`
        ``{agent: [num_envs]}`` is ``V`` of the observations the next step acts on."""
        rewards, values, term, trunc, trunc_values, valid, last = self.estimator_inputs(last_values)
        advantages, returns = compute_gae(rewards, values, term, trunc, trunc_values, valid, last, gamma, gae_lambda)
        self.store_estimates(advantages, returns)


def compute_advantages_together(buffers: Sequence[MultiAgentRolloutBuffer], last_values: Sequence[Mapping[str, Any]],
                                gammas: Sequence[float], gae_lambdas: Sequence[float]) -> None:
    """``buffer.compute_advantages(...)`` for every buffer, with one backward recursion for all
    buffers holding the same number of rows (side by side, each with its own gamma and lambda)."""
    together: dict[int, list[tuple[int, tuple[torch.Tensor, ...]]]] = {}
    for index, (buffer, agent_values) in enumerate(zip(buffers, last_values, strict=True)):
        together.setdefault(buffer.size, []).append((index, buffer.estimator_inputs(agent_values)))
    for members in together.values():
        columns = [torch.cat(parts, dim=-1) for parts in zip(*(inputs for _, inputs in members), strict=True)]
        widths = [inputs[0].shape[1] for _, inputs in members]
        device = columns[0].device
        gamma, gae_lambda = (torch.cat([torch.full((width,), float(values[index]), dtype=torch.float64, device=device)
                                        for (index, _), width in zip(members, widths, strict=True)])
                             for values in (gammas, gae_lambdas))
        rewards, values, term, trunc, trunc_values, valid, bootstrap = columns
        advantages, returns = compute_gae(rewards, values, term, trunc, trunc_values, valid, bootstrap, gamma,
                                          gae_lambda)
        for (index, _), adv, ret in zip(members, advantages.split(widths, dim=1), returns.split(widths, dim=1),
                                        strict=True):
            buffers[index].store_estimates(adv, ret)


# ---------------------------------------------------------------------- population batch
@dataclass
class RolloutMinibatch:
    """Minibatches of every member laid out ``[P, rows, ...]`` (see
    :class:`agile_core.algorithms.ppo_losses.PPOMinibatchLike`); ``mask`` is 1 on a member's own
    rows, ``counts`` ``[P, 1]`` their number (at least 1)."""

    obs: Any
    actions: torch.Tensor
    old_log_probs: torch.Tensor
    old_values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    mask: torch.Tensor
    counts: torch.Tensor
    action_masks: torch.Tensor | None = None


@dataclass
class AgentGroupRows:
    """The valid rows of one agent group, every member's ``[P, rows_max, ...]`` (zero-padded).

    Member ``p``'s rows ``[0, counts[p])`` are, agent after agent (in the group's order), that
    agent's valid rows in ``(step, env)`` order. ``weights[p]`` is ``1 / counts[p]`` on them and 0
    on padding. ``scalars[..., k]`` holds log-probability, value, advantage and return."""

    obs: Any
    actions: torch.Tensor
    scalars: torch.Tensor
    counts: list[int]
    weights: torch.Tensor
    action_masks: torch.Tensor | None = None

    def minibatch(self, picks: Sequence[np.ndarray]) -> RolloutMinibatch:
        """The members' minibatches of rows `picks` (empty for a member that sits out)."""
        padded, weights = pad_index_batches(picks)
        members, width = padded.shape
        device = self.scalars.device
        mask = torch.as_tensor(weights > 0, device=device).to(torch.float32)
        rows = self.scalars.shape[1]
        flat = torch.as_tensor((padded + np.arange(members)[:, None] * rows).reshape(-1), device=device)

        def take(stacked: torch.Tensor) -> torch.Tensor:
            return stacked.flatten(0, 1).index_select(0, flat).unflatten(0, (members, width))

        log_probs, values, advantages, returns = take(self.scalars).unbind(-1)
        return RolloutMinibatch(obs=map_tree(take, self.obs), actions=take(self.actions), old_log_probs=log_probs,
                                old_values=values, advantages=advantages, returns=returns, mask=mask,
                                counts=mask.sum(dim=1, keepdim=True).clamp(min=1.0),
                                action_masks=None if self.action_masks is None else take(self.action_masks))


@dataclass
class MultiAgentRolloutBatch:
    """What :meth:`agile_marl.ippo.IPPO.learn_population` learns from: per agent group its rows
    (:class:`AgentGroupRows`); ``present[p]`` is False for a member without a rollout."""

    groups: dict[str, AgentGroupRows]
    present: list[bool]


def _flat_action(actions: torch.Tensor, space: spaces.Space) -> torch.Tensor:
    """``[rows, ...]`` actions as the distributions take them: ``[rows]`` (Discrete) or ``[rows, size]``."""
    return actions.reshape(-1) if isinstance(space, spaces.Discrete) else actions.reshape(actions.shape[0], -1)


def _member_rows(buffer: MultiAgentRolloutBuffer, agents: Sequence[str]) -> tuple[Any, ...]:
    """One member's valid rows of `agents`: obs tree, actions, scalars ``[rows, 4]``, masks."""
    n = buffer.size
    obs, actions, scalars, masks = [], [], [], []
    masked = any(buffer.agents[agent].action_masks is not None for agent in agents)
    for agent in agents:
        rollout = buffer.agents[agent]
        index = rollout.valid[:n].reshape(-1).nonzero().squeeze(-1)
        obs.append(map_tree(lambda leaf, i=index: leaf[:n].flatten(0, 1).index_select(0, i), rollout.observations))
        actions.append(_flat_action(rollout.actions[:n].flatten(0, 1).index_select(0, index), rollout.action_space))
        scalars.append(torch.stack([rollout.log_probs[:n], rollout.values[:n], rollout.advantages[:n],
                                    rollout.returns[:n]], dim=-1).flatten(0, 1).index_select(0, index))
        if masked:
            size = rollout.mask_size or 0
            agent_masks = rollout.action_masks if rollout.action_masks is not None else \
                torch.ones(n, buffer.num_envs, size, dtype=torch.bool, device=buffer.device)
            masks.append(agent_masks[:n].flatten(0, 1).index_select(0, index))
    joined = map_tree(lambda *leaves: torch.cat(leaves), obs[0], *obs[1:])
    return joined, torch.cat(actions), torch.cat(scalars), torch.cat(masks) if masked else None


def _stack(parts: Sequence[torch.Tensor | None], rows: int) -> torch.Tensor:
    """Members' ``[rows_p, ...]`` tensors (None: idle) as one zero-padded ``[P, rows, ...]``."""
    like = next(part for part in parts if part is not None)
    if len(parts) == 1:
        return like.unsqueeze(0)
    out = like.new_zeros(len(parts), rows, *like.shape[1:])
    for slot, part in enumerate(parts):
        if part is not None:
            out[slot, : part.shape[0]] = part
    return out


def population_batch(buffers: Sequence[MultiAgentRolloutBuffer | None],
                     agent_groups: Mapping[str, Sequence[str]]) -> MultiAgentRolloutBatch:
    """The members' rollouts (advantages computed; None for a member without one, e.g. idle),
    each of its own length, as one :class:`MultiAgentRolloutBatch` padded to the longest."""
    present = [buffer is not None for buffer in buffers]
    if not any(present):
        raise ValueError("population_batch needs at least one rollout")
    for buffer in buffers:
        if buffer is not None and not buffer.computed:
            raise RuntimeError("compute the advantages of every rollout before batching it")
    groups: dict[str, AgentGroupRows] = {}
    for key, agents in agent_groups.items():
        per_member = [None if buffer is None else _member_rows(buffer, agents) for buffer in buffers]
        counts = [0 if part is None else int(part[2].shape[0]) for part in per_member]
        rows = max(max(counts), 1)
        filler = next(part for part in per_member if part is not None)

        def field(index: int, parts: list[Any] = per_member, filler: Any = filler) -> list[Any]:
            return [filler[index] if part is None else part[index] for part in parts]

        obs_parts = field(0)
        obs = map_tree(lambda *leaves, rows=rows, present=present: _stack(
            [leaf if on else None for leaf, on in zip(leaves, present, strict=True)], rows), obs_parts[0], *obs_parts[1:])
        masks = field(3)
        action_masks = None
        if any(mask is not None for mask in masks):
            width = next(mask.shape[-1] for mask in masks if mask is not None)
            action_masks = _stack([torch.ones(count, width, dtype=torch.bool, device=filler[2].device)
                                   if mask is None else mask for mask, count in zip(masks, counts, strict=True)], rows)
        weights = torch.zeros(len(buffers), rows, device=filler[2].device)
        for slot, count in enumerate(counts):
            weights[slot, :count] = 1.0 / max(count, 1)
        groups[key] = AgentGroupRows(
            obs=obs, actions=_stack([part[1] if part is not None else None for part in per_member], rows),
            scalars=_stack([part[2] if part is not None else None for part in per_member], rows),
            counts=counts, weights=weights, action_masks=action_masks)
    return MultiAgentRolloutBatch(groups=groups, present=present)
