"""The recurrent state of PPO's LSTM encoders, for one agent and for a group of members.

An agent's state is ``{"actor": (h, c)[, "critic": (h, c)]}``, each tensor ``[num_layers,
num_envs, hidden_state_size]``. A group's state has a leading member axis, ``[P, num_layers,
rows, H]``: members with LSTMs of different sizes stack padded to the deepest and widest.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

import torch

from agile_core.algorithms.group import MemberGroup
from agile_core.networks import EvolvableLSTM, EvolvableNetwork
from agile_core.training.tensor_tree import map_tree

if TYPE_CHECKING:
    from agile_onpolicy.ppo import PPO

__all__ = [
    "HiddenStates",
    "fit_hidden",
    "fit_state",
    "hidden_state_shapes",
    "lstm_encoders",
    "mask_hidden",
    "member_axis",
    "member_hidden",
    "population_hidden",
    "recurrent_networks",
    "zero_hidden",
]

HiddenStates = dict[str, tuple[torch.Tensor, torch.Tensor]]
"""Recurrent state of a PPO agent: ``{"actor": (h, c)[, "critic": (h, c)]}``, each tensor
``[num_layers, num_envs, hidden_state_size]``."""


def fit_state(tensor: torch.Tensor, num_layers: int, size: int) -> torch.Tensor:
    """Pad with zeros or cut an LSTM state ``[layers, B, H]`` to ``[num_layers, B, size]``."""
    if tensor.shape[0] == num_layers and tensor.shape[2] == size:
        return tensor
    out = tensor.new_zeros((num_layers, tensor.shape[1], size))
    layers, width = min(num_layers, tensor.shape[0]), min(size, tensor.shape[2])
    out[:layers, :, :width] = tensor[:layers, :, :width]
    return out


def member_axis(hidden: HiddenStates | None, add: bool) -> HiddenStates | None:
    """A recurrent state with a leading member axis of 1 added (`add`) or removed."""
    if hidden is None:
        return None
    return map_tree(lambda leaf: leaf.unsqueeze(0) if add else leaf.squeeze(0), hidden)


def lstm_encoders(agent: PPO) -> dict[str, EvolvableLSTM]:
    """The agent's LSTM encoders ``{"actor"[, "critic"]}`` (ValueError when it is not recurrent)."""
    names = {"actor": agent.actor} if agent.share_encoders else {"actor": agent.actor, "critic": agent.critic}
    encoders = {name: net.encoder for name, net in names.items()}
    if not all(isinstance(e, EvolvableLSTM) for e in encoders.values()):
        raise ValueError("this PPO agent is not recurrent")
    return encoders  # type: ignore[return-value]


def hidden_state_shapes(lstms: Mapping[str, EvolvableLSTM], num_envs: int) -> dict[str, Any]:
    """``{name: (shape, shape)}`` with ``shape = (num_layers, num_envs, hidden_state_size)``."""
    shapes: dict[str, Any] = {}
    for name, lstm in lstms.items():
        shape = (lstm.num_layers, int(num_envs), lstm.hidden_state_size)
        shapes[name] = (shape, shape)
    return shapes


def zero_hidden(lstms: Mapping[str, EvolvableLSTM], num_envs: int) -> HiddenStates:
    """Zero state of `lstms` for `num_envs` sub-envs."""
    return {name: lstm.initial_hidden_state(num_envs) for name, lstm in lstms.items()}


def fit_hidden(lstms: Mapping[str, EvolvableLSTM], hidden: HiddenStates) -> HiddenStates:
    """`hidden` padded with zeros / cut to the sizes of `lstms` (unchanged leaves when they fit)."""
    fitted: HiddenStates = {}
    for name, lstm in lstms.items():
        h, c = hidden[name]
        fitted[name] = (fit_state(h, lstm.num_layers, lstm.hidden_state_size),
                        fit_state(c, lstm.num_layers, lstm.hidden_state_size))
    return fitted


def mask_hidden(hidden: HiddenStates, reset: Any) -> HiddenStates:
    """`hidden` with the state of the sub-envs where `reset` (``[num_envs]`` bool) is True zeroed."""
    keep: torch.Tensor | None = None
    masked: HiddenStates = {}
    for name, (h, c) in hidden.items():
        if keep is None:
            keep = (~torch.as_tensor(reset, dtype=torch.bool, device=h.device)).to(h.dtype)[None, :, None]
        masked[name] = (h * keep, c * keep)
    return masked


def recurrent_networks(group: MemberGroup) -> dict[str, EvolvableNetwork]:
    """A stacked group's networks with LSTM encoders: ``{"actor"[, "critic"]}``."""
    return {name: cast(EvolvableNetwork, group.nets[name]) for name in ("actor", "critic") if name in group.nets}


def population_hidden(group: MemberGroup, rows: int) -> HiddenStates:
    """Zero state of a recurrent group's members for `rows` sub-envs, leaves ``[P, layers, rows, H]``."""
    if not group.stacked:
        return cast(HiddenStates, member_axis(cast("PPO", group.members[0]).initial_hidden(rows), add=True))
    return {name: cast(EvolvableLSTM, net.encoder).initial_hidden_state(rows)
            for name, net in recurrent_networks(group).items()}


def member_hidden(group: MemberGroup, hidden: Mapping[str, tuple[Any, Any]]) -> list[dict[str, tuple[Any, Any]]]:
    """A group's state ``[P, layers, rows, H]`` as each member's ``[layers, rows, H_p]`` (views)."""
    cut: list[dict[str, tuple[Any, Any]]] = []
    for slot, member in enumerate(group.members):
        lstms = lstm_encoders(cast("PPO", member))
        cut.append({name: tuple(leaf[slot, :lstms[name].num_layers, :, :lstms[name].hidden_state_size]
                                for leaf in pair) for name, pair in hidden.items()})
    return cut
