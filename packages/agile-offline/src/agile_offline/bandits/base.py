"""What NeuralUCB and NeuralTS share: the reward network, the gradient covariance, the
regression step, and the population-shaped acting rule.

A value network ``f(x; theta)`` predicts the reward of one arm's context ``x``. Exploration uses
the gradient ``g = df(x)/dtheta`` of each arm's prediction and a **diagonal** gradient covariance
``Z`` (one entry per network parameter, the form the papers' reference code uses; the full
``n x n`` matrix would grow with the square of the parameter count that mutations change)::

    Z   <- lamb                                 (at start; new parameters after a mutation)
    Z   <- Z + g_a * g_a / m                     (after each training step, chosen arm a)
    s^2  = sum(g * g / Z) / m                    (an arm's posterior spread, squared)

``m`` is the network width (the widest hidden layer), the paper's scaling of ``g / sqrt(m)``.
NeuralUCB scores ``f + gamma * s``; NeuralTS samples ``N(f, gamma^2 * lamb * s^2)``. Learning is
one Adam step on ``mean((f(x) - r)^2) + reg * ||theta - theta0||^2`` over `batch_size` stored
(context, reward) pairs.

Everything is written once over a leading member axis ``[P, ...]`` (:class:`MemberGroup`); one
agent is the ``P = 1`` case (:meth:`solo_group`). ``Z`` and ``theta0`` live on each agent as
per-parameter tensors (saved in checkpoints, copied by ``clone``); inside a group they are
stacked ``[P, D]`` in the layout of the group's flat parameters and the agents hold views of
them, so updates made in a group are the agents' own.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from gymnasium import spaces

from agile_core.algorithms.base import SingleAgentAlgorithm
from agile_core.algorithms.group import MemberGroup
from agile_core.hpo.hyperparameters import HyperparameterConfig
from agile_core.networks import ValueNetwork
from agile_core.networks.stacked import corner, member_parameters
from agile_core.specs.network import NetworkSpec
from agile_core.training.profiling import PROFILER

__all__ = ["BanditBatch", "NeuralBandit"]

DEFAULT_EVAL_STEPS = 200
"""Bandit steps of a greedy evaluation when no `max_steps` is given."""


@dataclass
class BanditBatch:
    """Stored pairs laid out ``[P, rows, ...]``: contexts ``[P, rows, D]``, rewards ``[P, rows]``,
    weights ``[P, rows]`` (``1 / batch_size`` on a member's own rows, 0 on padding)."""

    contexts: torch.Tensor
    rewards: torch.Tensor
    weights: torch.Tensor

    @classmethod
    def of_one(cls, contexts: Any, rewards: Any, device: torch.device | str) -> BanditBatch:
        """One agent's pairs ``[rows, D]``, ``[rows]`` as ``P = 1``."""
        x = torch.as_tensor(np.asarray(contexts, dtype=np.float32), device=device).unsqueeze(0)
        r = torch.as_tensor(np.asarray(rewards, dtype=np.float32), device=device).reshape(1, -1)
        return cls(x, r, torch.full_like(r, 1.0 / r.shape[1]))


class NeuralBandit(SingleAgentAlgorithm):
    """Base of the neural contextual bandits (see the module docstring); subclasses give the
    exploration rule (:meth:`explore_scores`), set `spec_class`, take the spec's hyperparameters
    (``gamma``, ``lamb``, ``reg``, ``batch_size``, ``lr``, ``learn_step``) as constructor keywords,
    adopt them (:meth:`adopt_hyperparameters`) and then call this constructor.

    Args:
        observation_space: Box of ONE arm's context (``K * d`` for a ``BanditEnv``).
        action_space: ``Discrete(K)``: the arms.
        index: Agent index in the population.
        hp_config: Hyperparameters that RL-HP mutation may change, with their ranges.
        net_config: Architecture of the reward network (a ``NetworkSpec`` or its dict form).
        device: Torch device.
        seed: Seeds the network initialisation and the agent's ``rng`` (None: fresh entropy).
    """

    supported_observation_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Box,)
    supported_action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Discrete,)

    # hyperparameters, set from the subclass's spec (declared here for the type checker)
    gamma: float
    lamb: float
    reg: float
    batch_size: int
    lr: float
    learn_step: int

    net: ValueNetwork
    optimizer: torch.optim.Optimizer

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space, index: int = 0,
                 hp_config: HyperparameterConfig | None = None,
                 net_config: NetworkSpec | Mapping[str, Any] | None = None, *, device: str | torch.device = "cpu",
                 seed: int | None = None) -> None:
        super().__init__(observation_space, action_space, index=index, hp_config=hp_config, device=device)
        if len(observation_space.shape or ()) != 1:
            raise ValueError(f"{type(self).__name__} needs flat context vectors, got shape {observation_space.shape}")
        self.num_arms = int(action_space.n)  # type: ignore[attr-defined]
        self.rng = np.random.default_rng(seed)
        with torch.random.fork_rng(devices=[]):
            if seed is not None:
                torch.manual_seed(seed)
            self.net = ValueNetwork(observation_space, net_config).to(self.device)
        self.register_network_group("net")
        self.register_optimizer("optimizer", ["net"], "lr")
        self.covariance: dict[str, torch.Tensor] = {}
        self.theta0: dict[str, torch.Tensor] = {}
        self.reset_covariance()
        self.cumulative_regret = 0.0
        """Regret of every training step this agent (and, for a clone, its ancestors) took."""
        self.phase_regret = 0.0
        """Regret of the agent's latest training phase (``evo_steps`` steps)."""

    # ------------------------------------------------------------------ covariance state
    @property
    def width(self) -> int:
        """``m``: the widest hidden layer of the reward network (the papers' network width)."""
        sizes = [int(p.shape[0]) for name, p in self.net.named_parameters() if p.dim() == 2]
        return max(sizes[:-1] or sizes)

    def reset_covariance(self) -> None:
        """``Z <- lamb`` and ``theta0 <-`` the current weights, for every parameter."""
        self.covariance = {name: torch.full_like(p.detach(), self.lamb) for name, p in self.net.named_parameters()}
        self.theta0 = {name: p.detach().clone() for name, p in self.net.named_parameters()}

    def after_architecture_change(self) -> None:
        """Keep ``Z`` and ``theta0`` consistent with a mutated (or restored) network: a parameter
        whose shape is unchanged keeps its entries; a resized one keeps the entries of its
        leading corner (where growing and shrinking mutations keep the old weights) and starts
        the new ones at ``lamb`` (``Z``) and at their current weights (``theta0``); a new one
        starts fresh. The confidence already gathered about the old function is not thrown away."""
        params = dict(self.net.named_parameters())
        if {name: t.shape for name, t in self.covariance.items()} == {name: p.shape for name, p in params.items()}:
            return
        old_covariance, old_theta0 = self.covariance, self.theta0
        self.reset_covariance()
        for name, param in params.items():
            for new, old in ((self.covariance, old_covariance), (self.theta0, old_theta0)):
                before = old.get(name)
                if before is None or before.dim() != param.dim():
                    continue
                region = tuple(slice(0, min(a, b)) for a, b in zip(before.shape, param.shape, strict=True))
                new[name][region] = before[region].to(new[name].device)

    def __getstate__(self) -> dict[str, Any]:
        """Copies take their own covariance (an agent in a group holds views of the group's)."""
        state = super().__getstate__()
        state["covariance"] = {k: v.detach().clone() for k, v in self.covariance.items()}
        state["theta0"] = {k: v.detach().clone() for k, v in self.theta0.items()}
        return state

    def extra_state(self) -> dict[str, Any]:
        """The cumulative and latest-phase training regret."""
        return {"cumulative_regret": float(self.cumulative_regret), "phase_regret": float(self.phase_regret)}

    def generation_metrics(self) -> dict[str, float]:
        """Per-agent figures for a run's generation history: cumulative and latest-phase regret."""
        return {"regret": float(self.cumulative_regret), "phase_regret": float(self.phase_regret)}

    def extra_tensors(self) -> dict[str, Any]:
        """``Z`` and ``theta0`` per parameter."""
        return {"covariance": {k: v.detach().clone().contiguous() for k, v in self.covariance.items()},
                "theta0": {k: v.detach().clone().contiguous() for k, v in self.theta0.items()}}

    def load_extra_state(self, state: dict[str, Any], tensors: dict[str, Any]) -> None:
        """Restore ``Z``, ``theta0`` (checked against the restored network's shapes) and the regret."""
        self.cumulative_regret = float(state.get("cumulative_regret", 0.0))
        self.phase_regret = float(state.get("phase_regret", 0.0))
        shapes = {name: p.shape for name, p in self.net.named_parameters()}
        for key in ("covariance", "theta0"):
            saved = tensors.get(key) or {}
            if {k: tuple(v.shape) for k, v in saved.items()} != {k: tuple(s) for k, s in shapes.items()}:
                raise ValueError(f"the checkpoint's bandit {key} does not fit the restored network")
            setattr(self, key, {k: v.to(self.device, torch.float32).clone() for k, v in saved.items()})

    def population_key(self) -> str:
        """Members of a group share the number of arms."""
        return f"{super().population_key()}|{self.num_arms}"

    # ------------------------------------------------------------------ acting
    def _inputs(self, contexts: Any) -> torch.Tensor:
        x = torch.as_tensor(np.asarray(contexts, dtype=np.float32), device=self.device)
        if x.dim() != 2 or x.shape[0] != self.num_arms:
            raise ValueError(f"contexts must be [{self.num_arms}, {self.observation_space.shape[0]}] "  # type: ignore[index]
                             f"(one per arm), got {tuple(x.shape)}")
        return x

    def get_action(self, obs: Any, training: bool = True) -> int:
        """The arm to pull for contexts ``[K, D]`` (one per arm). `training` explores (the
        subclass's rule) and adds the chosen arm's gradient to ``Z``; otherwise greedy
        (``argmax f``). The ``P = 1`` case of :meth:`act_population`."""
        return int(type(self).act_population(self.solo_group(), self._inputs(obs).unsqueeze(0), training)[0])

    def predict(self, obs: Any) -> np.ndarray:
        """Predicted rewards ``[K]`` of contexts ``[K, D]``."""
        with torch.no_grad():
            return self.net(self._inputs(obs)).squeeze(-1).cpu().numpy()

    @classmethod
    def act_population(cls, group: MemberGroup, inputs: Any, training: bool = True) -> np.ndarray:
        """Arms ``[P]`` for contexts ``[P, K, D]``: one stacked forward, ``K`` stacked backward
        passes for every member's per-arm gradients, then each member's own exploration (its
        ``gamma``, ``lamb``, ``Z`` and ``rng``); with `training`, ``Z += g_a^2 / m``."""
        contexts = torch.as_tensor(inputs, dtype=torch.float32, device=group.device)
        if not training:
            with torch.no_grad():
                return group.nets["net"](contexts).squeeze(-1).argmax(dim=-1).cpu().numpy()
        state = _group_state(group)
        with PROFILER.act:
            values, grads = _values_and_gradients(group, contexts)
            spread2 = (grads * grads / state.covariance.unsqueeze(1)).sum(-1) / state.width  # [P, K]
            scores = cls.explore_scores(group, values, spread2)
            arms = scores.argmax(dim=-1)
            chosen = grads[torch.arange(len(group), device=grads.device), arms]
            state.covariance.add_(chosen * chosen / state.width)
        return arms.cpu().numpy()

    @classmethod
    def explore_scores(cls, group: MemberGroup, values: torch.Tensor, spread2: torch.Tensor) -> torch.Tensor:
        """Scores ``[P, K]`` to maximise, from predicted rewards and squared spreads ``[P, K]``."""
        raise NotImplementedError

    # ------------------------------------------------------------------ learning
    def learn(self, contexts: Any, rewards: Any) -> float:
        """One Adam step on stored pairs ``[rows, D]``, ``[rows]``; return the loss (the ``P = 1``
        case of :meth:`learn_population`)."""
        batch = BanditBatch.of_one(contexts, rewards, self.device)
        return float(type(self).learn_population(self.solo_group(), batch, [True])[0])

    @classmethod
    def learn_population(cls, group: MemberGroup, batch: BanditBatch, active: Sequence[bool]) -> list[Any]:
        """One Adam step for every active member: ``sum_rows(w * (f(x) - r)^2) + reg * ||theta -
        theta0||^2`` with its own ``reg``, learning rate and Adam state; padding rows and idle
        members change nothing. Returns each member's loss (None when idle)."""
        state = _group_state(group)
        flat = group.optimizers["optimizer"].flat
        predicted = group.nets["net"](batch.contexts).squeeze(-1)
        mse = ((predicted - batch.rewards) ** 2 * batch.weights).sum(dim=1)
        drift = sum(((param - state.theta0_view(index)) ** 2).reshape(len(group), -1).sum(dim=1)
                    for index, param in enumerate(flat.params))
        losses = mse + group.column("reg").squeeze(1) * drift
        group.step("optimizer", losses, active)
        for member, on in zip(group.members, active, strict=True):
            member.learn_counter += int(on)
        return group.finish(active, losses.detach().tolist())

    # ------------------------------------------------------------------ evaluation
    def test(self, env: Any, swap_channels: bool = False, max_steps: int | None = None, loop: int = 1) -> float:
        """Greedy fitness: the mean reward of ``argmax f`` over `max_steps` (default
        ``DEFAULT_EVAL_STEPS``) rows of `env`, times `loop`; appended to ``fitness``."""
        steps = int(max_steps or DEFAULT_EVAL_STEPS) * max(1, int(loop))
        contexts, _ = env.reset()
        total = 0.0
        for _ in range(steps):
            arm = self.get_action(contexts, training=False)
            contexts, reward, _, _ = env.step(arm)
            total += float(reward)
        fitness = total / steps
        self.fitness.append(fitness)
        return fitness


