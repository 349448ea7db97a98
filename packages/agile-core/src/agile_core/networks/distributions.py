"""Action distributions for stochastic policies, over any leading (batch, time) dimensions.

Each distribution offers ``sample()``, ``mode()`` (the greedy action), ``log_prob(action)`` and
``entropy()``; log-probabilities and entropies are summed over the action's components, so
they have the leading shape only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

import torch
import torch.nn.functional as F

_LOG_2PI = math.log(2.0 * math.pi)


class ActionDistribution(Protocol):
    """What PPO-style algorithms need from a policy's action distribution."""

    def sample(self) -> torch.Tensor:
        """A random action."""
        ...

    def mode(self) -> torch.Tensor:
        """The most likely action."""
        ...

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        """Log-probability (density) of `action`."""
        ...

    def entropy(self) -> torch.Tensor:
        """Entropy of the distribution."""
        ...


def _masked_logits(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    if mask is None:
        return logits
    return logits.masked_fill(~mask.to(torch.bool), torch.finfo(logits.dtype).min)


class CategoricalDistribution:
    """One discrete choice among ``logits.shape[-1]``; `mask` (True = allowed) removes actions."""

    def __init__(self, logits: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        self.log_probs = F.log_softmax(_masked_logits(logits, mask), dim=-1)
        self.probs = self.log_probs.exp()

    def sample(self) -> torch.Tensor:
        """Integer actions of the leading shape, by inverse transform: one uniform draw per row,
        scaled to the row's total probability, picks the first action whose cumulative
        probability exceeds it (an action of probability 0 is never drawn). A few kernels,
        several times cheaper than ``torch.multinomial`` at acting sizes."""
        cumulative = self.probs.cumsum(dim=-1)
        total = cumulative[..., -1:]
        draw = torch.rand(total.shape, dtype=total.dtype, device=total.device).mul_(total)
        return (cumulative <= draw).sum(dim=-1)

    def mode(self) -> torch.Tensor:
        """The argmax action."""
        return self.probs.argmax(dim=-1)

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        """log p(action) for integer actions of the leading shape."""
        return self.log_probs.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        """-sum p log p (masked actions contribute 0)."""
        terms = torch.where(self.probs > 0, self.probs * self.log_probs, 0.0)
        return -terms.sum(dim=-1)


class MultiCategoricalDistribution:
    """Independent categorical choices, one per MultiDiscrete component (logits concatenated)."""

    def __init__(self, logits: torch.Tensor, nvec: Sequence[int], mask: torch.Tensor | None = None) -> None:
        sizes = [int(n) for n in nvec]
        masks = [None] * len(sizes) if mask is None else list(torch.split(mask, sizes, dim=-1))
        self.parts = [CategoricalDistribution(part, part_mask)
                      for part, part_mask in zip(torch.split(logits, sizes, dim=-1), masks, strict=True)]

    def sample(self) -> torch.Tensor:
        """Integer actions ``[..., len(nvec)]``."""
        return torch.stack([part.sample() for part in self.parts], dim=-1)

    def mode(self) -> torch.Tensor:
        """The argmax of every component."""
        return torch.stack([part.mode() for part in self.parts], dim=-1)

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        """Sum of the components' log-probabilities."""
        return torch.stack([part.log_prob(action[..., i]) for i, part in enumerate(self.parts)], dim=-1).sum(-1)

    def entropy(self) -> torch.Tensor:
        """Sum of the components' entropies."""
        return torch.stack([part.entropy() for part in self.parts], dim=-1).sum(-1)


class BernoulliDistribution:
    """Independent binary choices (MultiBinary), one logit each, over the last dimension."""

    def __init__(self, logits: torch.Tensor) -> None:
        self.logits = logits

    def sample(self) -> torch.Tensor:
        """Float 0/1 actions shaped like the logits."""
        return torch.bernoulli(torch.sigmoid(self.logits))

    def mode(self) -> torch.Tensor:
        """1 where p > 0.5."""
        return (self.logits > 0).to(self.logits.dtype)

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        """Sum over components of a log sigma(l) + (1 - a) log sigma(-l)."""
        action = action.to(self.logits.dtype)
        return (action * F.logsigmoid(self.logits) + (1 - action) * F.logsigmoid(-self.logits)).sum(-1)

    def entropy(self) -> torch.Tensor:
        """Sum over components of p softplus(-l) + (1 - p) softplus(l)."""
        p = torch.sigmoid(self.logits)
        return (p * F.softplus(-self.logits) + (1 - p) * F.softplus(self.logits)).sum(-1)


class DiagGaussianDistribution:
    """A Gaussian with independent components over the last dimension (mean and log-std)."""

    def __init__(self, mean: torch.Tensor, log_std: torch.Tensor) -> None:
        self.mean = mean
        self.log_std = log_std.expand_as(mean)

    def sample(self) -> torch.Tensor:
        """mean + std * N(0, 1) (not clipped: the caller clips to the action bounds)."""
        return self.mean + self.log_std.exp() * torch.randn_like(self.mean)

    def mode(self) -> torch.Tensor:
        """The mean."""
        return self.mean

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        """Sum over components of the normal log-density."""
        z = (action - self.mean) * torch.exp(-self.log_std)
        return (-0.5 * z.pow(2) - self.log_std - 0.5 * _LOG_2PI).sum(-1)

    def entropy(self) -> torch.Tensor:
        """Sum over components of 0.5 + 0.5 log(2 pi) + log std."""
        return (0.5 + 0.5 * _LOG_2PI + self.log_std).sum(-1)
