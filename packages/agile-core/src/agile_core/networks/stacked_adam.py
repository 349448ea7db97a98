"""Adam over stacked parameters: one update for ``P`` members, each with its own learning rate
and step count, numerically the same as ``P`` separate ``torch.optim.Adam`` steps.

The moments start from (and go back to) the members' own ``torch.optim.Adam`` states, so a
population can switch between batched and one-by-one learning at any point (e.g. around
selection and mutation) without losing optimizer state. Members that sit out a step (``active``
false) keep their parameters and moments unchanged, exactly as if ``step`` had not been called.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from agile_core.networks.stacked import (
    FlatParameters,
    NotStackableError,
    corner,
    member_parameters,
    padding_mask,
)

__all__ = ["StackedAdam", "clip_flat_grad_norm"]


def _adam_settings(optimizer: torch.optim.Optimizer) -> tuple[float, float, float]:
    if type(optimizer) is not torch.optim.Adam or len(optimizer.param_groups) != 1:
        raise NotStackableError("batched learning needs one plain torch.optim.Adam param group per member")
    group = optimizer.param_groups[0]
    if group["weight_decay"] or group["amsgrad"] or group["maximize"] or group.get("decoupled_weight_decay"):
        raise NotStackableError("batched Adam supports no weight decay, amsgrad or maximize")
    beta1, beta2 = group["betas"]
    return float(beta1), float(beta2), float(group["eps"])


class StackedAdam:
    """Adam for the parameters of a stacked module, mirroring the members' optimizers.

    The stacked parameters are moved into one flat ``[P, D]`` tensor (:class:`FlatParameters`),
    so a step is a few whole-population tensor operations.

    Args:
        stacked: The module from :func:`stack_modules` (its parameters are updated).
        members: The member networks, in population order.
        optimizers: Each member's ``torch.optim.Adam`` over its network's parameters.
    """

    def __init__(self, stacked: nn.Module, members: Sequence[nn.Module],
                 optimizers: Sequence[torch.optim.Optimizer]) -> None:
        settings = {_adam_settings(optimizer) for optimizer in optimizers}
        if len(settings) != 1:
            raise NotStackableError("the members' Adam betas or eps differ")
        self.beta1, self.beta2, self.eps = settings.pop()
        self.optimizers = list(optimizers)
        self.pairs = list(member_parameters(stacked, members))
        owned = [{id(p) for p in optimizer.param_groups[0]["params"]} for optimizer in optimizers]
        for _, targets in self.pairs:
            if any(target is not None and id(target) not in params for target, params in zip(targets, owned, strict=True)):
                raise NotStackableError("a member's optimizer does not own all of its network's parameters")
        self.flat = FlatParameters(stacked)
        self.padding = padding_mask(stacked, members, self.flat)
        # Per-member scalars stay in float64 numpy, as torch.optim.Adam computes them in Python floats.
        self.lr = np.array([float(opt.param_groups[0]["lr"]) for opt in optimizers], dtype=np.float64)
        self.exp_avg = torch.zeros_like(self.flat.data)
        self.exp_avg_sq = torch.zeros_like(self.flat.data)
        self.step_count = np.zeros(len(optimizers), dtype=np.float64)
        for member, optimizer in enumerate(self.optimizers):
            for index, (_, targets) in enumerate(self.pairs):
                target = targets[member]
                state = None if target is None else optimizer.state.get(target)
                if state and target is not None:
                    region = corner(target.shape)
                    self.flat.slice(self.exp_avg, index)[member][region] = state["exp_avg"]
                    self.flat.slice(self.exp_avg_sq, index)[member][region] = state["exp_avg_sq"]
                    # One optimizer, one param group: every tensor of a member has the same step.
                    self.step_count[member] = float(state["step"])
        # Row views per member for the fused kernel; steps as float32 tensors, as torch.optim keeps them.
        self.steps = torch.from_numpy(self.step_count.astype(np.float32)).to(self.flat.data.device)
        self.step_views = list(self.steps.unbind(0))
        self.param_rows = list(self.flat.data.unbind(0))
        self.grad_rows = list(self.grad.unbind(0))
        self.exp_avg_rows = list(self.exp_avg.unbind(0))
        self.exp_avg_sq_rows = list(self.exp_avg_sq.unbind(0))

    @property
    def parameters(self) -> torch.Tensor:
        """All stacked parameters as one flat tensor (the module reads views of it)."""
        return self.flat.data

    @property
    def grad(self) -> torch.Tensor:
        """Their gradients, flat."""
        assert self.flat.grad is not None
        return self.flat.grad

    def zero_grad(self) -> None:
        """Zero the stacked gradients (in place)."""
        self.flat.zero_grad()

    def mask_padding(self) -> None:
        """Zero the gradients of padding entries (call after backward, before clipping): padded
        members then keep exactly zero padding through every update."""
        if self.padding is not None:
            self.grad.mul_(self.padding)

    def step(self, active: torch.Tensor | Sequence[bool] | None = None) -> None:
        """One Adam update from the stacked gradients for the `active` members (bool ``[P]``; all when None).

        Each member's row is updated in place by PyTorch's fused Adam kernel with the member's own
        learning rate and step count (one kernel per member, no temporaries). Idle members'
        parameters and moments are left exactly as they were."""
        flags = [True] * len(self.optimizers) if active is None else \
            (active.tolist() if isinstance(active, torch.Tensor) else list(active))
        self.step_count += np.asarray(flags, dtype=np.float64)
        self.steps.copy_(torch.from_numpy(self.step_count))
        with torch.no_grad():
            for member, on in enumerate(flags):
                if on:
                    torch._fused_adam_(
                        [self.param_rows[member]], [self.grad_rows[member]], [self.exp_avg_rows[member]],
                        [self.exp_avg_sq_rows[member]], [], [self.step_views[member]], lr=float(self.lr[member]),
                        beta1=self.beta1, beta2=self.beta2, weight_decay=0.0, eps=self.eps, amsgrad=False,
                        maximize=False)

    def copy_to_members(self) -> None:
        """Write moments and step counts back into each member's ``torch.optim.Adam`` state."""
        for index, (_, targets) in enumerate(self.pairs):
            for member, (optimizer, target) in enumerate(zip(self.optimizers, targets, strict=True)):
                if self.step_count[member] == 0 or target is None:
                    continue
                region = corner(target.shape)
                optimizer.state[target] = {
                    "step": torch.tensor(float(self.step_count[member])),
                    "exp_avg": self.flat.slice(self.exp_avg, index)[member][region].detach().clone(),
                    "exp_avg_sq": self.flat.slice(self.exp_avg_sq, index)[member][region].detach().clone(),
                }


def clip_flat_grad_norm(flat: FlatParameters, max_norm: float | torch.Tensor) -> torch.Tensor:
    """Per-member ``clip_grad_norm_`` on the flat gradients (in place); return the ``[P]`` norms
    before clipping. `max_norm` is one threshold for all members or a ``[P]`` tensor of each
    member's own."""
    assert flat.grad is not None
    norms = torch.linalg.vector_norm(flat.grad, dim=1)
    flat.grad.mul_((max_norm / (norms + 1e-6)).clamp(max=1.0).unsqueeze(1))
    return norms
