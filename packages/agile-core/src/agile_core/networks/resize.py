"""Tensor surgery for mutations: copy the surviving weights of a layer into a resized one.

New modules are created without default initialisation (every value is copied or drawn from
the given generator), so mutations never consume the global torch RNG.

An *index map* lists, for every unit of the resized dimension, the old unit it is copied from,
or ``None`` for a new unit. Growing appends new units (``grown``); shrinking keeps the leading
units (``kept``), so the overlapping weights always survive.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar, cast

import torch
from torch import nn

M = TypeVar("M", bound=nn.Module)

IndexMap = Sequence[int | None]


def grown(size: int, extra: int) -> list[int | None]:
    """Keep all `size` units and append `extra` new ones."""
    return [*range(size), *([None] * extra)]


def kept(size: int) -> list[int | None]:
    """Keep the first `size` units."""
    return list(range(size))


def overlap(old: int, new: int) -> list[int | None]:
    """Map a dimension of size `old` to size `new`: the shared leading units copy, the rest are new."""
    return [j if j < old else None for j in range(new)]


def gate_blocks(index: IndexMap, old_size: int, blocks: int = 4) -> list[int | None]:
    """Repeat an index map over `blocks` stacked blocks (the i, f, g, o gates of an LSTM)."""
    return [
        None if src is None else block * old_size + src
        for block in range(blocks)
        for src in index
    ]


def uniform(shape: Sequence[int], bound: float, like: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """U(-bound, bound) values of `shape` on `like`'s device and dtype (drawn on CPU from `generator`;
    nothing is drawn for a meta tensor)."""
    if like.device.type == "meta":
        return torch.empty(tuple(shape), device="meta", dtype=like.dtype)
    values = torch.empty(tuple(shape), dtype=torch.float64).uniform_(-bound, bound, generator=generator)
    return values.to(device=like.device, dtype=like.dtype)


def remap(tensor: torch.Tensor, dim: int, index: IndexMap, fill: torch.Tensor | None = None) -> torch.Tensor:
    """Resize `tensor` along `dim` following `index`; new entries come from `fill` (zeros if None)."""
    shape = list(tensor.shape)
    shape[dim] = len(index)
    if fill is None:
        out = torch.zeros(shape, device=tensor.device, dtype=tensor.dtype)
    else:
        out = fill.detach().to(device=tensor.device, dtype=tensor.dtype).expand(shape).clone()
    targets = [j for j, src in enumerate(index) if src is not None]
    if targets:
        sources = [index[j] for j in targets]
        dst = torch.tensor(targets, device=tensor.device, dtype=torch.long)
        src = torch.tensor(sources, device=tensor.device, dtype=torch.long)
        out.index_copy_(dim, dst, tensor.detach().index_select(dim, src))
    return out


def new_units(index: IndexMap) -> int:
    """How many units of an index map are new."""
    return sum(src is None for src in index)


def _fill_rows(weight: torch.Tensor, bias: torch.Tensor | None, rows: int, mean_rows: bool,
               generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Initial values for new output units: the mean of the old units, or default uniform init."""
    if mean_rows:
        w_fill = weight.mean(dim=0, keepdim=True).expand(rows, *weight.shape[1:])
        b_fill = None if bias is None else bias.mean().expand(rows)
        return w_fill, b_fill
    fan_in = math.prod(weight.shape[1:])
    bound = 1.0 / math.sqrt(max(fan_in, 1))
    w_fill = uniform((rows, *weight.shape[1:]), bound, weight, generator)
    b_fill = None if bias is None else uniform((rows,), bound, weight, generator)
    return w_fill, b_fill


