"""EvolvableMLP: a multi-layer perceptron whose depth, widths and activation can mutate."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from agile_core.networks.activations import check_activation, make_activation
from agile_core.networks.base import EvolvableModule, mutation, torch_generator
from agile_core.networks.layers import DEFAULT_NORM_EPS, DenseBlock, change_block_activation
from agile_core.networks.noisy import NoisyLinear
from agile_core.networks.resize import (
    IndexMap,
    global_rng_untouched,
    grown,
    kept,
    overlap,
    resize_linear,
)
from agile_core.networks.sampling import NODE_CHOICES, resolve_count, resolve_index
from agile_core.specs.network import MlpConfig

ORTHOGONAL_GAIN = math.sqrt(2.0)
"""Gain of the orthogonal initialisation `init_layers` asks for."""
OUTPUT_VANISH_SCALE = 0.1
"""Factor `output_vanish` applies to an output layer's initial weight and bias."""


def init_orthogonal(weight: torch.Tensor, bias: torch.Tensor | None, gain: float = ORTHOGONAL_GAIN) -> None:
    """Overwrite a Linear or Conv weight (``[out, in, ...]``) with an orthogonal matrix of `gain`
    (its trailing dimensions flattened) and zero its bias, drawing from the global torch RNG."""
    with torch.no_grad():
        nn.init.orthogonal_(weight, gain=gain)
        if bias is not None:
            bias.zero_()


def scale_output(weight: torch.Tensor, bias: torch.Tensor | None, factor: float = OUTPUT_VANISH_SCALE) -> None:
    """Multiply an output layer's weight and bias by `factor` in place (`output_vanish`)."""
    with torch.no_grad():
        weight.mul_(factor)
        if bias is not None:
            bias.mul_(factor)


def check_layer_sizes(sizes: Sequence[int], min_layers: int, max_layers: int, min_size: int, max_size: int,
                      what: str) -> None:
    """Raise a ValueError when a layer count or a layer size is outside its bounds."""
    if not min_layers <= len(sizes) <= max_layers:
        raise ValueError(f"{len(sizes)} {what} layers is outside [{min_layers}, {max_layers}]")
    for size in sizes:
        if not min_size <= size <= max_size:
            raise ValueError(f"{what} size {size} is outside [{min_size}, {max_size}]")


