"""EvolvableLSTM: a recurrent encoder whose hidden-state size and depth can mutate."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np
import torch
from torch import nn

from agile_core.networks.activations import check_activation, make_activation
from agile_core.networks.base import EvolvableModule, mutation, torch_generator
from agile_core.networks.resize import (
    IndexMap,
    gate_blocks,
    global_rng_untouched,
    grown,
    kept,
    new_units,
    overlap,
    remap,
    resize_linear,
    uniform,
)
from agile_core.networks.sampling import NODE_CHOICES, resolve_count
from agile_core.specs.network import LstmConfig

HiddenState = tuple[torch.Tensor, torch.Tensor]
"""``(h, c)``, each ``[num_layers, batch, hidden_state_size]``."""


class LstmLayer(nn.Module):
    """One single-layer ``nn.LSTM``; a residual layer computes ``x + gate * lstm(x)`` (gate starts at 0)."""

    def __init__(self, input_size: int, hidden_size: int, residual: bool = False, *,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        if residual and input_size != hidden_size:
            raise ValueError(f"a residual LSTM layer needs input size == hidden size ({input_size} != {hidden_size})")
        self.lstm = nn.LSTM(input_size, hidden_size, batch_first=True, device=device, dtype=dtype)
        self.residual = residual
        if residual:
            self.gate = nn.Parameter(torch.zeros((), device=device, dtype=dtype))

    @property
    def hidden_size(self) -> int:
        """Size of the hidden and cell state."""
        return int(self.lstm.hidden_size)

    @property
    def input_size(self) -> int:
        """Features read per time step."""
        return int(self.lstm.input_size)

    def forward(self, x: torch.Tensor, state: HiddenState) -> tuple[torch.Tensor, HiddenState]:
        """Run over ``[B, T, input]``; return outputs ``[B, T, hidden]`` and the final ``(h, c)``."""
        out, new_state = self.lstm(x, state)
        if self.residual:
            out = x + self.gate * out
        return out, new_state

    def reinitialise(self, generator: torch.Generator | None) -> None:
        """Default LSTM init (U(-1/sqrt(H), 1/sqrt(H))) drawn from `generator`."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        with torch.no_grad():
            for param in self.lstm.parameters():
                param.copy_(uniform(param.shape, bound, param, generator))

    def resize(self, in_map: IndexMap, hidden_map: IndexMap, generator: torch.Generator | None = None) -> None:
        """Resize inputs and hidden units, keeping surviving weights.

        Weights from new inputs and from new hidden units are zero, so the old units compute
        exactly what they did; new units get default random weights.
        """
        old_hidden = self.hidden_size
        new_hidden = len(hidden_map)
        rows = gate_blocks(hidden_map, old_hidden)
        old = self.lstm
        like = cast(torch.Tensor, old.weight_ih_l0)
        bound = 1.0 / math.sqrt(new_hidden)
        new = nn.LSTM(len(in_map), new_hidden, batch_first=True, device="meta", dtype=like.dtype)
        new = new.to_empty(device=like.device)  # no default init: every value is set below
        columns = {"weight_ih_l0": in_map, "weight_hh_l0": hidden_map}
        with torch.no_grad():
            for name, param in new.named_parameters():
                value = getattr(old, name)
                if name in columns:
                    value = remap(value, 1, columns[name])
                fill = uniform(param.shape, bound, like, generator) if new_units(rows) else None
                param.copy_(remap(value, 0, rows, fill))
        new.flatten_parameters()
        self.lstm = new


def _run_member_layer(layer: LstmLayer, y: torch.Tensor, state: HiddenState,
                      starts: torch.Tensor | None) -> tuple[torch.Tensor, HiddenState]:
    """One member layer over ``[B, T, in]``, the state zeroed before each step flagged in `starts`
    (``[B, T]``): the sequence is cut only where some sequence restarts, so a batch without
    restarts is one ``nn.LSTM`` call."""
    steps = y.shape[1]
    if starts is None:
        return layer(y, state)
    cuts = [0, *sorted({int(t) for t in starts[:, 1:].any(dim=0).nonzero().flatten() + 1}), steps]
    h, c = state
    outputs = []
    for begin, end in itertools.pairwise(cuts):
        keep = (~starts[:, begin]).to(h.dtype)[None, :, None]
        out, (h, c) = layer(y[:, begin:end], (h * keep, c * keep))
        outputs.append(out)
    return torch.cat(outputs, dim=1), (h, c)


