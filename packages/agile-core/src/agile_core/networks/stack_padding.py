"""Members' tensors stacked along a leading member axis, each in the leading corner of the stack
and zero-padded to the widest member: what every population layer (linear, noisy, LSTM...) builds
its stacked weights with."""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["NotStackableError", "corner", "stack_padded"]


class NotStackableError(TypeError):
    """The networks cannot run as one stacked computation (different architectures, or a layer
    type without a population version)."""


def corner(shape: Sequence[int]) -> tuple[slice, ...]:
    """The index of a member's ``shape`` in the leading corner of a (padded) stacked slice."""
    return tuple(slice(0, int(size)) for size in shape)


def stack_padded(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """``[P, *max_shape]``: the tensors stacked, each zero-padded at the end of every dimension."""
    if len({tuple(t.shape) for t in tensors}) == 1:
        return torch.stack([t.detach() for t in tensors]).clone()
    if len({t.dim() for t in tensors}) != 1:
        raise NotStackableError("the members' parameters differ in rank")
    shape = [max(sizes) for sizes in zip(*(t.shape for t in tensors), strict=True)]
    stacked = tensors[0].new_zeros(len(tensors), *shape)
    for index, tensor in enumerate(tensors):
        stacked[index][corner(tensor.shape)] = tensor.detach()
    return stacked
