"""EvolvableSimBa: a SimBa encoder (pre-LayerNorm residual MLP) whose depth, width and activation
can mutate.

SimBa (Lee et al., 2024, "SimBa: Simplicity Bias for Scaling Up Parameters in Deep RL") projects
the input to a residual stream of ``hidden_size`` units, adds ``num_blocks`` residual blocks
``x + Linear(act(Linear(LayerNorm(x))))`` whose inner layer is ``scale_factor`` times wider, and
normalises the stream once more before the output layer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np
import torch
from torch import nn

from agile_core.networks.activations import check_activation, make_activation
from agile_core.networks.base import EvolvableModule, mutation, torch_generator
from agile_core.networks.layers import DEFAULT_NORM_EPS, change_block_activation
from agile_core.networks.resize import (
    IndexMap,
    global_rng_untouched,
    grown,
    kept,
    overlap,
    resize_layer_norm,
    resize_linear,
    uniform,
)
from agile_core.networks.sampling import NODE_CHOICES, resolve_count, resolve_index
from agile_core.specs.network import SimbaConfig

__all__ = ["EvolvableSimBa", "SimbaBlock"]


class SimbaBlock(nn.Module):
    """One pre-LayerNorm residual block: ``x + project(act(expand(norm(x))))``.

    ``expand`` maps the residual stream (``width`` units) to ``inner`` units and ``project`` back.
    Built only from ``nn.LayerNorm``/``nn.Linear`` leaves and a stateless activation, so a
    population of blocks stacks with the generic stacked layers
    (:mod:`agile_core.networks.stacked`).
    """

    def __init__(self, width: int, inner: int, activation: str, *, norm_eps: float = DEFAULT_NORM_EPS,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width, eps=norm_eps, device=device, dtype=dtype)
        self.expand = nn.Linear(width, inner, device=device, dtype=dtype)
        self.activation = make_activation(activation, device=device, dtype=dtype)
        self.project = nn.Linear(inner, width, device=device, dtype=dtype)
        self.activation_name = activation

    @property
    def width(self) -> int:
        """Units of the residual stream the block reads and writes."""
        return int(self.project.weight.shape[0])

    @property
    def inner(self) -> int:
        """Units of the block's inner (expansion) layer."""
        return int(self.expand.weight.shape[0])

    def set_activation(self, name: str) -> None:
        """Replace the activation (on the block's device and dtype)."""
        like = self.expand.weight
        self.activation = make_activation(name, device=like.device, dtype=like.dtype)
        self.activation_name = name

    def start_as_identity(self, generator: torch.Generator | None) -> None:
        """Default-uniform ``expand`` weights drawn from `generator`, a fresh norm, and a zero
        ``project``: the block then adds exactly nothing to the stream (and ``project`` still gets
        gradients, so it starts learning at once)."""
        weight = self.expand.weight
        bound = 1.0 / math.sqrt(max(int(weight.shape[1]), 1))
        with torch.no_grad():
            weight.copy_(uniform(weight.shape, bound, weight, generator))
            self.expand.bias.copy_(uniform(self.expand.bias.shape, bound, weight, generator))
            self.norm.weight.fill_(1.0)
            self.norm.bias.zero_()
            self.project.weight.zero_()
            self.project.bias.zero_()

    def resize(self, stream_map: IndexMap, inner_map: IndexMap, generator: torch.Generator | None) -> None:
        """Resize the stream (`stream_map`) and inner (`inner_map`) dimensions.

        New inner units get default-uniform incoming weights and zero outgoing ones (they add
        nothing); new stream units get zero weights in ``expand`` and, in ``project``, the mean of
        the old units' rows (so they stay at the mean of the old stream units, see
        :meth:`EvolvableSimBa.add_node`); the norm keeps the old units' statistics exactly.
        """
        self.norm = resize_layer_norm(self.norm, stream_map)
        self.expand = resize_linear(self.expand, stream_map, inner_map, generator=generator)
        self.project = resize_linear(self.project, inner_map, stream_map, mean_rows=True, generator=generator)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` plus the block's residual update."""
        return x + self.project(self.activation(self.expand(self.norm(x))))


class EvolvableSimBa(EvolvableModule):
    """Input Linear -> ``num_blocks`` :class:`SimbaBlock` -> LayerNorm -> output Linear -> activation?

    The residual stream is ``hidden_size`` units wide and each block's inner layer
    ``scale_factor * hidden_size``. Inputs may carry any trailing shape `input_shape`
    (flattened); leading dimensions are batch dimensions.

    Mutations:

    - ``add_block`` (layer) inserts a block at `position` (0 .. num_blocks) whose last linear
      layer is zero: an exact identity at insertion. ``remove_block`` (layer) drops one (not
      function-preserving unless that block was an identity). Both within
      ``[min_blocks, max_blocks]``.
    - ``add_node``/``remove_node`` (node) change the width of the *residual stream* by
      `numb_new_nodes` (within ``[min_mlp_nodes, max_mlp_nodes]``), and every block's inner layer
      by ``scale_factor`` times as many, so the inner width stays ``scale_factor * hidden_size``.
      Growth is exactly function-preserving (up to float rounding): new inner units have zero
      outgoing weights; new stream units are written, by the input layer and by every block's
      ``project``, with the mean of the old units' rows, so at every point of the stream they equal
      the per-sample mean of the old units. Every LayerNorm over the stream then sees the same
      mean, and a variance smaller by ``n / (n + k)``, which scaling the old gains by
      ``sqrt(n / (n + k))`` and eps by ``n / (n + k)`` undoes exactly (the eps is kept in the
      config as `norm_eps`); the new units normalise to zero and have zero weights in every
      reader. Shrinking keeps the leading units and their weights (not function-preserving).
    - ``change_activation`` switches every block's activation.

    Members of a population with the same number of blocks stack (:func:`stack_modules`) even at
    different widths: zero padding of the stream and inner units stays zero through every block.
    """

    def __init__(
        self,
        num_inputs: int,
        num_outputs: int,
        hidden_size: int = 64,
        num_blocks: int = 2,
        activation: str = "ReLU",
        output_activation: str | None = None,
        scale_factor: int = 4,
        min_blocks: int = 1,
        max_blocks: int = 4,
        min_mlp_nodes: int = 8,
        max_mlp_nodes: int = 256,
        *,
        norm_eps: float = DEFAULT_NORM_EPS,
        input_shape: Sequence[int] | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        hidden, blocks, scale = int(hidden_size), int(num_blocks), int(scale_factor)
        if not 1 <= int(min_blocks) <= int(max_blocks):
            raise ValueError(f"block bounds [{min_blocks}, {max_blocks}] are not 1 <= min <= max")
        if not int(min_blocks) <= blocks <= int(max_blocks):
            raise ValueError(f"{blocks} blocks is outside [{min_blocks}, {max_blocks}]")
        if not 1 <= int(min_mlp_nodes) <= hidden <= int(max_mlp_nodes):
            raise ValueError(f"hidden size {hidden} is outside [{min_mlp_nodes}, {max_mlp_nodes}]")
        if scale < 1:
            raise ValueError(f"scale_factor must be at least 1, got {scale}")
        check_activation(activation)
        check_activation(output_activation, allow_none=True)
        self.input_shape = (int(num_inputs),) if input_shape is None else tuple(int(d) for d in input_shape)
        if math.prod(self.input_shape) != num_inputs:
            raise ValueError(f"input_shape {self.input_shape} does not hold num_inputs={num_inputs} values")
        self.num_inputs = int(num_inputs)
        self.num_outputs = int(num_outputs)
        self.activation = activation
        self.output_activation = output_activation
        self.scale_factor = scale
        self.min_blocks, self.max_blocks = int(min_blocks), int(max_blocks)
        self.min_mlp_nodes, self.max_mlp_nodes = int(min_mlp_nodes), int(max_mlp_nodes)
        eps = float(norm_eps)
        self.input_layer = nn.Linear(self.num_inputs, hidden, device=device, dtype=dtype)
        self.blocks = nn.ModuleList(
            SimbaBlock(hidden, hidden * scale, activation, norm_eps=eps, device=device, dtype=dtype)
            for _ in range(blocks)
        )
        self.final_norm = nn.LayerNorm(hidden, eps=eps, device=device, dtype=dtype)
        self.output_layer = nn.Linear(hidden, self.num_outputs, device=device, dtype=dtype)
        self.output_act = make_activation(output_activation, device=device, dtype=dtype)

    @classmethod
    def from_spec(cls, spec: SimbaConfig | Mapping[str, Any], num_inputs: int, num_outputs: int,
                  **overrides: Any) -> EvolvableSimBa:
        """Build from a :class:`SimbaConfig` (or its dict); `overrides` replace constructor arguments."""
        config = spec if isinstance(spec, SimbaConfig) else SimbaConfig.model_validate(dict(spec))
        kwargs = config.model_dump(exclude={"arch"})
        kwargs.update(overrides)
        return cls(num_inputs, num_outputs, **kwargs)

    # ------------------------------------------------------------------ structure
    @property
    def hidden_size(self) -> int:
        """Width of the residual stream."""
        return int(self.input_layer.weight.shape[0])

    @property
    def num_blocks(self) -> int:
        """Residual blocks."""
        return len(self.blocks)

    @property
    def inner_size(self) -> int:
        """Width of every block's inner layer (``scale_factor * hidden_size``)."""
        return self.scale_factor * self.hidden_size

    @property
    def norm_eps(self) -> float:
        """The eps of every LayerNorm over the stream (1e-5 unless rescaled by growth)."""
        return float(self.final_norm.eps)

    def _config_body(self) -> dict[str, Any]:
        return {
            "num_inputs": self.num_inputs,
            "num_outputs": self.num_outputs,
            "hidden_size": self.hidden_size,
            "num_blocks": self.num_blocks,
            "activation": self.activation,
            "output_activation": self.output_activation,
            "scale_factor": self.scale_factor,
            "min_blocks": self.min_blocks,
            "max_blocks": self.max_blocks,
            "min_mlp_nodes": self.min_mlp_nodes,
            "max_mlp_nodes": self.max_mlp_nodes,
            "norm_eps": self.norm_eps,
            "input_shape": list(self.input_shape),
        }

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map ``[..., *input_shape]`` to ``[..., num_outputs]``."""
        if len(self.input_shape) != 1:
            x = x.reshape(*x.shape[: x.dim() - len(self.input_shape)], self.num_inputs)
        x = self.input_layer(x)
        for block in self.blocks:
            x = block(x)
        return self.output_act(self.output_layer(self.final_norm(x)))

    # ------------------------------------------------------------------ resizing
    def remap_inputs(self, index_map: IndexMap, generator: torch.Generator | None = None) -> None:
        """Change the input size: input j reads old input ``index_map[j]``, or is new (zero weights)."""
        self.input_layer = resize_linear(self.input_layer, index_map, kept(self.hidden_size), generator=generator)
        self.num_inputs = len(index_map)
        self.input_shape = (self.num_inputs,)

    def set_num_outputs(self, num_outputs: int, generator: torch.Generator | None = None) -> None:
        """Resize the output layer, keeping the leading outputs (new ones default-initialised)."""
        self.output_layer = resize_linear(self.output_layer, kept(self.hidden_size),
                                          overlap(self.num_outputs, num_outputs), generator=generator)
        self.num_outputs = int(num_outputs)

    def _resize_stream(self, new_width: int, generator: torch.Generator | None) -> None:
        """Grow (function-preserving, see the class docs) or shrink the stream to `new_width`."""
        old = self.hidden_size
        if new_width > old:
            stream = grown(old, new_width - old)
            inner = grown(old * self.scale_factor, (new_width - old) * self.scale_factor)
        else:
            stream, inner = kept(new_width), kept(new_width * self.scale_factor)
        self.input_layer = resize_linear(self.input_layer, kept(self.num_inputs), stream, mean_rows=True,
                                         generator=generator)
        for block in self.blocks:
            cast(SimbaBlock, block).resize(stream, inner, generator)
        self.final_norm = resize_layer_norm(self.final_norm, stream)
        self.output_layer = resize_linear(self.output_layer, stream, kept(self.num_outputs), generator=generator)

    # ------------------------------------------------------------------ mutations
    @mutation("layer", available=lambda self: len(self.blocks) < self.max_blocks)
    def add_block(self, position: int | None = None, *, rng: np.random.Generator) -> dict[str, Any]:
        """Insert an identity-initialised block at `position` (0: right after the input layer)."""
        generator = torch_generator(rng)  # drawn first: the same rng gives the same weights, sampled or replayed
        index = resolve_index(position, range(len(self.blocks) + 1), rng, "position")
        weight = self.output_layer.weight
        with global_rng_untouched(weight.device):
            block = SimbaBlock(self.hidden_size, self.inner_size, self.activation, norm_eps=self.norm_eps,
                               device=weight.device, dtype=weight.dtype)
        block.start_as_identity(generator)
        self.blocks.insert(index, block)
        return {"position": index}

    @mutation("layer", available=lambda self: len(self.blocks) > self.min_blocks)
    def remove_block(self, position: int | None = None, *, rng: np.random.Generator) -> dict[str, Any]:
        """Remove block `position` (the stream keeps its width, so nothing else changes)."""
        index = resolve_index(position, range(len(self.blocks)), rng, "position")
        del self.blocks[index]
        return {"position": index}

    @mutation("node", available=lambda self: self.hidden_size < self.max_mlp_nodes)
    def add_node(self, numb_new_nodes: int | None = None, *, rng: np.random.Generator) -> dict[str, Any]:
        """Widen the residual stream by `numb_new_nodes` (and each inner layer by scale_factor times
        as many), exactly function-preserving."""
        generator = torch_generator(rng)  # drawn first: the same rng gives the same weights, sampled or replayed
        count = resolve_count(numb_new_nodes, self.max_mlp_nodes - self.hidden_size, NODE_CHOICES, rng,
                              "numb_new_nodes")
        self._resize_stream(self.hidden_size + count, generator)
        return {"numb_new_nodes": count}

    @mutation("node", available=lambda self: self.hidden_size > self.min_mlp_nodes)
    def remove_node(self, numb_nodes: int | None = None, *, rng: np.random.Generator) -> dict[str, Any]:
        """Narrow the residual stream by `numb_nodes` (the leading units and their weights survive)."""
        count = resolve_count(numb_nodes, self.hidden_size - self.min_mlp_nodes, NODE_CHOICES, rng, "numb_nodes")
        self._resize_stream(self.hidden_size - count, None)
        return {"numb_nodes": count}

    @mutation("activation")
    def change_activation(self, activation: str | None = None, *, rng: np.random.Generator) -> dict[str, Any]:
        """Use `activation` (sampled when None) inside every block."""
        return change_block_activation(self, activation, rng)
