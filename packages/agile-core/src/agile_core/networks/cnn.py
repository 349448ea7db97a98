"""EvolvableCNN: a convolutional image encoder whose depth, channels and activation can mutate."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from agile_core.networks.activations import check_activation, make_activation
from agile_core.networks.base import EvolvableModule, MutationError, mutation, torch_generator
from agile_core.networks.layers import DEFAULT_NORM_EPS, ConvBlock, change_block_activation
from agile_core.networks.mlp import check_layer_sizes, init_orthogonal
from agile_core.networks.resize import (
    IndexMap,
    global_rng_untouched,
    grown,
    kept,
    overlap,
    remap,
    resize_linear,
    uninitialised,
)
from agile_core.networks.sampling import CHANNEL_CHOICES, resolve_count, resolve_index
from agile_core.specs.network import CnnConfig

Shape3 = tuple[int, int, int]


def remap_flat_features(layer: nn.Linear, old: Shape3, new: Shape3, channel_map: IndexMap | None = None) -> nn.Linear:
    """Resize a Linear reading a flattened ``[C, H, W]`` map to read a ``new`` map instead.

    Channels follow `channel_map` (default: the overlapping leading channels), pixels the
    overlapping top-left window; everything else gets zero weights.
    """
    channels = overlap(old[0], new[0]) if channel_map is None else list(channel_map)
    weight = layer.weight.detach().reshape(layer.out_features, *old)
    weight = remap(weight, 1, channels)
    weight = remap(weight, 2, overlap(old[1], new[1]))
    weight = remap(weight, 3, overlap(old[2], new[2]))
    resized = uninitialised(nn.Linear, math.prod(new), layer.out_features, bias=layer.bias is not None,
                        device=layer.weight.device, dtype=layer.weight.dtype)
    with torch.no_grad():
        resized.weight.copy_(weight.reshape(layer.out_features, -1))
        if layer.bias is not None:
            resized.bias.copy_(layer.bias)
    return resized


class EvolvableCNN(EvolvableModule):
    """Channels-first image encoder: conv blocks -> flatten -> Linear(num_outputs) -> activation?

    `input_shape` is ``(C, H, W)``, or ``(H, W)`` for single-channel images; leading dimensions
    of the input are batch dimensions. Mutations: ``add_layer``/``remove_layer`` (layer),
    ``add_channel``/``remove_channel`` (node) and ``change_activation``. Inserted layers are
    identity-initialised residual convolutions (stride 1, odd kernel, same padding, gate 0); new
    channels have zero outgoing weights and, under the channel LayerNorm, start at the per-pixel
    channel mean so the normalisation statistics are unchanged.

    ``init_layers`` initialises every convolution and the output linear layer orthogonally (gain
    ``sqrt(2)``, trailing kernel dimensions flattened) with zero biases, at construction only
    (PyTorch's default uniform initialisation otherwise); layers and channels added later by
    mutation keep their function-preserving initial values.
    """

    def __init__(
        self,
        input_shape: Sequence[int],
        num_outputs: int,
        channel_size: Sequence[int] = (16, 32),
        kernel_size: Sequence[int] = (8, 4),
        stride_size: Sequence[int] = (4, 2),
        activation: str = "ReLU",
        layer_norm: bool = False,
        min_hidden_layers: int = 1,
        max_hidden_layers: int = 6,
        min_channel_size: int = 8,
        max_channel_size: int = 256,
        *,
        output_activation: str | None = None,
        padding: Sequence[int] | None = None,
        residual: Sequence[bool] | None = None,
        norm_eps: Sequence[float] | None = None,
        init_layers: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        shape = tuple(int(d) for d in input_shape)
        if len(shape) not in (2, 3):
            raise ValueError(f"EvolvableCNN needs a (C, H, W) or (H, W) input shape, got {shape}")
        channels = [int(c) for c in channel_size]
        n = len(channels)
        check_layer_sizes(channels, min_hidden_layers, max_hidden_layers, min_channel_size, max_channel_size, "conv")
        check_activation(activation)
        check_activation(output_activation, allow_none=True)
        kernels = [int(k) for k in kernel_size]
        strides = [int(s) for s in stride_size]
        pads = [0] * n if padding is None else [int(p) for p in padding]
        flags = [False] * n if residual is None else [bool(r) for r in residual]
        eps = [DEFAULT_NORM_EPS] * n if norm_eps is None else [float(e) for e in norm_eps]
        if not all(len(values) == n for values in (kernels, strides, pads, flags, eps)):
            raise ValueError("channel_size, kernel_size, stride_size, padding, residual and norm_eps must match in length")
        if flags[0]:
            raise ValueError("the first convolution cannot be residual (it reads the raw image)")
        self.input_shape = shape
        self.num_outputs = int(num_outputs)
        self.activation = activation
        self.output_activation = output_activation
        self.layer_norm = bool(layer_norm)
        self.min_hidden_layers, self.max_hidden_layers = int(min_hidden_layers), int(max_hidden_layers)
        self.min_channel_size, self.max_channel_size = int(min_channel_size), int(max_channel_size)
        self.layers = nn.ModuleList()
        previous = self.in_channels
        for i in range(n):
            self.layers.append(ConvBlock(previous, channels[i], kernels[i], strides[i], pads[i], activation,
                                         self.layer_norm, norm_eps=eps[i], residual=flags[i], device=device, dtype=dtype))
            previous = channels[i]
        self.output_layer = nn.Linear(math.prod(self.feature_map_shape()), self.num_outputs, device=device, dtype=dtype)
        self.output_act = make_activation(output_activation, device=device, dtype=dtype)
        self.init_layers = bool(init_layers)
        if self.init_layers:
            for block in self.blocks:
                init_orthogonal(block.main.weight, block.main.bias)
            init_orthogonal(self.output_layer.weight, self.output_layer.bias)

    @classmethod
    def from_spec(cls, spec: CnnConfig | Mapping[str, Any], input_shape: Sequence[int], num_outputs: int,
                  **overrides: Any) -> EvolvableCNN:
        """Build from a :class:`CnnConfig` (or its dict); `overrides` replace constructor arguments."""
        config = spec if isinstance(spec, CnnConfig) else CnnConfig.model_validate(dict(spec))
        kwargs = config.model_dump(exclude={"arch"})
        kwargs.update(overrides)
        return cls(input_shape, num_outputs, **kwargs)

    # ------------------------------------------------------------------ structure
    @property
    def in_channels(self) -> int:
        """Channels of the input image (1 for a 2-D input shape)."""
        return self.input_shape[0] if len(self.input_shape) == 3 else 1

    @property
    def blocks(self) -> list[ConvBlock]:
        """The convolution blocks, input side first."""
        return [block for block in self.layers if isinstance(block, ConvBlock)]

    @property
    def channel_size(self) -> list[int]:
        """Output channels of each convolution."""
        return [block.out_features for block in self.blocks]

    def feature_map_shape(self, blocks: Sequence[ConvBlock] | None = None) -> Shape3:
        """``(C, H, W)`` after the convolutions (of `blocks`, default the current ones)."""
        height, width = self.input_shape[-2:]
        channels = self.in_channels
        for i, block in enumerate(self.blocks if blocks is None else blocks):
            height, width = block.output_hw(height, width)
            channels = block.out_features
            if height < 1 or width < 1:
                raise ValueError(
                    f"input of shape {self.input_shape} is too small for the convolutions: "
                    f"layer {i} (kernel {block.kernel_size}, stride {block.stride}) leaves {height}x{width}"
                )
        return channels, height, width

    def _config_body(self) -> dict[str, Any]:
        blocks = self.blocks
        return {
            "input_shape": list(self.input_shape),
            "num_outputs": self.num_outputs,
            "channel_size": self.channel_size,
            "kernel_size": [b.kernel_size for b in blocks],
            "stride_size": [b.stride for b in blocks],
            "activation": self.activation,
            "layer_norm": self.layer_norm,
            "min_hidden_layers": self.min_hidden_layers,
            "max_hidden_layers": self.max_hidden_layers,
            "min_channel_size": self.min_channel_size,
            "max_channel_size": self.max_channel_size,
            "output_activation": self.output_activation,
            "padding": [b.padding for b in blocks],
            "residual": [b.residual for b in blocks],
            "norm_eps": [b.norm_eps for b in blocks],
            "init_layers": self.init_layers,
        }

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map ``[..., *input_shape]`` images to ``[..., num_outputs]`` features."""
        lead = x.shape[: x.dim() - len(self.input_shape)]
        x = x.reshape(-1, self.in_channels, *self.input_shape[-2:])
        for block in self.layers:
            x = block(x)
        out = self.output_act(self.output_layer(x.flatten(1)))
        return out.reshape(*lead, self.num_outputs)

    def set_num_outputs(self, num_outputs: int, generator: torch.Generator | None = None) -> None:
        """Resize the final linear layer, keeping the leading outputs."""
        self.output_layer = resize_linear(self.output_layer, kept(self.output_layer.in_features),
                                          overlap(self.num_outputs, num_outputs), generator=generator)
        self.num_outputs = int(num_outputs)

    def _resize_reader_inputs(self, position: int, channel_map: IndexMap, old_map: Shape3,
                              generator: torch.Generator | None) -> None:
        """Resize whatever reads the map entering block `position` (the flat output layer past the end)."""
        blocks = self.blocks
        if position < len(blocks):
            blocks[position].resize(channel_map, kept(blocks[position].out_features), generator)
        if position >= len(blocks) or self.feature_map_shape() != old_map:
            self.output_layer = remap_flat_features(
                self.output_layer, old_map, self.feature_map_shape(),
                channel_map if position >= len(blocks) else None,
            )

    # ------------------------------------------------------------------ mutations
    @mutation("layer", available=lambda self: len(self.layers) < self.max_hidden_layers)
    def add_layer(self, hidden_layer: int | None = None, kernel_size: int | None = None, *,
                  rng: np.random.Generator) -> dict[str, Any]:
        """Insert an identity-initialised residual convolution after conv `hidden_layer`."""
        index = resolve_index(hidden_layer, range(len(self.layers)), rng, "hidden_layer")
        kernel = 3 if kernel_size is None else int(kernel_size)
        if kernel < 1 or kernel % 2 == 0:
            raise MutationError(f"an inserted convolution needs an odd kernel size, got {kernel}")
        channels = self.blocks[index].out_features
        weight = self.output_layer.weight
        with global_rng_untouched(weight.device):
            block = ConvBlock(channels, channels, kernel, 1, (kernel - 1) // 2, self.activation, self.layer_norm,
                              residual=True, device=weight.device, dtype=weight.dtype)
        block.reinitialise(torch_generator(rng))
        self.layers.insert(index + 1, block)
        return {"hidden_layer": index, "kernel_size": kernel}

    @mutation("layer", available=lambda self: len(self.layers) > self.min_hidden_layers)
    def remove_layer(self, hidden_layer: int | None = None, *, rng: np.random.Generator) -> dict[str, Any]:
        """Remove conv `hidden_layer`; its reader keeps the overlapping weights."""
        index = resolve_index(hidden_layer, range(len(self.layers)), rng, "hidden_layer")
        blocks = self.blocks
        remaining = blocks[:index] + blocks[index + 1:]
        try:
            self.feature_map_shape(remaining)
        except ValueError as error:
            raise MutationError(f"cannot remove conv {index}: {error}") from error
        old_map = self.feature_map_shape()
        removed = blocks[index]
        del self.layers[index]
        self._resize_reader_inputs(index, overlap(removed.out_features, removed.in_features), old_map,
                                   torch_generator(rng))
        if index == 0:
            self.blocks[0].make_plain()
        return {"hidden_layer": index}

    @mutation("node", available=lambda self: any(c < self.max_channel_size for c in self.channel_size))
    def add_channel(self, hidden_layer: int | None = None, numb_new_channels: int | None = None, *,
                    rng: np.random.Generator) -> dict[str, Any]:
        """Add `numb_new_channels` output channels to conv `hidden_layer` (function-preserving)."""
        sizes = self.channel_size
        index = resolve_index(hidden_layer, [i for i, c in enumerate(sizes) if c < self.max_channel_size], rng,
                              "hidden_layer")
        count = resolve_count(numb_new_channels, self.max_channel_size - sizes[index], CHANNEL_CHOICES, rng,
                              "numb_new_channels")
        generator = torch_generator(rng)
        old_map = self.feature_map_shape()
        block = self.blocks[index]
        block.resize(kept(block.in_features), grown(sizes[index], count), generator)
        self._resize_reader_inputs(index + 1, grown(sizes[index], count), old_map, generator)
        return {"hidden_layer": index, "numb_new_channels": count}

    @mutation("node", available=lambda self: any(c > self.min_channel_size for c in self.channel_size))
    def remove_channel(self, hidden_layer: int | None = None, numb_channels: int | None = None, *,
                       rng: np.random.Generator) -> dict[str, Any]:
        """Remove the last `numb_channels` channels of conv `hidden_layer`."""
        sizes = self.channel_size
        index = resolve_index(hidden_layer, [i for i, c in enumerate(sizes) if c > self.min_channel_size], rng,
                              "hidden_layer")
        count = resolve_count(numb_channels, sizes[index] - self.min_channel_size, CHANNEL_CHOICES, rng,
                              "numb_channels")
        old_map = self.feature_map_shape()
        block = self.blocks[index]
        block.resize(kept(block.in_features), kept(sizes[index] - count))
        self._resize_reader_inputs(index + 1, kept(sizes[index] - count), old_map, None)
        return {"hidden_layer": index, "numb_channels": count}

    @mutation("activation")
    def change_activation(self, activation: str | None = None, *, rng: np.random.Generator) -> dict[str, Any]:
        """Use `activation` (sampled when None) after every convolution."""
        return change_block_activation(self, activation, rng)