class EvolvableLSTM(EvolvableModule):
    """Stacked LSTM -> Linear(num_outputs) -> activation?, for recurrent policies.

    ``forward(x, hidden_state)`` takes ``[B, T, *input_shape]`` (or ``[B, *input_shape]`` for one
    step) and returns features ``[B, T, num_outputs]`` (``[B, num_outputs]``) and the new
    ``(h, c)``. Mutations: ``add_node``/``remove_node`` (hidden-state size of every layer, node),
    ``add_layer``/``remove_layer`` (top of the stack, layer). New hidden units have zero outgoing
    weights; new layers are residual with a zero gate, so growth is function-preserving (for a
    zero initial state; after a mutation old hidden states no longer fit, start from zeros).
    """

    def __init__(
        self,
        num_inputs: int,
        num_outputs: int,
        hidden_state_size: int = 64,
        num_layers: int = 1,
        min_hidden_state_size: int = 8,
        max_hidden_state_size: int = 256,
        min_num_layers: int = 1,
        max_num_layers: int = 3,
        *,
        residual: Sequence[bool] | None = None,
        output_activation: str | None = None,
        input_shape: Sequence[int] | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if not min_hidden_state_size <= hidden_state_size <= max_hidden_state_size:
            raise ValueError(f"hidden_state_size {hidden_state_size} is outside "
                             f"[{min_hidden_state_size}, {max_hidden_state_size}]")
        if not min_num_layers <= num_layers <= max_num_layers:
            raise ValueError(f"num_layers {num_layers} is outside [{min_num_layers}, {max_num_layers}]")
        check_activation(output_activation, allow_none=True)
        flags = [False] * num_layers if residual is None else [bool(r) for r in residual]
        if len(flags) != num_layers or flags[0]:
            raise ValueError("residual needs one flag per layer and the first layer cannot be residual")
        self.input_shape = (int(num_inputs),) if input_shape is None else tuple(int(d) for d in input_shape)
        if math.prod(self.input_shape) != num_inputs:
            raise ValueError(f"input_shape {self.input_shape} does not hold num_inputs={num_inputs} values")
        self.num_inputs = int(num_inputs)
        self.num_outputs = int(num_outputs)
        self.output_activation = output_activation
        self.min_hidden_state_size, self.max_hidden_state_size = int(min_hidden_state_size), int(max_hidden_state_size)
        self.min_num_layers, self.max_num_layers = int(min_num_layers), int(max_num_layers)
        self.layers = nn.ModuleList(
            LstmLayer(self.num_inputs if i == 0 else hidden_state_size, hidden_state_size, flags[i],
                      device=device, dtype=dtype)
            for i in range(num_layers)
        )
        self.output_layer = nn.Linear(hidden_state_size, self.num_outputs, device=device, dtype=dtype)
        self.output_act = make_activation(output_activation, device=device, dtype=dtype)

    @classmethod
    def from_spec(cls, spec: LstmConfig | Mapping[str, Any], num_inputs: int, num_outputs: int,
                  **overrides: Any) -> EvolvableLSTM:
        """Build from an :class:`LstmConfig` (or its dict); `overrides` replace constructor arguments."""
        config = spec if isinstance(spec, LstmConfig) else LstmConfig.model_validate(dict(spec))
        kwargs = config.model_dump(exclude={"arch"})
        kwargs.update(overrides)
        return cls(num_inputs, num_outputs, **kwargs)

    population_axis = False
    """True on a stacked copy (:func:`~agile_core.networks.stacked.stack_modules`), whose inputs
    and states carry a leading member axis."""

    stack_alone = False
    """A single LSTM runs faster through ``nn.LSTM``'s own kernel than as a stack of one."""

    @property
    def stack(self) -> list[LstmLayer]:
        """The LSTM layers, bottom first."""
        return list(self.layers)  # type: ignore[arg-type]

    @property
    def hidden_state_size(self) -> int:
        """Size of every layer's hidden and cell state."""
        return self.stack[0].hidden_size

    @property
    def num_layers(self) -> int:
        """Stacked layers."""
        return len(self.layers)

    def _config_body(self) -> dict[str, Any]:
        return {
            "num_inputs": self.num_inputs,
            "num_outputs": self.num_outputs,
            "hidden_state_size": self.hidden_state_size,
            "num_layers": self.num_layers,
            "min_hidden_state_size": self.min_hidden_state_size,
            "max_hidden_state_size": self.max_hidden_state_size,
            "min_num_layers": self.min_num_layers,
            "max_num_layers": self.max_num_layers,
            "residual": [layer.residual for layer in self.stack],
            "output_activation": self.output_activation,
            "input_shape": list(self.input_shape),
        }

    def initial_hidden_state(self, batch_size: int, device: torch.device | str | None = None,
                             dtype: torch.dtype | None = None) -> HiddenState:
        """Zero ``(h, c)`` for `batch_size` sequences (on the module's device/dtype by default)."""
        like = self.output_layer.weight
        members = tuple(like.shape[:1]) if self.population_axis else ()  # a stacked copy: [P, ...]
        shape = (*members, self.num_layers, batch_size, self.hidden_state_size)
        device = like.device if device is None else device
        dtype = like.dtype if dtype is None else dtype
        return torch.zeros(shape, device=device, dtype=dtype), torch.zeros(shape, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor, hidden_state: HiddenState | None = None,
                starts: torch.Tensor | None = None) -> tuple[torch.Tensor, HiddenState]:
        """Encode a sequence (or one step); return features and the new hidden state.

        `starts` (``[B, T]`` bool, sequences only) zeroes the state before the steps where an
        episode begins. Stacked (:attr:`population_axis`), every argument and output has a
        leading member axis: ``x`` ``[P, B, T, ...]``, ``(h, c)`` ``[P, num_layers, B, H]``."""
        lead = 1 if self.population_axis else 0
        extra = x.dim() - lead - len(self.input_shape)
        if extra not in (1, 2):
            raise ValueError(f"expected [B, T, *{self.input_shape}] or [B, *{self.input_shape}]"
                             f"{' with a leading member axis' if lead else ''}, got {tuple(x.shape)}")
        outer = tuple(x.shape[:lead])
        batch = x.shape[lead]
        steps = x.shape[lead + 1] if extra == 2 else 1
        y = x.reshape(*outer, batch, steps, self.num_inputs)
        if hidden_state is None:
            zeros = y.new_zeros(*outer, self.num_layers, batch, self.hidden_state_size)
            hidden_state = (zeros, zeros)
        h0, c0 = hidden_state
        hs, cs = [], []
        for i, layer in enumerate(self.stack):
            state = (h0.narrow(lead, i, 1).contiguous(), c0.narrow(lead, i, 1).contiguous())
            if lead:
                y, (h, c) = layer(y, state, starts)
            else:
                y, (h, c) = _run_member_layer(layer, y, state, starts)
            hs.append(h)
            cs.append(c)
        features = self.output_act(self.output_layer(y))
        if extra == 1:
            features = features.select(lead + 1, 0)
        if len(hs) == 1:
            return features, (hs[0], cs[0])
        return features, (torch.cat(hs, dim=lead), torch.cat(cs, dim=lead))

    def set_num_outputs(self, num_outputs: int, generator: torch.Generator | None = None) -> None:
        """Resize the output projection, keeping the leading outputs."""
        self.output_layer = resize_linear(self.output_layer, kept(self.hidden_state_size),
                                          overlap(self.num_outputs, num_outputs), generator=generator)
        self.num_outputs = int(num_outputs)

    def _resize_hidden(self, hidden_map: IndexMap, generator: torch.Generator | None) -> None:
        for i, layer in enumerate(self.stack):
            in_map = kept(self.num_inputs) if i == 0 else hidden_map
            layer.resize(in_map, hidden_map, generator)
        self.output_layer = resize_linear(self.output_layer, hidden_map, kept(self.num_outputs), generator=generator)

    # ------------------------------------------------------------------ mutations
    @mutation("node", available=lambda self: self.hidden_state_size < self.max_hidden_state_size)
    def add_node(self, numb_new_nodes: int | None = None, *, rng: np.random.Generator) -> dict[str, Any]:
        """Grow the hidden state of every layer by `numb_new_nodes` units (function-preserving)."""
        size = self.hidden_state_size
        count = resolve_count(numb_new_nodes, self.max_hidden_state_size - size, NODE_CHOICES, rng, "numb_new_nodes")
        self._resize_hidden(grown(size, count), torch_generator(rng))
        return {"numb_new_nodes": count}

    @mutation("node", available=lambda self: self.hidden_state_size > self.min_hidden_state_size)
    def remove_node(self, numb_nodes: int | None = None, *, rng: np.random.Generator) -> dict[str, Any]:
        """Shrink the hidden state of every layer by `numb_nodes` units (keeping the leading ones)."""
        size = self.hidden_state_size
        count = resolve_count(numb_nodes, size - self.min_hidden_state_size, NODE_CHOICES, rng, "numb_nodes")
        self._resize_hidden(kept(size - count), None)
        return {"numb_nodes": count}

    @mutation("layer", available=lambda self: self.num_layers < self.max_num_layers)
    def add_layer(self, *, rng: np.random.Generator) -> dict[str, Any]:
        """Stack a residual LSTM layer with a zero gate on top (an exact identity at first)."""
        size = self.hidden_state_size
        like = self.output_layer.weight
        with global_rng_untouched(like.device):
            layer = LstmLayer(size, size, residual=True, device=like.device, dtype=like.dtype)
        layer.reinitialise(torch_generator(rng))
        self.layers.append(layer)
        return {}

    @mutation("layer", available=lambda self: self.num_layers > self.min_num_layers)
    def remove_layer(self, *, rng: np.random.Generator) -> dict[str, Any]:
        """Remove the top LSTM layer."""
        del self.layers[len(self.layers) - 1]
        return {}
