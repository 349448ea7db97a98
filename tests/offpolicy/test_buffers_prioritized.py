"""Tests for PrioritizedReplayBuffer, the vectorised sum/min tree and beta annealing."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from agile_offpolicy.buffers import PrioritizedReplayBuffer, SumMinTree, beta_schedule

OBS = spaces.Box(-np.inf, np.inf, (4,), np.float32)
ACT = spaces.Discrete(2)


def _filled(
    n: int, max_size: int = 13, alpha: float = 0.6, seed: int = 0
) -> PrioritizedReplayBuffer:
    buf = PrioritizedReplayBuffer(max_size, OBS, ACT, alpha=alpha, seed=seed)
    ids = np.arange(n, dtype=np.float32)
    buf.add(np.repeat(ids[:, None], 4, 1), np.zeros(n), ids, np.zeros((n, 4)), np.zeros(n, bool))
    return buf


def _frequencies(
    buf: PrioritizedReplayBuffer, draws: int = 100_000, batch: int = 1000
) -> np.ndarray:
    rng = np.random.default_rng(123)
    idx = np.concatenate(
        [buf.sample(batch, beta=0.4, rng=rng).indices for _ in range(draws // batch)]
    )
    return np.bincount(idx, minlength=len(buf)) / idx.size


def test_sampling_frequencies_proportional_to_priorities() -> None:
    buf = _filled(10)  # capacity 13 -> tree base 16: unused leaves must never be drawn
    raw = np.arange(1, 11, dtype=np.float64)
    buf.update_priorities(np.arange(10), raw)
    expected = raw**0.6 / (raw**0.6).sum()
    np.testing.assert_allclose(buf.probabilities(), expected)
    freq = _frequencies(buf)
    assert freq.shape == (10,)  # only stored indices are ever sampled
    np.testing.assert_allclose(freq, expected, rtol=0.05)
    # chi-square goodness of fit (stratified sampling only lowers the variance)
    counts = freq * 100_000
    chi2 = (((counts - expected * 100_000) ** 2) / (expected * 100_000)).sum()
    assert chi2 < 27.9  # 99.9% quantile for 9 degrees of freedom


def test_priority_updates_change_distribution() -> None:
    buf = _filled(8, alpha=1.0)
    np.testing.assert_allclose(_frequencies(buf, 20_000), np.full(8, 1 / 8), rtol=0.05)
    buf.update_priorities([3, 5], [13.0, 7.0])  # others keep the initial max priority 1
    expected = np.array([1, 1, 1, 13, 1, 7, 1, 1]) / 26
    np.testing.assert_allclose(_frequencies(buf, 40_000), expected, rtol=0.06)


def test_importance_weights_formula() -> None:
    buf = _filled(12, alpha=0.7)
    raw = np.random.default_rng(0).uniform(0.1, 5.0, 12)
    buf.update_priorities(np.arange(12), torch.as_tensor(raw))
    beta = 0.55
    batch = buf.sample(64, beta=beta, rng=np.random.default_rng(1))
    n = len(buf)
    p = raw**0.7 / (raw**0.7).sum()
    w_all = (n * p) ** -beta
    expected = w_all[batch.indices] / w_all.max()
    assert batch.weights.dtype == torch.float32 and batch.weights.shape == (64,)
    np.testing.assert_allclose(batch.weights.numpy(), expected, rtol=1e-5)
    np.testing.assert_array_equal(batch.obs[:, 0].numpy(), batch.indices)
    assert buf.sample(8, beta=0.0).weights.eq(1).all()


def test_new_transitions_get_max_priority() -> None:
    buf = _filled(5, alpha=0.5)
    np.testing.assert_allclose(buf.tree.leaves(np.arange(5)), 1.0)
    buf.update_priorities([0, 1], [9.0, 0.25])
    assert buf.max_priority == 9.0
    idx = buf.add(np.zeros((2, 4)), np.zeros(2), np.zeros(2), np.zeros((2, 4)), np.zeros(2, bool))
    np.testing.assert_allclose(buf.tree.leaves(idx), 3.0)  # 9 ** 0.5
    buf.update_priorities([2], [0.0])  # clipped to min_priority, never zero
    assert buf.tree.leaves([2])[0] > 0
    with pytest.raises(ValueError):
        buf.update_priorities([0], [np.nan])


def test_masked_rows_and_wraparound_priorities() -> None:
    buf = _filled(13, max_size=13)
    buf.update_priorities(np.arange(13), np.full(13, 0.5))
    buf.update_priorities([4], [4.0])
    idx = buf.add(
        np.ones((3, 4)),
        np.zeros(3),
        np.zeros(3),
        np.ones((3, 4)),
        np.zeros(3, bool),
        mask=np.array([True, False, True]),
    )
    np.testing.assert_array_equal(idx, [0, 1])
    np.testing.assert_allclose(buf.tree.leaves([0, 1, 2]), [4.0**0.6, 4.0**0.6, 0.5**0.6])
    assert buf.tree.total == pytest.approx(buf.tree.leaves(np.arange(13)).sum())


def _check_tree(tree: SumMinTree) -> None:
    internal = np.arange(1, tree.base)
    np.testing.assert_allclose(
        tree.sums[internal], tree.sums[2 * internal] + tree.sums[2 * internal + 1]
    )
    np.testing.assert_array_equal(
        tree.mins[internal], np.minimum(tree.mins[2 * internal], tree.mins[2 * internal + 1])
    )


def test_tree_consistency_after_many_random_updates() -> None:
    rng = np.random.default_rng(0)
    cap = 1000
    tree = SumMinTree(cap)
    reference = np.zeros(cap)
    for _ in range(300):
        idx = rng.integers(0, cap, rng.integers(1, 64))  # duplicates included
        val = rng.uniform(0.01, 10.0, idx.size)
        tree.update(idx, val)
        for i, v in zip(idx, val, strict=True):  # sequential semantics: last write wins
            reference[i] = v
    _check_tree(tree)
    np.testing.assert_allclose(tree.leaves(np.arange(cap)), reference)
    assert tree.total == pytest.approx(reference.sum())
    assert tree.min == reference[reference > 0].min()
    assert (
        np.isinf(tree.mins[tree.base + cap :]).all() and (tree.sums[tree.base + cap :] == 0).all()
    )


def test_span_updates_across_ring_wrap() -> None:
    buf = _filled(11, max_size=13)
    buf.update_priorities(np.arange(11), np.linspace(0.2, 2.0, 11))
    idx = buf.add(np.ones((4, 4)), np.zeros(4), np.zeros(4), np.ones((4, 4)), np.zeros(4, bool))
    np.testing.assert_array_equal(idx, [11, 12, 0, 1])
    _check_tree(buf.tree)
    np.testing.assert_allclose(buf.tree.leaves(idx), 2.0**0.6)
    np.testing.assert_allclose(buf.tree.leaves([2, 10]), np.linspace(0.2, 2.0, 11)[[2, 10]] ** 0.6)
    tree = SumMinTree(100)
    tree.update_span(37, np.arange(1.0, 41.0))
    _check_tree(tree)
    assert tree.total == pytest.approx(820.0) and tree.min == 1.0
    np.testing.assert_array_equal(tree.leaves([36, 37, 76, 77]), [0.0, 1.0, 40.0, 0.0])


def test_find_prefix_matches_cumulative_sum() -> None:
    rng = np.random.default_rng(1)
    tree = SumMinTree(37)
    vals = rng.uniform(0.0, 3.0, 30)
    vals[[4, 5, 17]] = 0.0  # empty leaves inside the range must never be returned
    tree.update(np.arange(30), vals)
    mass = np.concatenate([rng.uniform(0, tree.total, 5000), [0.0, tree.total, np.cumsum(vals)[3]]])
    got = tree.find_prefix(mass)
    expected = np.minimum(np.searchsorted(np.cumsum(vals), mass[:-3], side="right"), 29)
    np.testing.assert_array_equal(got[:-3], expected)
    assert np.all(vals[got] > 0) and got.max() < 30


def test_state_dict_round_trip_keeps_priorities() -> None:
    src = _filled(9)
    src.update_priorities(np.arange(9), np.linspace(0.5, 3.0, 9))
    state = src.state_dict()
    dst = PrioritizedReplayBuffer(13, OBS, ACT, alpha=0.6)
    dst.load_state_dict(state)
    np.testing.assert_allclose(dst.probabilities(), src.probabilities())
    assert dst.max_priority == src.max_priority and dst.tree.min == src.tree.min
    _check_tree(dst.tree)


def test_beta_schedule() -> None:
    assert beta_schedule(0.4, 0, 100) == pytest.approx(0.4)
    assert beta_schedule(0.4, 50, 100) == pytest.approx(0.7)
    assert beta_schedule(0.4, 100, 100) == 1.0
    assert beta_schedule(0.4, 500, 100) == 1.0
    assert beta_schedule(0.4, 5, 0) == 1.0