class EvolvableMLP(EvolvableModule):
    """Input -> hidden blocks (Linear -> LayerNorm? -> activation) -> output Linear -> activation?

    Mutations: ``add_layer``/``remove_layer`` (layer), ``add_node``/``remove_node`` (node) and
    ``change_activation``. Growth is function-preserving: new nodes have zero outgoing weights
    (and, under LayerNorm, start at the mean of their layer with the norm rescaled to keep the
    statistics exact); new layers are identity-initialised gated residual blocks (see
    :mod:`agile_core.networks.layers`). Inputs may carry any trailing shape `input_shape`
    (flattened); leading dimensions are batch dimensions.

    Initialisation: PyTorch's default uniform one, unless ``init_layers`` (every linear weight,
    hidden and output, orthogonal with gain ``sqrt(2)``, biases zero) and/or ``output_vanish``
    (the output layer's initial weight and bias times 0.1; for a noisy output its means). Both
    apply at construction only; layers and units added later by mutation keep their
    function-preserving initial values.
    """

    def __init__(
        self,
        num_inputs: int,
        num_outputs: int,
        hidden_size: Sequence[int] = (64,),
        activation: str = "ReLU",
        output_activation: str | None = None,
        layer_norm: bool = True,
        min_hidden_layers: int = 1,
        max_hidden_layers: int = 6,
        min_mlp_nodes: int = 8,
        max_mlp_nodes: int = 256,
        *,
        residual: Sequence[bool] | None = None,
        norm_eps: Sequence[float] | None = None,
        noisy_output: bool = False,
        noise_std: float = 0.5,
        init_layers: bool = False,
        output_vanish: bool = False,
        input_shape: Sequence[int] | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        hidden = [int(size) for size in hidden_size]
        check_layer_sizes(hidden, min_hidden_layers, max_hidden_layers, min_mlp_nodes, max_mlp_nodes, "hidden")
        check_activation(activation)
        check_activation(output_activation, allow_none=True)
        residual = [False] * len(hidden) if residual is None else [bool(flag) for flag in residual]
        norm_eps = [DEFAULT_NORM_EPS] * len(hidden) if norm_eps is None else [float(eps) for eps in norm_eps]
        if len(residual) != len(hidden) or len(norm_eps) != len(hidden):
            raise ValueError("residual and norm_eps need one entry per hidden layer")
        if residual[0]:
            raise ValueError("the first hidden layer cannot be residual (it reads the raw input)")
        self.input_shape = (int(num_inputs),) if input_shape is None else tuple(int(d) for d in input_shape)
        if math.prod(self.input_shape) != num_inputs:
            raise ValueError(f"input_shape {self.input_shape} does not hold num_inputs={num_inputs} values")
        self.num_inputs = int(num_inputs)
        self.num_outputs = int(num_outputs)
        self.activation = activation
        self.output_activation = output_activation
        self.layer_norm = bool(layer_norm)
        self.min_hidden_layers, self.max_hidden_layers = int(min_hidden_layers), int(max_hidden_layers)
        self.min_mlp_nodes, self.max_mlp_nodes = int(min_mlp_nodes), int(max_mlp_nodes)
        self.noisy_output = bool(noisy_output)
        self.noise_std = float(noise_std)
        self.layers = nn.ModuleList()
        previous = self.num_inputs
        for width, is_residual, eps in zip(hidden, residual, norm_eps, strict=True):
            self.layers.append(DenseBlock(previous, width, activation, self.layer_norm, norm_eps=eps,
                                          residual=is_residual, device=device, dtype=dtype))
            previous = width
        self.output_layer: nn.Linear | NoisyLinear
        if self.noisy_output:
            self.output_layer = NoisyLinear(previous, self.num_outputs, self.noise_std, device=device, dtype=dtype)
        else:
            self.output_layer = nn.Linear(previous, self.num_outputs, device=device, dtype=dtype)
        self.output_act = make_activation(output_activation, device=device, dtype=dtype)
        self.init_layers = bool(init_layers)
        self.output_vanish = bool(output_vanish)
        out_weight, out_bias = self._output_weight_bias()
        if self.init_layers:
            for block in self.blocks:
                init_orthogonal(block.main.weight, block.main.bias)
            init_orthogonal(out_weight, out_bias)
        if self.output_vanish:
            scale_output(out_weight, out_bias)

    def _output_weight_bias(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The output layer's (mean) weight and bias."""
        if isinstance(self.output_layer, NoisyLinear):
            return self.output_layer.weight_mu, self.output_layer.bias_mu
        return self.output_layer.weight, self.output_layer.bias

    @classmethod
    def from_spec(cls, spec: MlpConfig | Mapping[str, Any], num_inputs: int, num_outputs: int,
                  **overrides: Any) -> EvolvableMLP:
        """Build from an :class:`MlpConfig` (or its dict); `overrides` replace constructor arguments."""
        config = spec if isinstance(spec, MlpConfig) else MlpConfig.model_validate(dict(spec))
        kwargs = config.model_dump(exclude={"arch"})
        kwargs.update(overrides)
        return cls(num_inputs, num_outputs, **kwargs)

    # ------------------------------------------------------------------ structure
    @property
    def hidden_size(self) -> list[int]:
        """Width of each hidden layer, input side first."""
        return [block.out_features for block in self.blocks]

    @property
    def blocks(self) -> list[DenseBlock]:
        """The hidden blocks, input side first."""
        return [block for block in self.layers if isinstance(block, DenseBlock)]

    def _config_body(self) -> dict[str, Any]:
        blocks = self.blocks
        return {
            "num_inputs": self.num_inputs,
            "num_outputs": self.num_outputs,
            "hidden_size": self.hidden_size,
            "activation": self.activation,
            "output_activation": self.output_activation,
            "layer_norm": self.layer_norm,
            "min_hidden_layers": self.min_hidden_layers,
            "max_hidden_layers": self.max_hidden_layers,
            "min_mlp_nodes": self.min_mlp_nodes,
            "max_mlp_nodes": self.max_mlp_nodes,
            "residual": [block.residual for block in blocks],
            "norm_eps": [block.norm_eps for block in blocks],
            "noisy_output": self.noisy_output,
            "noise_std": self.noise_std,
            "init_layers": self.init_layers,
            "output_vanish": self.output_vanish,
            "input_shape": list(self.input_shape),
        }

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map ``[..., *input_shape]`` to ``[..., num_outputs]``."""
        fused = self.__dict__.get("agile_fused")
        if fused is not None:  # a stacked MLP run as one fused chain (see agile_core.networks.fused)
            return fused(x)
        if len(self.input_shape) != 1:
            x = x.reshape(*x.shape[: x.dim() - len(self.input_shape)], self.num_inputs)
        for block in self.layers:
            x = block(x)
        return self.output_act(self.output_layer(x))

    def reset_noise(self) -> None:
        """Draw fresh noise for a NoisyLinear output layer (no-op otherwise)."""
        if isinstance(self.output_layer, NoisyLinear):
            self.output_layer.reset_noise()

    # ------------------------------------------------------------------ resizing helpers
    def _resize_output_layer(self, in_map: IndexMap, out_map: IndexMap, generator: torch.Generator | None) -> None:
        if isinstance(self.output_layer, NoisyLinear):
            self.output_layer = self.output_layer.resized(in_map, out_map, generator)
        else:
            self.output_layer = resize_linear(self.output_layer, in_map, out_map, generator=generator)

    def _resize_reader_inputs(self, position: int, in_map: IndexMap, generator: torch.Generator | None) -> None:
        """Resize the inputs of the block at `position` (the output layer when past the last)."""
        blocks = self.blocks
        if position < len(blocks):
            blocks[position].resize(in_map, kept(blocks[position].out_features), generator)
        else:
            self._resize_output_layer(in_map, kept(self.num_outputs), generator)

    def remap_inputs(self, index_map: IndexMap, generator: torch.Generator | None = None) -> None:
        """Change the input size: input j reads old input ``index_map[j]``, or is new (zero weights)."""
        self._resize_reader_inputs(0, index_map, generator)
        self.num_inputs = len(index_map)
        self.input_shape = (self.num_inputs,)

    def set_num_outputs(self, num_outputs: int, generator: torch.Generator | None = None) -> None:
        """Resize the output layer, keeping the leading outputs (new ones default-initialised)."""
        self._resize_output_layer(kept(self.blocks[-1].out_features), overlap(self.num_outputs, num_outputs), generator)
        self.num_outputs = int(num_outputs)

    def _device_dtype(self) -> dict[str, Any]:
        weight = self.output_layer.weight
        return {"device": weight.device, "dtype": weight.dtype}

    # ------------------------------------------------------------------ mutations
    @mutation("layer", available=lambda self: len(self.layers) < self.max_hidden_layers)
    def add_layer(self, hidden_layer: int | None = None, *, rng: np.random.Generator) -> dict[str, Any]:
        """Insert an identity-initialised residual layer after hidden layer `hidden_layer`."""
        index = resolve_index(hidden_layer, range(len(self.layers)), rng, "hidden_layer")
        width = self.blocks[index].out_features
        with global_rng_untouched(self.output_layer.weight.device):
            block = DenseBlock(width, width, self.activation, self.layer_norm, residual=True, **self._device_dtype())
        block.reinitialise(torch_generator(rng))
        self.layers.insert(index + 1, block)
        return {"hidden_layer": index}

    @mutation("layer", available=lambda self: len(self.layers) > self.min_hidden_layers)
    def remove_layer(self, hidden_layer: int | None = None, *, rng: np.random.Generator) -> dict[str, Any]:
        """Remove hidden layer `hidden_layer`; its reader keeps the overlapping input weights."""
        index = resolve_index(hidden_layer, range(len(self.layers)), rng, "hidden_layer")
        removed = self.blocks[index]
        del self.layers[index]
        in_map = overlap(removed.out_features, removed.in_features)
        self._resize_reader_inputs(index, in_map, torch_generator(rng))
        if index == 0:
            self.blocks[0].make_plain()
        return {"hidden_layer": index}

    @mutation("node", available=lambda self: any(size < self.max_mlp_nodes for size in self.hidden_size))
    def add_node(self, hidden_layer: int | None = None, numb_new_nodes: int | None = None, *,
                 rng: np.random.Generator) -> dict[str, Any]:
        """Add `numb_new_nodes` units to hidden layer `hidden_layer` (function-preserving)."""
        sizes = self.hidden_size
        index = resolve_index(hidden_layer, [i for i, s in enumerate(sizes) if s < self.max_mlp_nodes], rng,
                              "hidden_layer")
        count = resolve_count(numb_new_nodes, self.max_mlp_nodes - sizes[index], NODE_CHOICES, rng, "numb_new_nodes")
        generator = torch_generator(rng)
        block = self.blocks[index]
        block.resize(kept(block.in_features), grown(sizes[index], count), generator)
        self._resize_reader_inputs(index + 1, grown(sizes[index], count), generator)
        return {"hidden_layer": index, "numb_new_nodes": count}

    @mutation("node", available=lambda self: any(size > self.min_mlp_nodes for size in self.hidden_size))
    def remove_node(self, hidden_layer: int | None = None, numb_nodes: int | None = None, *,
                    rng: np.random.Generator) -> dict[str, Any]:
        """Remove the last `numb_nodes` units of hidden layer `hidden_layer`."""
        sizes = self.hidden_size
        index = resolve_index(hidden_layer, [i for i, s in enumerate(sizes) if s > self.min_mlp_nodes], rng,
                              "hidden_layer")
        count = resolve_count(numb_nodes, sizes[index] - self.min_mlp_nodes, NODE_CHOICES, rng, "numb_nodes")
        block = self.blocks[index]
        block.resize(kept(block.in_features), kept(sizes[index] - count))
        self._resize_reader_inputs(index + 1, kept(sizes[index] - count), None)
        return {"hidden_layer": index, "numb_nodes": count}

    @mutation("activation")
    def change_activation(self, activation: str | None = None, *, rng: np.random.Generator) -> dict[str, Any]:
        """Use `activation` (sampled when None) after every hidden layer."""
        return change_block_activation(self, activation, rng)
