"""Advantage and return estimators: they live in :mod:`agile_core.training.advantages` (shared with
agile-marl's IPPO); re-exported here for the on-policy package."""

from agile_core.training.advantages import compute_gae, compute_monte_carlo, normalize_advantages

__all__ = ["compute_gae", "compute_monte_carlo", "normalize_advantages"]
