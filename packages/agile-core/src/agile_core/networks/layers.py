"""Hidden-layer building blocks shared by the evolvable MLP and CNN.

A block is ``activation(norm(linear_or_conv(x)))``. A *residual* block instead computes
``shortcut(x) + gate * activation(norm(linear_or_conv(x)))``, where ``shortcut`` is a fixed
partial-identity map (a buffer) and ``gate`` a learnable scalar. Layers inserted by ``add_layer``
are residual blocks with ``gate = 0`` and an identity shortcut, so they start as an exact
identity map whatever the activation and normalisation (ReZero-style); the gate's gradient is
non-zero, so the new layer starts learning at once.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from agile_core.networks.activations import check_activation, make_activation, sample_activation
from agile_core.networks.resize import (
    IndexMap,
    new_units,
    partial_identity,
    remap,
    resize_conv,
    resize_layer_norm,
    resize_linear,
    uniform,
)

DEFAULT_NORM_EPS = 1e-5


class ChannelLayerNorm(nn.LayerNorm):
    """LayerNorm over the channels of a ``[N, C, H, W]`` map, separately at every pixel.

    Normalising over channels only (not over C, H and W as GroupNorm(1) does) lets a new channel
    that equals the per-pixel channel mean leave the statistics exactly unchanged, which makes
    channel growth function-preserving.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise `x` over its channel dimension (dim 1)."""
        return super().forward(x.movedim(1, -1)).movedim(-1, 1)


class _Block(nn.Module):
    """Common parts of dense and convolutional hidden blocks."""

    main: nn.Linear | nn.Conv2d
    norm: nn.LayerNorm | None
    shortcut: torch.Tensor
    gate: nn.Parameter

    def __init__(self, activation: str, residual: bool, softmax_dim: int) -> None:
        super().__init__()
        self.activation_name = activation
        self.residual = residual
        self._softmax_dim = softmax_dim

    def _init_residual(self, out_features: int, in_features: int) -> None:
        like = self.main.weight
        self.register_buffer("shortcut", partial_identity(out_features, in_features, like))
        self.gate = nn.Parameter(torch.zeros((), device=like.device, dtype=like.dtype))

    @property
    def in_features(self) -> int:
        """Inputs (features or channels) the block reads."""
        return int(self.main.weight.shape[1])

    @property
    def out_features(self) -> int:
        """Outputs (features or channels) the block produces."""
        return int(self.main.weight.shape[0])

    @property
    def norm_eps(self) -> float:
        """The normalisation's eps (1e-5 unless rescaled by growth; unused without norm)."""
        return float(self.norm.eps) if self.norm is not None else DEFAULT_NORM_EPS

    def set_activation(self, name: str) -> None:
        """Replace the activation (on the block's device and dtype)."""
        like = self.main.weight
        self.activation = make_activation(name, softmax_dim=self._softmax_dim, device=like.device, dtype=like.dtype)
        self.activation_name = name

    def make_plain(self) -> None:
        """Drop the residual shortcut and gate (used when the block becomes a network's first)."""
        if self.residual:
            del self.shortcut
            del self.gate
            self.residual = False

    def reinitialise(self, generator: torch.Generator | None) -> None:
        """Default-uniform weights drawn from `generator` (for reproducible inserted layers)."""
        weight = self.main.weight
        bound = 1.0 / math.sqrt(math.prod(weight.shape[1:]))
        with torch.no_grad():
            weight.copy_(uniform(weight.shape, bound, weight, generator))
            if self.main.bias is not None:
                self.main.bias.copy_(uniform(self.main.bias.shape, bound, weight, generator))

    def resize(self, in_map: IndexMap, out_map: IndexMap, generator: torch.Generator | None = None) -> None:
        """Resize inputs and outputs, keeping surviving weights.

        New inputs get zero weights. New outputs are mean-of-old rows when normalised (so the
        norm statistics of the old units are unchanged, see :func:`resize_layer_norm`), else
        default-initialised; they are zero in the shortcut.
        """
        mean_rows = self.norm is not None and new_units(out_map) > 0
        self.main = self._resize_main(in_map, out_map, mean_rows, generator)
        if self.norm is not None:
            self.norm = resize_layer_norm(self.norm, out_map)
        if self.residual:
            self.shortcut = remap(remap(self.shortcut, 1, in_map), 0, out_map)

    def _resize_main(self, in_map: IndexMap, out_map: IndexMap, mean_rows: bool,
                     generator: torch.Generator | None) -> nn.Linear | nn.Conv2d:
        raise NotImplementedError

    def _shortcut(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the block (plus the gated residual when residual)."""
        y = self.main(x)
        if self.norm is not None:
            y = self.norm(y)
        y = self.activation(y)
        if self.residual:
            return self._shortcut(x) + self.gate * y
        return y


class DenseBlock(_Block):
    """One MLP hidden layer: Linear -> optional LayerNorm -> activation (optionally residual)."""

    main: nn.Linear

    def __init__(
        self,
        in_features: int,
        out_features: int,
        activation: str,
        layer_norm: bool,
        *,
        norm_eps: float = DEFAULT_NORM_EPS,
        residual: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(activation, residual, softmax_dim=-1)
        self.main = nn.Linear(in_features, out_features, device=device, dtype=dtype)
        self.norm = nn.LayerNorm(out_features, eps=norm_eps, device=device, dtype=dtype) if layer_norm else None
        self.activation = make_activation(activation, device=device, dtype=dtype)
        if residual:
            self._init_residual(out_features, in_features)

    def _resize_main(self, in_map: IndexMap, out_map: IndexMap, mean_rows: bool,
                     generator: torch.Generator | None) -> nn.Linear:
        assert isinstance(self.main, nn.Linear)
        return resize_linear(self.main, in_map, out_map, mean_rows=mean_rows, generator=generator)

    def _shortcut(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.shortcut)


class ConvBlock(_Block):
    """One CNN layer: Conv2d -> optional channel LayerNorm -> activation (optionally residual).

    A residual conv block must keep the spatial size (stride 1, odd kernel, ``same`` padding).
    """

    main: nn.Conv2d

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        stride: int,
        padding: int,
        activation: str,
        layer_norm: bool,
        *,
        norm_eps: float = DEFAULT_NORM_EPS,
        residual: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(activation, residual, softmax_dim=1)
        if residual and (stride != 1 or kernel_size % 2 == 0 or padding != (kernel_size - 1) // 2):
            raise ValueError(
                f"a residual conv layer needs stride 1, an odd kernel and 'same' padding "
                f"(got kernel {kernel_size}, stride {stride}, padding {padding})"
            )
        self.main = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding,
                              device=device, dtype=dtype)
        self.norm = ChannelLayerNorm(out_channels, eps=norm_eps, device=device, dtype=dtype) if layer_norm else None
        self.activation = make_activation(activation, softmax_dim=1, device=device, dtype=dtype)
        if residual:
            self._init_residual(out_channels, in_channels)

    @property
    def kernel_size(self) -> int:
        """Square kernel size."""
        return int(self.main.kernel_size[0])

    @property
    def stride(self) -> int:
        """Stride in both directions."""
        return int(self.main.stride[0])

    @property
    def padding(self) -> int:
        """Zero padding on every side."""
        padding = self.main.padding
        assert not isinstance(padding, str)
        return int(padding[0])

    def output_hw(self, height: int, width: int) -> tuple[int, int]:
        """Spatial size of the output for an input of `height` x `width`."""
        k, s, p = self.kernel_size, self.stride, self.padding
        return (height + 2 * p - k) // s + 1, (width + 2 * p - k) // s + 1

    def _resize_main(self, in_map: IndexMap, out_map: IndexMap, mean_rows: bool,
                     generator: torch.Generator | None) -> nn.Conv2d:
        assert isinstance(self.main, nn.Conv2d)
        return resize_conv(self.main, in_map, out_map, mean_rows=mean_rows, generator=generator)

    def _shortcut(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, self.shortcut[:, :, None, None])


def change_block_activation(module: Any, activation: str | None, rng: np.random.Generator) -> dict[str, Any]:
    """Switch every block of `module` (an MLP or CNN) to `activation` (sampled when None)."""
    from agile_core.networks.base import MutationError

    name = sample_activation(module.activation, rng) if activation is None else activation
    try:
        check_activation(name)
    except ValueError as error:
        raise MutationError(str(error)) from error
    for block in module.blocks:
        block.set_activation(name)
    module.activation = name
    return {"activation": name}
