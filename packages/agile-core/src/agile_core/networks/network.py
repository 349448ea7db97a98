"""EvolvableNetwork: an encoder whose latent vector feeds one or more MLP heads.

Mutations cover every part: ``"encoder.<m>"``, ``"<head>.<m>"`` (e.g. ``"head.add_layer"``),
and the latent size itself (``add_latent_node``/``remove_latent_node`` within
``[min_latent_dim, max_latent_dim]``; growth is function-preserving: the new latent units get
zero weights in every head).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Self

import numpy as np
import torch
from torch import nn

from agile_core.networks.base import EvolvableModule, from_config, mutation, torch_generator
from agile_core.networks.encoders import Encoder
from agile_core.networks.lstm import EvolvableLSTM, HiddenState
from agile_core.networks.mlp import EvolvableMLP
from agile_core.networks.noisy import NoisyLinear
from agile_core.networks.preprocessing import Observation
from agile_core.networks.resize import overlap
from agile_core.networks.sampling import LATENT_CHOICES, resolve_count
from agile_core.specs.network import MlpConfig, NetworkSpec


def build_head(spec: NetworkSpec, num_inputs: int, num_outputs: int, **overrides: Any) -> EvolvableMLP:
    """An MLP head from ``spec.head_config`` (defaults when null); outputs are raw (no activation)
    unless `overrides` say otherwise."""
    config = spec.head_config if spec.head_config is not None else MlpConfig()
    return EvolvableMLP.from_spec(config, num_inputs, num_outputs, **{"output_activation": None, **overrides})


class EvolvableNetwork(EvolvableModule):
    """Base of the RL networks: ``encoder`` -> latent ``[..., latent_dim]`` -> heads.

    Subclasses list their head attribute names in ``head_names``, build their parts in
    ``__init__`` and finish with ``self._assemble(...)`` then ``self._setup(**extra)``, where
    `extra` is exactly what ``_extra_config()`` returns (so ``from_config`` can rebuild them).
    A head's inputs are the latent vector first, then any extra inputs (e.g. the action).
    With a recurrent (LSTM) encoder, forward methods take ``hidden_state`` and return the new
    hidden state as their last output.
    """

    head_names: ClassVar[tuple[str, ...]] = ("head",)
    encoder: Encoder

    def _assemble(self, encoder: Encoder, heads: Mapping[str, EvolvableMLP], latent_dim: int,
                  min_latent_dim: int, max_latent_dim: int) -> None:
        if not min_latent_dim <= latent_dim <= max_latent_dim:
            raise ValueError(f"latent_dim {latent_dim} is outside [{min_latent_dim}, {max_latent_dim}]")
        if encoder.num_outputs != latent_dim:
            raise ValueError(f"encoder produces {encoder.num_outputs} features, latent_dim is {latent_dim}")
        self.encoder = encoder
        for name in self.head_names:
            self.add_module(name, heads[name])
        self.latent_dim = int(latent_dim)
        self.min_latent_dim = int(min_latent_dim)
        self.max_latent_dim = int(max_latent_dim)

    def _assemble_from_spec(self, encoder: Encoder, heads: Mapping[str, EvolvableMLP], spec: NetworkSpec) -> None:
        self._assemble(encoder, heads, spec.latent_dim, spec.min_latent_dim, spec.max_latent_dim)

    def _setup(self, **extra: Any) -> None:
        """Create what the subclass needs beyond encoder and heads (buffers, parameters)."""

    def _extra_config(self) -> dict[str, Any]:
        return {}

    def _place(self, device: torch.device | str | None, dtype: torch.dtype | None) -> None:
        if device is not None or dtype is not None:
            self.to(device=device, dtype=dtype)

    def heads(self) -> dict[str, EvolvableMLP]:
        """The heads by name."""
        return {name: getattr(self, name) for name in self.head_names}

    # ------------------------------------------------------------------ config round-trip
    def _config_body(self) -> dict[str, Any]:
        return {
            "latent_dim": self.latent_dim,
            "min_latent_dim": self.min_latent_dim,
            "max_latent_dim": self.max_latent_dim,
            "encoder": self.encoder.config,
            "heads": {name: head.config for name, head in self.heads().items()},
            **self._extra_config(),
        }

    @classmethod
    def _build_from_config(cls, body: dict[str, Any]) -> Self:
        network = cls.__new__(cls)
        nn.Module.__init__(network)
        encoder = from_config(body.pop("encoder"))
        heads = {name: from_config(cfg) for name, cfg in body.pop("heads").items()}
        network._assemble(encoder, heads, body.pop("latent_dim"), body.pop("min_latent_dim"),  # type: ignore[arg-type]
                          body.pop("max_latent_dim"))
        network._setup(**body)
        return network

    def _delegates(self) -> dict[str, list[EvolvableModule]]:
        return {"encoder": [self.encoder], **{name: [head] for name, head in self.heads().items()}}

    # ------------------------------------------------------------------ running
    @property
    def recurrent(self) -> bool:
        """Whether the encoder is an LSTM (forward takes and returns a hidden state)."""
        return isinstance(self.encoder, EvolvableLSTM)

    def initial_hidden_state(self, batch_size: int) -> HiddenState:
        """Zero hidden state of a recurrent network for `batch_size` sequences."""
        if not isinstance(self.encoder, EvolvableLSTM):
            raise ValueError(f"{type(self).__name__} is not recurrent")
        return self.encoder.initial_hidden_state(batch_size)

    def encode(self, obs: Observation, hidden_state: HiddenState | None = None) -> tuple[torch.Tensor, HiddenState | None]:
        """The latent vector of `obs` (and the new hidden state, None unless recurrent)."""
        if isinstance(self.encoder, EvolvableLSTM):
            assert isinstance(obs, torch.Tensor)
            return self.encoder(obs, hidden_state)
        return self.encoder(obs), None

    def head_of_latent(self, obs: Observation, head: str = "head") -> torch.Tensor:
        """``head(encoder(obs))`` for a feed-forward network; a stacked network whose encoder and
        head fuse runs them as one chain (see :func:`~agile_core.networks.fused.fuse_stacked_mlps`)."""
        chain = self.__dict__.get("agile_fused_heads", {}).get(head)
        if chain is not None:
            return chain(obs)
        return getattr(self, head)(self.encode(obs)[0])

    def heads_of_latent(self, obs: Observation, heads: Sequence[str] | None = None) -> tuple[torch.Tensor, ...]:
        """Each of `heads` (all ``head_names`` when None) on ``encoder(obs)`` of a feed-forward
        network, the encoder run once; a stacked network whose encoder and heads fuse runs them as
        one autograd function (see :class:`~agile_core.networks.fused.FusedHeads`)."""
        names = tuple(self.head_names if heads is None else heads)
        tree = self.__dict__.get("agile_fused_tree")
        if tree is not None and names == self.head_names:
            return tree(obs)
        latent = self.encode(obs)[0]
        return tuple(getattr(self, name)(latent) for name in names)

    def _with_hidden(self, outputs: Any, hidden: HiddenState | None) -> Any:
        """Append the hidden state to the outputs of a recurrent network."""
        if not self.recurrent:
            return outputs
        if isinstance(outputs, tuple):
            return (*outputs, hidden)
        return outputs, hidden

    def reset_noise(self) -> None:
        """Draw fresh noise in every NoisyLinear layer (no-op without any)."""
        for module in self.modules():
            if isinstance(module, NoisyLinear):
                module.reset_noise()

    # ------------------------------------------------------------------ latent mutations
    def _resize_latent(self, new_dim: int, generator: torch.Generator | None) -> None:
        old = self.latent_dim
        latent_map = overlap(old, new_dim)
        self.encoder.set_num_outputs(new_dim, generator)
        for head in self.heads().values():
            extra = head.num_inputs - old
            head.remap_inputs(latent_map + [old + j for j in range(extra)], generator)
        self.latent_dim = new_dim

    @mutation("node", available=lambda self: self.latent_dim < self.max_latent_dim)
    def add_latent_node(self, numb_new_nodes: int | None = None, *, rng: np.random.Generator) -> dict[str, Any]:
        """Grow the latent vector by `numb_new_nodes` (function-preserving)."""
        count = resolve_count(numb_new_nodes, self.max_latent_dim - self.latent_dim, LATENT_CHOICES, rng,
                              "numb_new_nodes")
        self._resize_latent(self.latent_dim + count, torch_generator(rng))
        return {"numb_new_nodes": count}

    @mutation("node", available=lambda self: self.latent_dim > self.min_latent_dim)
    def remove_latent_node(self, numb_nodes: int | None = None, *, rng: np.random.Generator) -> dict[str, Any]:
        """Shrink the latent vector by `numb_nodes` (the leading units and their weights survive)."""
        count = resolve_count(numb_nodes, self.latent_dim - self.min_latent_dim, LATENT_CHOICES, rng, "numb_nodes")
        self._resize_latent(self.latent_dim - count, None)
        return {"numb_nodes": count}
