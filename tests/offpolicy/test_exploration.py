"""Exploration noise: Gaussian and Ornstein-Uhlenbeck processes, vectorised over sub-envs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agile_core.algorithms.exploration import (
    GaussianNoise,
    OrnsteinUhlenbeckNoise,
    make_action_noise,
)


# ---------------------------------------------------------------------------- Gaussian
def test_gaussian_shape_statistics_and_seeding() -> None:
    noise = GaussianNoise((2,), num_envs=4000, std=0.3, mean=0.1, rng=0)
    sample = noise.sample()
    assert sample.shape == (4000, 2)
    assert abs(sample.mean() - 0.1) < 0.02
    assert abs(sample.std() - 0.3) < 0.02
    again = GaussianNoise((2,), num_envs=4000, std=0.3, mean=0.1, rng=0).sample()
    np.testing.assert_array_equal(sample, again)
    assert not np.array_equal(noise.sample(), sample)  # fresh draws every step


def test_gaussian_is_uncorrelated_in_time_and_reset_is_harmless() -> None:
    noise = GaussianNoise(1, num_envs=2000, std=1.0, rng=1)
    first, second = noise.sample().ravel(), noise.sample().ravel()
    assert abs(np.corrcoef(first, second)[0, 1]) < 0.1
    noise.reset(np.array([True, False] * 1000))
    assert noise.sample().shape == (2000, 1)


# ---------------------------------------------------------------------------- Ornstein-Uhlenbeck
def test_ou_without_diffusion_decays_geometrically_to_the_mean() -> None:
    noise = OrnsteinUhlenbeckNoise(3, num_envs=2, sigma=0.0, mean=0.5, theta=0.2, dt=0.1, initial=2.0, rng=0)
    for step in range(1, 51):
        value = noise.sample()
        expected = 0.5 + (2.0 - 0.5) * (1 - 0.2 * 0.1) ** step
        np.testing.assert_allclose(value, expected, rtol=1e-12)


def test_ou_mean_reversion_and_stationary_spread_over_many_streams() -> None:
    theta, sigma, dt, mean = 1.0, 0.5, 0.05, -0.3
    noise = OrnsteinUhlenbeckNoise(1, num_envs=5000, sigma=sigma, mean=mean, theta=theta, dt=dt, initial=3.0, rng=2)
    trajectory = np.stack([noise.sample()[:, 0] for _ in range(200)])  # [time, stream]
    # Expected mean: mean + (x0 - mean) * (1 - theta dt)^t, for every t.
    steps = np.arange(1, 201)
    expected_mean = mean + (3.0 - mean) * (1 - theta * dt) ** steps
    np.testing.assert_allclose(trajectory.mean(axis=1), expected_mean, atol=0.03)
    # After 10 relaxation times the spread is the stationary one (discrete-time exact value).
    stationary_var = sigma**2 * dt / (1 - (1 - theta * dt) ** 2)
    assert abs(trajectory[-1].std() - math.sqrt(stationary_var)) < 0.02
    assert abs(noise.stationary_std - sigma / math.sqrt(2 * theta)) < 1e-12
    # Temporally correlated: consecutive values of a stream are close to each other.
    assert np.corrcoef(trajectory[-2], trajectory[-1])[0, 1] > 0.9


def test_ou_reset_restarts_only_the_selected_streams() -> None:
    noise = OrnsteinUhlenbeckNoise((2,), num_envs=4, sigma=1.0, theta=0.15, dt=0.5, rng=3)
    for _ in range(20):
        noise.sample()
    before = noise.state.copy()
    noise.reset(np.array([False, True, False, True]))
    np.testing.assert_array_equal(noise.state[[1, 3]], 0.0)
    np.testing.assert_array_equal(noise.state[[0, 2]], before[[0, 2]])
    noise.reset()
    np.testing.assert_array_equal(noise.state, 0.0)
    with pytest.raises(ValueError, match="3 entries for 4 noise streams"):
        noise.reset([True, False, True])


def test_ou_streams_are_independent_and_seeded() -> None:
    a = OrnsteinUhlenbeckNoise(1, num_envs=3, sigma=0.2, rng=7)
    b = OrnsteinUhlenbeckNoise(1, num_envs=3, sigma=0.2, rng=7)
    samples_a = np.stack([a.sample() for _ in range(10)])
    samples_b = np.stack([b.sample() for _ in range(10)])
    np.testing.assert_array_equal(samples_a, samples_b)
    assert not np.allclose(samples_a[:, 0], samples_a[:, 1])
    first = a.sample()
    first[:] = 99.0  # samples are copies: the caller cannot corrupt the process state
    assert not np.any(a.state == 99.0)


# ---------------------------------------------------------------------------- factory and validation
def test_factory_picks_the_process() -> None:
    ou = make_action_noise(True, (2,), 3, scale=0.2, mean=0.1, theta=0.3, dt=0.02, rng=0)
    assert isinstance(ou, OrnsteinUhlenbeckNoise)
    assert (ou.sigma, ou.mean, ou.theta, ou.dt, ou.shape) == (0.2, 0.1, 0.3, 0.02, (3, 2))
    gauss = make_action_noise(False, 2, 3, scale=0.2, rng=0)
    assert isinstance(gauss, GaussianNoise) and gauss.std == 0.2 and gauss.shape == (3, 2)


@pytest.mark.parametrize(("factory", "match"), [
    (lambda: GaussianNoise(1, num_envs=0), "num_envs"),
    (lambda: GaussianNoise(1, std=-1.0), "std"),
    (lambda: OrnsteinUhlenbeckNoise(1, sigma=-0.1), "sigma"),
    (lambda: OrnsteinUhlenbeckNoise(1, theta=-0.1), "theta"),
    (lambda: OrnsteinUhlenbeckNoise(1, dt=0.0), "dt"),
    (lambda: OrnsteinUhlenbeckNoise((0,)), "action_shape"),
])
def test_rejects_bad_parameters(factory, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        factory()
