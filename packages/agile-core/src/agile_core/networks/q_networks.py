"""Q-value networks: QNetwork (DQN), RainbowQNetwork (dueling, noisy, C51), ContinuousQNetwork."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import torch
import torch.nn.functional as F
from gymnasium import spaces

from agile_core.networks.encoders import as_network_spec, build_encoder
from agile_core.networks.lstm import HiddenState
from agile_core.networks.mlp import EvolvableMLP
from agile_core.networks.network import EvolvableNetwork, build_head
from agile_core.networks.preprocessing import Observation
from agile_core.networks.spaces import action_dim
from agile_core.specs.network import NetworkSpec

SpecLike = NetworkSpec | Mapping[str, Any] | None


def _discrete_actions(action_space: spaces.Space, network: str) -> int:
    if not isinstance(action_space, spaces.Discrete):
        raise ValueError(f"{network} needs a Discrete action space, got {action_space}")
    return int(action_space.n)


class QNetwork(EvolvableNetwork):
    """Discrete-action Q network: ``forward(obs) -> [..., num_actions]`` Q values."""

    head: EvolvableMLP

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space, net_spec: SpecLike = None, *,
                 recurrent: bool = False, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        spec = as_network_spec(net_spec)
        num_actions = _discrete_actions(action_space, "QNetwork")
        encoder = build_encoder(observation_space, spec, recurrent)
        self._assemble_from_spec(encoder, {"head": build_head(spec, spec.latent_dim, num_actions)}, spec)
        self._setup(num_actions=num_actions)
        self._place(device, dtype)

    def _setup(self, **extra: Any) -> None:
        self.num_actions = int(extra["num_actions"])

    def _extra_config(self) -> dict[str, Any]:
        return {"num_actions": self.num_actions}

    def forward(self, obs: Observation, hidden_state: HiddenState | None = None) -> Any:
        """Q values ``[..., num_actions]`` (plus the new hidden state when recurrent)."""
        if not self.recurrent:
            return self.head_of_latent(obs)
        latent, hidden = self.encode(obs, hidden_state)
        return self._with_hidden(self.head(latent), hidden)


RainbowOutput = Literal["q", "probs", "log_probs"]


class RainbowQNetwork(EvolvableNetwork):
    """Rainbow DQN network: dueling value/advantage heads with NoisyLinear output layers and a
    C51 categorical return distribution over `num_atoms` atoms spanning ``[v_min, v_max]``.

    ``forward(obs, output="q")`` gives Q values ``[..., A]``; ``"probs"``/``"log_probs"`` give
    the distribution ``[..., A, num_atoms]``. Heads are named ``advantage`` and ``value``.
    """

    head_names: ClassVar[tuple[str, ...]] = ("advantage", "value")
    advantage: EvolvableMLP
    value: EvolvableMLP
    support: torch.Tensor

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space, net_spec: SpecLike = None, *,
                 num_atoms: int = 51, v_min: float = -10.0, v_max: float = 10.0, noise_std: float = 0.5,
                 recurrent: bool = False, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        spec = as_network_spec(net_spec)
        num_actions = _discrete_actions(action_space, "RainbowQNetwork")
        encoder = build_encoder(observation_space, spec, recurrent)
        noisy = {"noisy_output": True, "noise_std": noise_std}
        heads = {
            "advantage": build_head(spec, spec.latent_dim, num_actions * num_atoms, **noisy),
            "value": build_head(spec, spec.latent_dim, num_atoms, **noisy),
        }
        self._assemble_from_spec(encoder, heads, spec)
        self._setup(num_actions=num_actions, num_atoms=num_atoms, v_min=v_min, v_max=v_max)
        self._place(device, dtype)

    def _setup(self, **extra: Any) -> None:
        self.num_actions = int(extra["num_actions"])
        self.num_atoms = int(extra["num_atoms"])
        self.v_min, self.v_max = float(extra["v_min"]), float(extra["v_max"])
        if self.num_atoms < 2 or not self.v_min < self.v_max:
            raise ValueError(f"need num_atoms >= 2 and v_min < v_max (got {self.num_atoms}, {self.v_min}, {self.v_max})")
        like = self.value.output_layer.weight
        support = torch.linspace(self.v_min, self.v_max, self.num_atoms, device=like.device, dtype=like.dtype)
        self.register_buffer("support", support)

    def _extra_config(self) -> dict[str, Any]:
        return {"num_actions": self.num_actions, "num_atoms": self.num_atoms, "v_min": self.v_min, "v_max": self.v_max}

    def forward(self, obs: Observation, output: RainbowOutput = "q", hidden_state: HiddenState | None = None) -> Any:
        """Q values, or the atom probabilities / log-probabilities per action (plus hidden when recurrent)."""
        advantage, value, hidden = self._dueling(obs, hidden_state)
        logits = advantage + value
        if output == "log_probs":
            result = F.log_softmax(logits, dim=-1)
        elif output == "probs":
            result = F.softmax(logits, dim=-1)
        elif output == "q":
            result = F.softmax(logits, dim=-1) @ self.support
        else:
            raise ValueError(f"output must be 'q', 'probs' or 'log_probs', got {output!r}")
        return self._with_hidden(result, hidden)

    def action_distribution(self, obs: Observation, actions: torch.Tensor, log: bool = False) -> torch.Tensor:
        """The return distribution ``[..., num_atoms]`` of one action per row (`actions` ``[...]``,
        0-based; a feed-forward network): its probabilities, or log-probabilities with `log`. The
        same numbers as ``forward(obs, "probs")`` at those actions, with the softmax taken for
        them alone."""
        advantage, value, _ = self._dueling(obs, None)
        index = actions.long()[..., None, None].expand(*actions.shape, 1, self.num_atoms)
        logits = advantage.gather(-2, index) + value
        return (F.log_softmax(logits, dim=-1) if log else F.softmax(logits, dim=-1)).squeeze(-2)

    def _dueling(self, obs: Observation, hidden_state: HiddenState | None) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """The advantage head's output ``[..., A, num_atoms]`` and the value head's less the mean
        advantage ``[..., 1, num_atoms]`` (their sum: the logits), and the recurrent hidden state
        (None otherwise)."""
        if self.recurrent:
            latent, hidden = self.encode(obs, hidden_state)
            advantage_out, value_out = self.advantage(latent), self.value(latent)
        else:
            advantage_out, value_out = self.heads_of_latent(obs, ("advantage", "value"))
            hidden = None
        lead = value_out.shape[:-1]
        advantage = advantage_out.reshape(*lead, self.num_actions, self.num_atoms)
        value = torch.sub(value_out.reshape(*lead, 1, self.num_atoms), advantage.sum(dim=-2, keepdim=True),
                          alpha=1.0 / self.num_actions)
        return advantage, value, hidden


class ContinuousQNetwork(EvolvableNetwork):
    """Critic for Box actions: ``forward(obs, action) -> [..., 1]``; the head reads the latent
    vector followed by the flattened action."""

    head: EvolvableMLP
    stacking_sizes: ClassVar[tuple[str, ...]] = ("latent_dim",)
    """Stacked critics need one latent width: the action columns follow the latent ones."""

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space, net_spec: SpecLike = None, *,
                 recurrent: bool = False, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        spec = as_network_spec(net_spec)
        size = action_dim(action_space)
        encoder = build_encoder(observation_space, spec, recurrent)
        self._assemble_from_spec(encoder, {"head": build_head(spec, spec.latent_dim + size, 1)}, spec)
        self._setup(action_dim=size)
        self._place(device, dtype)

    def _setup(self, **extra: Any) -> None:
        self.action_dim = int(extra["action_dim"])

    def _extra_config(self) -> dict[str, Any]:
        return {"action_dim": self.action_dim}

    def forward(self, obs: Observation, action: torch.Tensor, hidden_state: HiddenState | None = None) -> Any:
        """Q(obs, action) ``[..., 1]`` (plus the new hidden state when recurrent)."""
        latent, hidden = self.encode(obs, hidden_state)
        action = action.reshape(*latent.shape[:-1], self.action_dim).to(latent.dtype)
        return self._with_hidden(self.head(torch.cat([latent, action], dim=-1)), hidden)