class _GroupState:
    """A group's stacked ``Z`` and ``theta0`` ``[P, D]`` in the layout of its flat parameters
    (padding: ``Z`` 1, ``theta0`` 0); the members' per-parameter tensors become views of them."""

    def __init__(self, group: MemberGroup) -> None:
        self.flat = flat = group.optimizers["optimizer"].flat
        self.covariance = torch.ones_like(flat.data)
        self.theta0 = torch.zeros_like(flat.data)
        self.width = torch.tensor([float(m.width) for m in group.members], device=flat.data.device).unsqueeze(1)
        names = [{id(p): n for n, p in m.net.named_parameters()} for m in group.members]
        pairs = list(member_parameters(group.nets["net"], [m.net for m in group.members]))
        for index, (_, targets) in enumerate(pairs):
            for row, (member, target) in enumerate(zip(group.members, targets, strict=True)):
                if target is None:
                    continue
                name, region = names[row][id(target)], corner(target.shape)
                for key in ("covariance", "theta0"):
                    stacked = flat.slice(getattr(self, key), index)[row][region]
                    stacked.copy_(getattr(member, key)[name])
                    getattr(member, key)[name] = stacked
        self.key = _state_key(group)

    def theta0_view(self, index: int) -> torch.Tensor:
        """``theta0`` shaped like flat parameter `index` (same memory order, padding included)."""
        begin, end = self.flat.spans[index]
        return self.theta0[:, begin:end].view(self.flat.params[index].shape)