def remap_weight_bias(
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    in_map: IndexMap,
    out_map: IndexMap,
    *,
    mean_rows: bool = False,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Resize a `[out, in, ...]` weight and its bias: new inputs get zero weights (they contribute
    nothing), new outputs get mean-of-old rows (`mean_rows`) or default uniform init."""
    w = remap(weight, 1, in_map)
    w_fill: torch.Tensor | None = None
    b_fill: torch.Tensor | None = None
    if new_units(out_map):
        w_fill, b_fill = _fill_rows(w, None if bias is None else bias.detach(), len(out_map), mean_rows, generator)
    w = remap(w, 0, out_map, w_fill)
    b = None if bias is None else remap(bias, 0, out_map, b_fill)
    return w, b


def uninitialised(module_cls: type[M], *args: Any, device: torch.device | str, dtype: torch.dtype | None = None,
                  **kwargs: Any) -> M:
    """``module_cls(*args, **kwargs)`` with its parameters and buffers left as ``torch.empty`` on
    `device`: no initialisation and no draw on the global RNG, for modules whose values are then
    overwritten. (torch's ``skip_init`` does the same through ``to_empty``, whose first call
    imports sympy: 0.3-0.4 s of a run's first architecture mutation.)"""
    module = module_cls(*args, device="meta", dtype=dtype, **kwargs)
    for sub in module.modules():
        for name, param in list(sub.named_parameters(recurse=False)):
            setattr(sub, name, nn.Parameter(torch.empty(param.shape, device=device, dtype=param.dtype),
                                            requires_grad=param.requires_grad))
        for name, buffer in list(sub.named_buffers(recurse=False)):
            sub.register_buffer(name, torch.empty(buffer.shape, device=device, dtype=buffer.dtype),
                                persistent=name not in sub._non_persistent_buffers_set)
    return module


def _assign(module: nn.Linear | nn.Conv2d | nn.LayerNorm, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    with torch.no_grad():
        module.weight.copy_(weight)
        if bias is not None and module.bias is not None:
            module.bias.copy_(bias)


def resize_linear(
    layer: nn.Linear,
    in_map: IndexMap,
    out_map: IndexMap,
    *,
    mean_rows: bool = False,
    generator: torch.Generator | None = None,
) -> nn.Linear:
    """A new Linear with `layer`'s surviving weights copied (see :func:`remap_weight_bias`)."""
    weight, bias = remap_weight_bias(layer.weight, layer.bias, in_map, out_map, mean_rows=mean_rows, generator=generator)
    new = uninitialised(nn.Linear, len(in_map), len(out_map), bias=layer.bias is not None,
                    device=layer.weight.device, dtype=layer.weight.dtype)
    _assign(new, weight, bias)
    return new


def resize_conv(
    layer: nn.Conv2d,
    in_map: IndexMap,
    out_map: IndexMap,
    *,
    mean_rows: bool = False,
    generator: torch.Generator | None = None,
) -> nn.Conv2d:
    """A new Conv2d (same kernel, stride, padding) with the surviving filters copied."""
    weight, bias = remap_weight_bias(layer.weight, layer.bias, in_map, out_map, mean_rows=mean_rows, generator=generator)
    new = uninitialised(nn.Conv2d, len(in_map), len(out_map), kernel_size=cast(Any, layer.kernel_size),
                    stride=cast(Any, layer.stride), padding=cast(Any, layer.padding), bias=layer.bias is not None,
                    device=layer.weight.device, dtype=layer.weight.dtype)
    _assign(new, weight, bias)
    return new


def resize_layer_norm(norm: nn.LayerNorm, out_map: IndexMap) -> nn.LayerNorm:
    """Resize a LayerNorm over the units of `out_map`.

    When units are only appended (and the new units' pre-norm values equal the mean of the old
    ones, see ``mean_rows``), the statistics of the old units are preserved exactly: the mean is
    unchanged and the variance shrinks by ``n/(n+k)``; scaling the old gains by ``sqrt(n/(n+k))``
    and eps by ``n/(n+k)`` compensates exactly. Otherwise the surviving gains are copied.
    """
    old = int(norm.normalized_shape[0])
    new_size = len(out_map)
    weight = remap(norm.weight, 0, out_map, torch.ones(1))
    bias = remap(norm.bias, 0, out_map)
    eps = norm.eps
    if list(out_map[:old]) == list(range(old)) and new_size > old and new_units(out_map) == new_size - old:
        ratio = old / new_size
        weight[:old] *= math.sqrt(ratio)
        eps = eps * ratio
    resized = type(norm)(new_size, eps=eps, device=norm.weight.device, dtype=norm.weight.dtype)
    _assign(resized, weight, bias)
    return resized


@contextmanager
def global_rng_untouched(device: torch.device) -> Iterator[None]:
    """Leave the global torch RNG (CPU, and `device`'s when CUDA) as it was: for building modules
    whose default initialisation is then overwritten from a mutation's own generator."""
    devices = [device.index if device.index is not None else torch.cuda.current_device()] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        yield


def partial_identity(rows: int, cols: int, like: torch.Tensor) -> torch.Tensor:
    """A `[rows, cols]` matrix with ones on the leading diagonal (an identity shortcut)."""
    return torch.eye(rows, cols, device=like.device, dtype=like.dtype)
