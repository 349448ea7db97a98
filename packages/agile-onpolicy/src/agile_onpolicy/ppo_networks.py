"""PPO's networks: the shared actor-critic and how an agent's actor and critic are built."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from gymnasium import spaces

from agile_core.networks import (
    EvolvableMLP,
    EvolvableModule,
    EvolvableNetwork,
    StochasticActor,
    ValueNetwork,
    as_network_spec,
    build_encoder,
)
from agile_core.networks.network import build_head
from agile_core.specs.network import NetworkSpec

__all__ = ["SharedActorCritic", "build_networks"]


class SharedActorCritic(StochasticActor):
    """A :class:`StochasticActor` with a value head on the same encoder latent.

    ``forward`` behaves as the actor's; :meth:`value` gives ``V(obs)`` ``[...]`` (plus the new
    hidden state when recurrent). The value head is an ordinary head, so latent-size mutations
    remap it together with the policy head and ``"value_head.<m>"`` mutations change it alone.
    """

    head_names: ClassVar[tuple[str, ...]] = ("head", "value_head")
    value_head: EvolvableMLP

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space,
                 net_spec: NetworkSpec | Mapping[str, Any] | None = None, *, action_std_init: float = 0.6,
                 recurrent: bool = False, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None) -> None:
        EvolvableNetwork.__init__(self)
        spec = as_network_spec(net_spec)
        extra = self._describe(action_space, action_std_init)
        encoder = build_encoder(observation_space, spec, recurrent)
        heads = {
            "head": build_head(spec, spec.latent_dim, self._head_outputs(extra)),
            "value_head": build_head(spec, spec.latent_dim, 1),
        }
        self._assemble_from_spec(encoder, heads, spec)
        self._setup(**extra)
        self._place(device, dtype)

    def value(self, obs: Any, hidden_state: Any = None) -> Any:
        """State values ``[...]`` (plus the new hidden state when recurrent)."""
        latent, hidden = self.encode(obs, hidden_state)
        return self._with_hidden(self.value_head(latent).squeeze(-1), hidden)


def build_networks(observation_space: spaces.Space, action_space: spaces.Space, net_config: Any, *,
                   share_encoders: bool, recurrent: bool, action_std_init: float, seed: int | None,
                   actor_network: EvolvableModule | None,
                   critic_network: EvolvableModule | None) -> tuple[StochasticActor, ValueNetwork | None]:
    """A PPO agent's actor and, without shared encoders, its critic: built from `net_config`
    (initialised from `seed` when given, torch's global generator left as it was) or clones of
    the given networks, which must match `share_encoders` and `recurrent` (ValueError)."""
    expected = SharedActorCritic if share_encoders else StochasticActor
    if actor_network is not None and not isinstance(actor_network, expected):
        raise ValueError(f"actor_network must be a {expected.__name__} when share_encoders="
                         f"{share_encoders}, got {type(actor_network).__name__}")
    if share_encoders and critic_network is not None:
        raise ValueError("critic_network cannot be given with share_encoders=True: the value head "
                         "lives on the actor's SharedActorCritic")
    if critic_network is not None and not isinstance(critic_network, ValueNetwork):
        raise ValueError(f"critic_network must be a ValueNetwork, got {type(critic_network).__name__}")
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(seed)
        kwargs: dict[str, Any] = {"action_std_init": action_std_init, "recurrent": recurrent}
        actor = actor_network.clone() if actor_network is not None else expected(
            observation_space, action_space, net_config, **kwargs)
        critic = None
        if not share_encoders:
            critic = critic_network.clone() if critic_network is not None else ValueNetwork(
                observation_space, net_config, recurrent=recurrent)
    for name, network in (("actor_network", actor), ("critic_network", critic)):
        if network is not None and network.recurrent != recurrent:
            raise ValueError(f"{name} is {'' if network.recurrent else 'not '}recurrent but "
                             f"recurrent={recurrent}")
    return actor, critic