def _state_key(group: MemberGroup) -> tuple[Any, ...]:
    return tuple((id(m.covariance), id(m.theta0), tuple(v.data_ptr() for v in m.covariance.values()))
                 for m in group.members)


def _group_state(group: MemberGroup) -> _GroupState:
    """The group's stacked bandit state, rebuilt when a member's ``Z`` or ``theta0`` was replaced."""
    group.check_current()
    if not group.stacked:
        raise TypeError("neural bandits need a stackable reward network (an MLP encoder)")
    state: _GroupState | None = group.__dict__.get("_bandit_state")
    if state is None or state.key != _state_key(group):
        state = _GroupState(group)
        group.__dict__["_bandit_state"] = state
    return state


def _values_and_gradients(group: MemberGroup, contexts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Predicted rewards ``[P, K]`` and their gradients ``[P, K, D]`` in the flat layout (padding 0)."""
    adam = group.optimizers["optimizer"]
    flat = adam.flat
    assert flat.grad is not None  # a trained stack always has a flat gradient
    values, grads = [], []
    with torch.enable_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="grad and param do not obey the gradient layout contract")
        for arm in range(contexts.shape[1]):  # one pass per arm (fused chains free their tape)
            flat.zero_grad()
            value = group.nets["net"](contexts[:, arm:arm + 1]).reshape(-1)
            value.sum().backward()
            adam.mask_padding()
            values.append(value.detach())
            grads.append(flat.grad.clone())
    flat.zero_grad()
    return torch.stack(values, dim=1), torch.stack(grads, dim=1)
