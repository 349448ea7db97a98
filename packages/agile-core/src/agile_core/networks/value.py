"""ValueNetwork: a state-value function V(s)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from gymnasium import spaces

from agile_core.networks.encoders import as_network_spec, build_encoder
from agile_core.networks.lstm import HiddenState
from agile_core.networks.mlp import EvolvableMLP
from agile_core.networks.network import EvolvableNetwork, build_head
from agile_core.networks.preprocessing import Observation
from agile_core.specs.network import NetworkSpec


class ValueNetwork(EvolvableNetwork):
    """``forward(obs) -> [..., 1]`` state values."""

    head: EvolvableMLP

    def __init__(self, observation_space: spaces.Space, net_spec: NetworkSpec | Mapping[str, Any] | None = None, *,
                 recurrent: bool = False, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        spec = as_network_spec(net_spec)
        encoder = build_encoder(observation_space, spec, recurrent)
        self._assemble_from_spec(encoder, {"head": build_head(spec, spec.latent_dim, 1)}, spec)
        self._setup()
        self._place(device, dtype)

    def forward(self, obs: Observation, hidden_state: HiddenState | None = None) -> Any:
        """V(obs) ``[..., 1]`` (plus the new hidden state when recurrent)."""
        latent, hidden = self.encode(obs, hidden_state)
        return self._with_hidden(self.head(latent), hidden)
