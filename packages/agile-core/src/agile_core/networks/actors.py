"""Policy networks: DeterministicActor (Box actions) and StochasticActor (PPO-style policies)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from agile_core.networks.distributions import (
    ActionDistribution,
    BernoulliDistribution,
    CategoricalDistribution,
    DiagGaussianDistribution,
    MultiCategoricalDistribution,
)
from agile_core.networks.encoders import as_network_spec, build_encoder
from agile_core.networks.lstm import HiddenState
from agile_core.networks.mlp import EvolvableMLP
from agile_core.networks.network import EvolvableNetwork, build_head
from agile_core.networks.preprocessing import Observation
from agile_core.specs.network import NetworkSpec

SpecLike = NetworkSpec | Mapping[str, Any] | None


def _flat_floats(values: Any) -> list[float]:
    return [float(v) for v in np.asarray(values, dtype=np.float64).ravel()]


class DeterministicActor(EvolvableNetwork):
    """Box-action policy: the head's tanh output is rescaled to ``[low, high]``.

    ``forward(obs) -> [..., *action_shape]`` actions within the bounds (which must be finite).
    """

    head: EvolvableMLP
    action_low: torch.Tensor
    action_high: torch.Tensor

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space, net_spec: SpecLike = None, *,
                 recurrent: bool = False, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        if not isinstance(action_space, spaces.Box):
            raise ValueError(f"DeterministicActor needs a Box action space, got {action_space}")
        if not (np.all(np.isfinite(action_space.low)) and np.all(np.isfinite(action_space.high))):
            raise ValueError(f"DeterministicActor needs finite action bounds, got {action_space}")
        spec = as_network_spec(net_spec)
        size = math.prod(action_space.shape)
        encoder = build_encoder(observation_space, spec, recurrent)
        head = build_head(spec, spec.latent_dim, size, output_activation="Tanh")
        self._assemble_from_spec(encoder, {"head": head}, spec)
        self._setup(action_shape=list(action_space.shape), action_low=_flat_floats(action_space.low),
                    action_high=_flat_floats(action_space.high))
        self._place(device, dtype)

    def _setup(self, **extra: Any) -> None:
        self.action_shape = tuple(int(d) for d in extra["action_shape"])
        like = self.head.output_layer.weight
        self.register_buffer("action_low", torch.tensor(extra["action_low"], device=like.device, dtype=like.dtype))
        self.register_buffer("action_high", torch.tensor(extra["action_high"], device=like.device, dtype=like.dtype))

    def _extra_config(self) -> dict[str, Any]:
        return {"action_shape": list(self.action_shape), "action_low": self.action_low.tolist(),
                "action_high": self.action_high.tolist()}

    def forward(self, obs: Observation, hidden_state: HiddenState | None = None) -> Any:
        """Actions within the bounds (plus the new hidden state when recurrent)."""
        if self.recurrent:
            latent, hidden = self.encode(obs, hidden_state)
            squashed = self.head(latent)
        else:
            squashed, hidden = self.head_of_latent(obs), None
        action = self.action_low + (squashed + 1.0) * 0.5 * (self.action_high - self.action_low)
        action = torch.minimum(torch.maximum(action, self.action_low), self.action_high)
        return self._with_hidden(action.reshape(*squashed.shape[:-1], *self.action_shape), hidden)


class StochasticActor(EvolvableNetwork):
    """Stochastic policy for Discrete (categorical), Box (diagonal Gaussian with a learnable,
    state-independent log-std initialised to ``log(action_std_init)``), MultiDiscrete and
    MultiBinary action spaces.

    ``forward(obs, action=None)`` returns ``(action, log_prob, entropy)``: it samples when
    `action` is None (the greedy/mean action when ``deterministic=True``), otherwise evaluates
    the given action. ``log_prob`` and ``entropy`` have the leading (batch) shape. Gaussian
    samples are not clipped: the caller clips them to the action bounds. ``action_mask``
    (True = allowed) applies to Discrete and MultiDiscrete logits.
    """

    head: EvolvableMLP
    log_std: nn.Parameter
    population_broadcast_parameters: ClassVar[tuple[str, ...]] = ("log_std",)
    """Stacked ``[P, 1, A]``: each member's log-std applies to all of its rows."""

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space, net_spec: SpecLike = None, *,
                 action_std_init: float = 0.6, recurrent: bool = False, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        spec = as_network_spec(net_spec)
        extra = self._describe(action_space, action_std_init)
        encoder = build_encoder(observation_space, spec, recurrent)
        head = build_head(spec, spec.latent_dim, self._head_outputs(extra))
        self._assemble_from_spec(encoder, {"head": head}, spec)
        self._setup(**extra)
        self._place(device, dtype)

    @staticmethod
    def _describe(action_space: spaces.Space, action_std_init: float) -> dict[str, Any]:
        if isinstance(action_space, spaces.Discrete):
            return {"action_kind": "discrete", "action_shape": [], "nvec": [int(action_space.n)]}
        if isinstance(action_space, spaces.MultiDiscrete):
            if action_space.nvec.ndim != 1:
                raise ValueError(f"StochasticActor supports 1-D MultiDiscrete action spaces, got {action_space}")
            return {"action_kind": "multidiscrete", "action_shape": list(action_space.shape),
                    "nvec": [int(n) for n in action_space.nvec]}
        if isinstance(action_space, spaces.MultiBinary):
            return {"action_kind": "multibinary", "action_shape": list(action_space.shape), "nvec": []}
        if isinstance(action_space, spaces.Box):
            if action_std_init <= 0:
                raise ValueError(f"action_std_init must be positive, got {action_std_init}")
            return {"action_kind": "box", "action_shape": list(action_space.shape), "nvec": [],
                    "action_std_init": float(action_std_init)}
        raise ValueError(f"StochasticActor does not support action space {action_space}")

    @staticmethod
    def _head_outputs(extra: Mapping[str, Any]) -> int:
        if extra["action_kind"] in ("discrete", "multidiscrete"):
            return int(sum(extra["nvec"]))
        return math.prod(extra["action_shape"])

    def _setup(self, **extra: Any) -> None:
        self.action_kind = str(extra["action_kind"])
        self.action_shape = tuple(int(d) for d in extra["action_shape"])
        self.nvec = [int(n) for n in extra["nvec"]]
        std_init = extra.get("action_std_init")
        self.action_std_init = None if std_init is None else float(std_init)
        if self.action_std_init is not None:
            like = self.head.output_layer.weight
            size = math.prod(self.action_shape)
            log_std = torch.full((size,), math.log(self.action_std_init), device=like.device, dtype=like.dtype)
            self.log_std = nn.Parameter(log_std)

    def _extra_config(self) -> dict[str, Any]:
        extra: dict[str, Any] = {"action_kind": self.action_kind, "action_shape": list(self.action_shape),
                                 "nvec": list(self.nvec)}
        if self.action_kind == "box":
            extra["action_std_init"] = self.action_std_init
        return extra

    def _flat_size(self) -> int:
        return math.prod(self.action_shape)

    def distribution_from_latent(self, latent: torch.Tensor, action_mask: torch.Tensor | None = None) -> ActionDistribution:
        """The action distribution for latent vectors ``[..., latent_dim]``."""
        return self.distribution_from_head(self.head(latent), action_mask)

    def distribution_from_head(self, out: torch.Tensor, action_mask: torch.Tensor | None = None) -> ActionDistribution:
        """The action distribution for the policy head's outputs ``[..., outputs]`` (logits, or
        Gaussian means for Box actions)."""
        if self.action_kind == "discrete":
            return CategoricalDistribution(out, action_mask)
        if self.action_kind == "multidiscrete":
            return MultiCategoricalDistribution(out, self.nvec, action_mask)
        if self.action_kind == "multibinary":
            return BernoulliDistribution(out)
        return DiagGaussianDistribution(out, self.log_std)

    def distribution(self, obs: Observation, action_mask: torch.Tensor | None = None,
                     hidden_state: HiddenState | None = None) -> Any:
        """The action distribution for `obs` (plus the new hidden state when recurrent)."""
        latent, hidden = self.encode(obs, hidden_state)
        return self._with_hidden(self.distribution_from_latent(latent, action_mask), hidden)

    def forward(self, obs: Observation, action: torch.Tensor | None = None, *, deterministic: bool = False,
                action_mask: torch.Tensor | None = None, hidden_state: HiddenState | None = None) -> Any:
        """``(action, log_prob, entropy)`` (plus the new hidden state when recurrent)."""
        latent, hidden = self.encode(obs, hidden_state)
        lead = latent.shape[:-1]
        dist = self.distribution_from_latent(latent, action_mask)
        flat_action = self._flatten_action(action, lead) if action is not None else (
            dist.mode() if deterministic else dist.sample()
        )
        log_prob = dist.log_prob(flat_action)
        entropy = dist.entropy()
        return self._with_hidden((self._shape_action(flat_action, lead), log_prob, entropy), hidden)

    def _flatten_action(self, action: torch.Tensor, lead: Sequence[int]) -> torch.Tensor:
        if self.action_kind == "discrete":
            return action.reshape(*lead)
        return action.reshape(*lead, self._flat_size())

    def _shape_action(self, action: torch.Tensor, lead: Sequence[int]) -> torch.Tensor:
        if self.action_kind == "discrete":
            return action
        return action.reshape(*lead, *self.action_shape)
