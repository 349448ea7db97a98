"""Storage of recurrent hidden states per rollout step.

Policies hold their recurrent state in their own convention, e.g. an LSTM's
``(h, c)`` with shape ``[num_layers, num_envs, hidden_size]`` where the environment
(batch) axis is dimension 1. :class:`HiddenStateStore` keeps, for every rollout
step, one such state per leaf, stored internally as ``[num_steps, num_envs, *rest]``
(the batch axis moved next to the time axis) so that the state of any
``(step, env)`` pair can be gathered cheaply. Gathered states are handed back in
the policy's convention, with the batch axis at ``batch_dim`` again.

The structure of the state is given by ``shapes``:

* a single shape (a tuple of ints) → the state is one tensor;
* a sequence of shapes → the state is a tuple of tensors (e.g. LSTM ``(h, c)``);
* a mapping ``name -> shape`` → the state is a dict of tensors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from numbers import Integral
from typing import Any, TypeAlias

import torch

from agile_core.training.tensor_tree import TensorTree, map_tree, write_row

__all__ = ["HiddenShapes", "HiddenStateStore"]

Shape: TypeAlias = tuple[int, ...]
HiddenShapes: TypeAlias = Shape | Sequence[Shape] | Mapping[str, Shape]


def _is_shape(obj: Any) -> bool:
    """True for a non-empty sequence of integers (a tuple, list or ``torch.Size``)."""
    return (
        isinstance(obj, Sequence)
        and len(obj) > 0
        and all(isinstance(d, Integral) and not isinstance(d, bool) for d in obj)
    )


class HiddenStateStore:
    """Per-step recurrent-state storage for ``num_steps`` steps of ``num_envs`` environments."""

    def __init__(
        self,
        shapes: HiddenShapes,
        num_steps: int,
        num_envs: int,
        device: torch.device,
        batch_dim: int = 1,
    ) -> None:
        self.batch_dim = batch_dim
        self.num_envs = num_envs
        self.storage: TensorTree = self._allocate(shapes, num_steps, device)

    def _allocate(self, shapes: Any, num_steps: int, device: torch.device) -> TensorTree:
        if isinstance(shapes, Mapping):
            return {str(k): self._allocate(v, num_steps, device) for k, v in shapes.items()}
        if not _is_shape(shapes):
            if isinstance(shapes, Sequence) and len(shapes) > 0:
                return tuple(self._allocate(sub, num_steps, device) for sub in shapes)
            raise ValueError(f"invalid hidden_state_shapes: {shapes!r}")
        shape = tuple(int(d) for d in shapes)
        if not -len(shape) <= self.batch_dim < len(shape):
            raise ValueError(f"hidden_batch_dim {self.batch_dim} out of range for shape {shape}")
        if shape[self.batch_dim] != self.num_envs:
            raise ValueError(
                f"hidden state shape {shape} must have num_envs={self.num_envs} "
                f"at dimension {self.batch_dim}"
            )
        rest = shape[: self.batch_dim % len(shape)] + shape[self.batch_dim % len(shape) + 1 :]
        return torch.zeros((num_steps, self.num_envs, *rest), dtype=torch.float32, device=device)

    def write(self, row: int, hidden: Any) -> None:
        """Store the policy-convention state ``hidden`` (batch axis at ``batch_dim``) at ``row``."""

        def _to_env_major(leaf: torch.Tensor, value: Any) -> torch.Tensor:
            tensor = torch.as_tensor(value)
            dim = self.batch_dim % max(tensor.dim(), 1)
            return torch.movedim(tensor, dim, 0) if tensor.dim() == leaf.dim() - 1 else tensor

        env_major = map_tree(_to_env_major, self.storage, hidden)
        write_row(self.storage, row, env_major, "hidden")

    def write_rows(self, rows: slice, hidden: Any) -> None:
        """Store ``k`` steps of states at ``rows``: leaves in policy convention with a leading ``k``."""

        def _to_env_major(leaf: torch.Tensor, value: Any) -> torch.Tensor:
            tensor = torch.as_tensor(value)
            return torch.movedim(tensor, 1 + self.batch_dim % (tensor.dim() - 1), 1)

        write_row(self.storage, rows, map_tree(_to_env_major, self.storage, hidden), "hidden")

    def gather(self, steps: torch.Tensor, envs: torch.Tensor) -> TensorTree:
        """Return the states stored at ``(steps[i], envs[i])`` in policy convention.

        The result has the batch axis (of size ``len(steps)``) at ``batch_dim`` and is
        contiguous, ready to be passed as an initial state to ``nn.LSTM``/``nn.GRU``.
        """

        def _gather(leaf: torch.Tensor) -> torch.Tensor:
            picked = leaf[steps, envs]
            dim = self.batch_dim % picked.dim()
            return torch.movedim(picked, 0, dim).contiguous()

        return map_tree(_gather, self.storage)
