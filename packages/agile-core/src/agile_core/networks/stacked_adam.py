"""Adam over stacked parameters: one update for ``P`` members, each with its own learning rate
and step count, numerically the same as ``P`` separate ``torch.optim.Adam`` steps.

The moments start from (and go back to) the members' own ``torch.optim.Adam`` states, so a
population can switch between batched and one-by-one learning at any point (e.g. around
selection and mutation) without losing optimizer state. Members that sit out a step (``active``
false) keep their parameters and moments unchanged, exactly as if ``step`` had not been called.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from agile_core.networks.stacked import NotStackableError, member_parameters

__all__ = ["StackedAdam", "clip_stacked_grad_norm"]


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
            if any(id(target) not in params for target, params in zip(targets, owned, strict=True)):
                raise NotStackableError("a member's optimizer does not own all of its network's parameters")
        like = self.pairs[0][0]
        self.lr = torch.tensor([float(opt.param_groups[0]["lr"]) for opt in optimizers], dtype=torch.float64)
        steps = []
        self.exp_avg: list[torch.Tensor] = []
        self.exp_avg_sq: list[torch.Tensor] = []
        for param, targets in self.pairs:
            states = [optimizer.state.get(target, {}) for optimizer, target in zip(optimizers, targets, strict=True)]
            self.exp_avg.append(torch.stack([s["exp_avg"] if s else torch.zeros_like(t)
                                             for s, t in zip(states, targets, strict=True)]).to(param))
            self.exp_avg_sq.append(torch.stack([s["exp_avg_sq"] if s else torch.zeros_like(t)
                                                for s, t in zip(states, targets, strict=True)]).to(param))
            steps.append([float(s["step"]) if s else 0.0 for s in states])
        # Every tensor of a member has taken the same number of steps (one optimizer, one group).
        self.step_count = torch.tensor(steps[0] if steps else [0.0] * len(optimizers), dtype=torch.float64)
        self.device = like.device

    def step(self, active: torch.Tensor | None = None) -> None:
        """One Adam update from the stacked ``.grad``s for the `active` members (bool ``[P]``; all when None)."""
        members = self.lr.shape[0]
        active_cpu = torch.ones(members, dtype=torch.bool) if active is None else active.to("cpu", torch.bool)
        self.step_count += active_cpu.to(torch.float64)
        step = self.step_count.clamp(min=1.0)
        bias_correction1 = 1 - self.beta1 ** step
        bias_correction2_sqrt = (1 - self.beta2 ** step).sqrt()
        step_size = (self.lr / bias_correction1).to(self.device, torch.float32)
        correction = bias_correction2_sqrt.to(self.device, torch.float32)
        mask = active_cpu.to(self.device)
        all_active = bool(active_cpu.all())
        with torch.no_grad():
            for (param, _), exp_avg, exp_avg_sq in zip(self.pairs, self.exp_avg, self.exp_avg_sq, strict=True):
                grad = param.grad
                if grad is None:
                    continue
                shape = (members, *([1] * (param.dim() - 1)))
                if all_active:
                    exp_avg.lerp_(grad, 1 - self.beta1)
                    exp_avg_sq.mul_(self.beta2).addcmul_(grad, grad, value=1 - self.beta2)
                else:
                    keep = mask.reshape(shape)
                    exp_avg.copy_(torch.where(keep, exp_avg.lerp(grad, 1 - self.beta1), exp_avg))
                    exp_avg_sq.copy_(torch.where(keep, exp_avg_sq * self.beta2 + (1 - self.beta2) * grad * grad,
                                                 exp_avg_sq))
                denom = (exp_avg_sq.sqrt() / correction.reshape(shape)).add_(self.eps)
                update = exp_avg / denom * step_size.reshape(shape)
                if not all_active:
                    update = update * keep
                param.sub_(update)

    def zero_grad(self) -> None:
        """Drop the stacked gradients."""
        for param, _ in self.pairs:
            param.grad = None

    def copy_to_members(self) -> None:
        """Write moments and step counts back into each member's ``torch.optim.Adam`` state."""
        for (_, targets), exp_avg, exp_avg_sq in zip(self.pairs, self.exp_avg, self.exp_avg_sq, strict=True):
            for index, (optimizer, target) in enumerate(zip(self.optimizers, targets, strict=True)):
                if self.step_count[index] == 0:
                    continue
                optimizer.state[target] = {
                    "step": torch.tensor(float(self.step_count[index])),
                    "exp_avg": exp_avg[index].detach().clone(),
                    "exp_avg_sq": exp_avg_sq[index].detach().clone(),
                }


def clip_stacked_grad_norm(parameters: Sequence[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Per-member ``clip_grad_norm_``: scale member ``p``'s gradients so their global norm is at
    most `max_norm`; return the ``[P]`` norms before clipping."""
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.zeros(0)
    members = grads[0].shape[0]
    norms = torch.stack([g.reshape(members, -1).norm(dim=1) for g in grads], dim=1).norm(dim=1)
    scale = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    for grad in grads:
        grad.mul_(scale.reshape(members, *([1] * (grad.dim() - 1))))
    return norms
