"""Returns and advantages of a :class:`~agile_onpolicy.rollout.buffer.RolloutBuffer`'s stored rows.

The stored flags are checked against the next-step autoreset contract, every truncation gets
its bootstrap value, and the estimators of :mod:`agile_core.training.advantages` (GAE or
Monte-Carlo) fill the buffer's ``advantages`` and ``returns``. Buffers of the same length can
share one GAE recursion (:func:`compute_returns_and_advantages_together`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import torch

from agile_core.training.advantages import compute_gae, compute_monte_carlo

if TYPE_CHECKING:
    from agile_onpolicy.rollout.buffer import RolloutBuffer

__all__ = ["TruncationBootstrap", "compute_returns_and_advantages", "compute_returns_and_advantages_together"]

TruncationBootstrap = Literal["explicit", "autoreset_row"]


def compute_returns_and_advantages(buffer: RolloutBuffer, last_value: Any, last_done: Any,
                                   truncation_bootstrap: TruncationBootstrap) -> None:
    """Fill `buffer`'s advantages and returns (see :meth:`RolloutBuffer.compute_returns_and_advantages`)."""
    rewards, values, term, trunc, trunc_values, valid, last_v = _estimator_inputs(
        buffer, last_value, last_done, truncation_bootstrap
    )
    if buffer.use_gae:
        adv, ret = compute_gae(
            rewards, values, term, trunc, trunc_values, valid, last_v, buffer.gamma, buffer.gae_lambda
        )
    else:
        adv, ret = compute_monte_carlo(
            rewards, values, term, trunc, trunc_values, valid, last_v, buffer.gamma
        )
    buffer._store_estimates(adv, ret)


def _estimator_inputs(
    buffer: RolloutBuffer, last_value: Any, last_done: Any, truncation_bootstrap: TruncationBootstrap
) -> tuple[torch.Tensor, ...]:
    """Check the stored rows and return what the estimators take: ``(rewards, values,
    terminations, truncations, truncation_values, valid, last_value)``."""
    n = buffer.size
    if n == 0:
        raise RuntimeError("cannot compute returns of an empty buffer")
    if truncation_bootstrap not in ("explicit", "autoreset_row"):
        raise ValueError(f"unknown truncation_bootstrap {truncation_bootstrap!r}")
    last_v = buffer._env_vector(last_value, torch.float32, "last_value")
    valid, term, trunc = buffer.valid[:n], buffer.terminations[:n], buffer.truncations[:n]
    _check_consistency(buffer, valid, term | trunc, last_done)
    trunc_values = _truncation_bootstrap(buffer, valid, term, trunc, last_v, truncation_bootstrap)
    return buffer.rewards[:n], buffer.values[:n], term, trunc, trunc_values, valid, last_v


def _check_consistency(buffer: RolloutBuffer, valid: torch.Tensor, done: torch.Tensor, last_done: Any) -> None:
    """Reject flag patterns that no (next-step or same-step) autoreset env produces."""
    broken = valid[:-1] & ~done[:-1] & ~valid[1:]
    if bool(broken.any()):
        step, env = (int(i) for i in broken.nonzero()[0])
        raise ValueError(
            f"row ({step}, env {env}) is valid and did not end its episode, but the next "
            "row is marked invalid; only the step after a termination/truncation is an "
            "autoreset step"
        )
    if last_done is not None:
        expected = done[-1] & valid[-1]
        given = buffer._env_vector(last_done, torch.bool, "last_done")
        if bool(((given != expected) & valid[-1]).any()):
            raise ValueError(
                "last_done disagrees with terminated|truncated stored on the last row"
            )


def _truncation_bootstrap(
    buffer: RolloutBuffer,
    valid: torch.Tensor,
    term: torch.Tensor,
    trunc: torch.Tensor,
    last_v: torch.Tensor,
    mode: TruncationBootstrap,
) -> torch.Tensor:
    """Return ``[n, num_envs]`` truncation bootstrap values, checking none is missing."""
    n = valid.shape[0]
    trunc_values = buffer.truncation_values[:n].clone()
    missing = valid & trunc & ~term & ~buffer._has_truncation_value[:n]
    if mode == "autoreset_row" and bool(missing.any()):
        next_values = torch.cat([buffer.values[1:n], last_v[None]], dim=0)
        next_is_autoreset = torch.cat([~valid[1:], torch.ones_like(valid[:1])], dim=0)
        fill = missing & next_is_autoreset
        trunc_values = torch.where(fill, next_values, trunc_values)
        missing = missing & ~fill
    if bool(missing.any()):
        step, env = (int(i) for i in missing.nonzero()[0])
        raise ValueError(
            f"no bootstrap value for the truncation at row ({step}, env {env}); pass "
            "final_value to add() or call set_truncation_values()"
        )
    return trunc_values


def compute_returns_and_advantages_together(
    buffers: Sequence[RolloutBuffer], last_values: Sequence[Any], last_dones: Sequence[Any]
) -> None:
    """``buffer.compute_returns_and_advantages(last_value, last_done)`` for every buffer, with one
    backward GAE recursion for all GAE buffers holding the same number of rows (side by side,
    each sub-env with its buffer's ``gamma`` and ``gae_lambda``; the same arithmetic, so the
    same results). Population loops use it to pay the recursion's per-step cost once."""
    together: dict[tuple[int, torch.device], list[tuple[RolloutBuffer, tuple[torch.Tensor, ...]]]] = {}
    for buffer, last_value, last_done in zip(buffers, last_values, last_dones, strict=True):
        if not buffer.use_gae:
            buffer.compute_returns_and_advantages(last_value, last_done)
            continue
        inputs = _estimator_inputs(buffer, last_value, last_done, "explicit")
        together.setdefault((buffer.size, buffer.device), []).append((buffer, inputs))
    for (_, device), members in together.items():
        columns = [torch.cat(parts, dim=-1) for parts in zip(*(inputs for _, inputs in members), strict=True)]
        gamma, gae_lambda = (
            torch.cat([torch.full((b.num_envs,), getattr(b, name), dtype=torch.float64, device=device)
                       for b, _ in members])
            for name in ("gamma", "gae_lambda")
        )
        rewards, values, term, trunc, trunc_values, valid, last_v = columns
        adv, ret = compute_gae(rewards, values, term, trunc, trunc_values, valid, last_v, gamma, gae_lambda)
        for (buffer, _), a, r in zip(members, adv.split([b.num_envs for b, _ in members], dim=1),
                                     ret.split([b.num_envs for b, _ in members], dim=1), strict=True):
            buffer._store_estimates(a, r)
