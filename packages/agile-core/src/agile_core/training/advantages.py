"""Advantage and return estimators for rollouts with autoreset rows and truncations.

All inputs are time-major tensors of shape ``[T, N]`` (``T`` rollout steps, ``N``
environments); the recursions run backwards over time and are vectorised over
environments.

Per row ``(t, n)`` the bootstrap target of the next state is

* ``0`` if the step terminated (``terminations[t, n]``; termination wins when both
  flags are set),
* ``truncation_values[t, n]`` (the value of the true final observation) if it was
  truncated,
* otherwise the value of the next row, ``values[t + 1, n]`` (``last_value[n]`` for
  the last row).

At a termination or truncation the recursion is cut: the next row belongs to a new
episode (or is an autoreset row). Rows with ``valid[t, n] == False`` (the autoreset
step of Gymnasium's next-step autoreset, whose action is ignored and reward is 0)
get advantage 0 and return equal to their stored value; they never feed into the
estimate of a valid row because a valid row is only followed by an invalid one when
it ended its episode.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["compute_gae", "compute_monte_carlo", "normalize_advantages"]


def _bootstrap(
    next_value: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    truncation_value: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``(bootstrap value, continues)`` of every environment, for one time step or (elementwise)
    for all of them."""
    bootstrap = torch.where(truncated, truncation_value, next_value)
    bootstrap = torch.where(terminated, torch.zeros_like(bootstrap), bootstrap)
    continues = (~(terminated | truncated)).to(next_value.dtype)
    return bootstrap, continues


def compute_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    terminations: torch.Tensor,
    truncations: torch.Tensor,
    truncation_values: torch.Tensor,
    valid: torch.Tensor,
    last_value: torch.Tensor,
    gamma: float | torch.Tensor,
    gae_lambda: float | torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation; returns ``(advantages, returns)`` of shape ``[T, N]``.

    ``gamma`` and ``gae_lambda`` are scalars or float64 ``[N]`` tensors (one per environment).

    ``A_t = delta_t + gamma * lambda * c_t * A_{t+1}`` with
    ``delta_t = r_t + gamma * b_t - V_t``, ``b_t`` the bootstrap target (see module
    docstring) and ``c_t = 0`` at a termination or truncation. ``returns = A + V``.
    Computed in float64 and returned in the dtype of ``values``.
    """
    dtype = values.dtype
    r, v = rewards.double(), values.double()
    if r.shape[0] == 0:
        return torch.zeros_like(values), values.clone()
    trunc_v, last_v = truncation_values.double(), last_value.double()
    bootstrap, continues = _bootstrap(torch.cat([v[1:], last_v.unsqueeze(0)]), terminations, truncations, trunc_v)
    deltas = r + gamma * bootstrap - v
    advantages = _backward_scan(deltas, gamma * gae_lambda * continues, valid)
    return advantages.to(dtype), (advantages + v).to(dtype)


def _backward_scan(deltas: torch.Tensor, carries: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """``x_t = deltas_t + carries_t * x_{t+1}`` backwards over time (``x_T = 0``), ``x_t = 0`` where
    not `valid`: everything but this recursion is computed for all steps at once, and the
    recursion itself runs on host arrays (a few numpy operations per step instead of a dozen
    tensor operations)."""
    d, c, ok = (tensor.detach().cpu().numpy() for tensor in (deltas, carries, valid))
    out = np.zeros_like(d)
    following = np.zeros_like(d[0])
    for t in range(d.shape[0] - 1, -1, -1):
        following = np.where(ok[t], d[t] + c[t] * following, 0.0)
        out[t] = following
    return torch.from_numpy(out).to(deltas.device)


def compute_monte_carlo(
    rewards: torch.Tensor,
    values: torch.Tensor,
    terminations: torch.Tensor,
    truncations: torch.Tensor,
    truncation_values: torch.Tensor,
    valid: torch.Tensor,
    last_value: torch.Tensor,
    gamma: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Discounted Monte-Carlo returns; returns ``(advantages, returns)`` of shape ``[T, N]``.

    ``G_t = r_t + gamma * b_t`` where ``b_t`` is ``G_{t+1}`` inside an episode, 0 at a
    termination, the final-observation value at a truncation and ``last_value`` after
    the last row of an unfinished episode. ``advantages = G - V`` (0 on invalid rows).
    """
    dtype = values.dtype
    r, v = rewards.double(), values.double()
    trunc_v = truncation_values.double()
    returns = torch.zeros_like(v)
    next_return = last_value.double()
    for t in reversed(range(r.shape[0])):
        bootstrap, _ = _bootstrap(next_return, terminations[t], truncations[t], trunc_v[t])
        ret = torch.where(valid[t], r[t] + gamma * bootstrap, v[t])
        returns[t] = ret
        next_return = ret
    return (returns - v).to(dtype), returns.to(dtype)


def normalize_advantages(
    advantages: torch.Tensor, valid: torch.Tensor, eps: float = 1e-8
) -> torch.Tensor:
    """Standardise ``advantages`` with the mean/std of the valid entries only.

    Uses the population standard deviation; invalid entries are set to 0.
    """
    selected = advantages[valid]
    if selected.numel() == 0:
        return torch.zeros_like(advantages)
    mean = selected.mean()
    std = selected.std(correction=0)
    normalized = (advantages - mean) / (std + eps)
    return torch.where(valid, normalized, torch.zeros_like(normalized))
