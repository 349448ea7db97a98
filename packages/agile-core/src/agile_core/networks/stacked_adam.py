"""Adam over stacked parameters: one update for ``P`` members, each with its own learning rate
and step count, numerically the same as ``P`` separate ``torch.optim.Adam`` steps.

The moments start from the members' own ``torch.optim.Adam`` states, which then become views of
the stacked moments (as the members' parameters become views of the stacked parameters, see
:func:`~agile_core.networks.stacked.bind_members`): a member's optimizer state is always current,
for checkpoints, cloning and mutation alike, with nothing to copy back. Members that sit out a
step (``active`` false) keep their parameters and moments unchanged, exactly as if ``step`` had
not been called. Each member's learning rate is read from its optimizer at every step, so a
learning-rate mutation takes effect at once.

The update uses PyTorch's fused Adam kernel (``torch._fused_adam_``, tested with torch 2.14)
where this torch has it, and the same arithmetic in public tensor operations where it does not.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from agile_core.networks.stacked import (
    FlatParameters,
    NotStackableError,
    bind_members,
    corner,
    member_parameters,
    padding_mask,
)

_FUSED_ADAM = getattr(torch, "_fused_adam_", None)
"""PyTorch's private fused Adam kernel, or None where this torch lacks it (then public ops)."""

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
        bind_members(stacked, members)
        self._bind_states()

    def _bind_states(self) -> None:
        """Make each member optimizer's state for each of its parameters views of the stacked
        moments and step count (a member that shares one optimizer over several stacked rows, e.g.
        twin critics, gets each parameter's state from the row holding it)."""
        for index, (_, targets) in enumerate(self.pairs):
            exp_avg, exp_avg_sq = self.flat.slice(self.exp_avg, index), self.flat.slice(self.exp_avg_sq, index)
            for member, (optimizer, target) in enumerate(zip(self.optimizers, targets, strict=True)):
                if target is None:
                    continue
                region = corner(target.shape)
                optimizer.state[target] = {"step": self.step_views[member], "exp_avg": exp_avg[member][region],
                                           "exp_avg_sq": exp_avg_sq[member][region]}

    def states_bound(self) -> bool:
        """Whether every member optimizer still holds the state views this one gave it (a
        restored or rebuilt optimizer state does not)."""
        _, targets = self.pairs[0]
        exp_avg = self.flat.slice(self.exp_avg, 0)
        for member, (optimizer, target) in enumerate(zip(self.optimizers, targets, strict=True)):
            state = None if target is None else optimizer.state.get(target)
            if target is not None and (state is None or state["exp_avg"].data_ptr() != exp_avg[member].data_ptr()):
                return False
        return True

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

        Each member's row is updated in place with the member's own learning rate (read from its
        optimizer now) and step count, by PyTorch's fused Adam kernel where available (one call for
        the members that share a learning rate, each row with its own step; no temporaries). Idle members' parameters and moments are left exactly as they were."""
        flags = [True] * len(self.optimizers) if active is None else \
            (active.tolist() if isinstance(active, torch.Tensor) else list(active))
        if all(flags):
            self.step_count += 1.0
            self.steps.add_(1.0)  # counts stay exact integers in float32 up to 2**24 steps
        else:
            self.step_count += np.asarray(flags, dtype=np.float64)
            self.steps.copy_(torch.from_numpy(self.step_count))
        by_lr: dict[float, list[int]] = {}  # members sharing a learning rate take one kernel call
        for member, on in enumerate(flags):
            if on:
                by_lr.setdefault(float(self.optimizers[member].param_groups[0]["lr"]), []).append(member)
        with torch.no_grad():
            for lr, members in by_lr.items():
                if _FUSED_ADAM is None:
                    for member in members:
                        self._public_adam(member, lr)
                    continue
                _FUSED_ADAM([self.param_rows[m] for m in members], [self.grad_rows[m] for m in members],
                            [self.exp_avg_rows[m] for m in members], [self.exp_avg_sq_rows[m] for m in members], [],
                            [self.step_views[m] for m in members], lr=lr, beta1=self.beta1, beta2=self.beta2,
                            weight_decay=0.0, eps=self.eps, amsgrad=False, maximize=False)

    def _public_adam(self, member: int, lr: float) -> None:
        """The Adam update of one member's row in public tensor operations (torch.optim.Adam's
        single-tensor arithmetic)."""
        step = float(self.step_count[member])
        grad, exp_avg, exp_avg_sq = self.grad_rows[member], self.exp_avg_rows[member], self.exp_avg_sq_rows[member]
        exp_avg.lerp_(grad, 1.0 - self.beta1)
        exp_avg_sq.mul_(self.beta2).addcmul_(grad, grad, value=1.0 - self.beta2)
        bias_correction1 = 1.0 - self.beta1 ** step
        bias_correction2_sqrt = (1.0 - self.beta2 ** step) ** 0.5
        denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(self.eps)
        self.param_rows[member].addcdiv_(exp_avg, denom, value=-lr / bias_correction1)


def clip_flat_grad_norm(flat: FlatParameters, max_norm: float | torch.Tensor) -> torch.Tensor:
    """Per-member ``clip_grad_norm_`` on the flat gradients (in place); return the ``[P]`` norms
    before clipping. `max_norm` is one threshold for all members or a ``[P]`` tensor of each
    member's own."""
    assert flat.grad is not None
    norms = torch.linalg.vector_norm(flat.grad, dim=1, keepdim=True)
    scale = (norms + 1e-6).reciprocal_()
    scale.mul_(max_norm if not isinstance(max_norm, torch.Tensor) else max_norm.reshape(-1, 1))
    flat.grad.mul_(scale.clamp_(max=1.0))
    return norms.squeeze(1)
