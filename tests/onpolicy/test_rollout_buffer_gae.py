"""Advantage/return computation of the rollout buffer: hand-computed and naive references."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from agile_onpolicy.rollout import RolloutBuffer

GAMMA, LAMBDA = 0.9, 0.8

# Hand-built 2 envs x 6 steps trajectory (rows = steps, columns = envs).
# env 0: terminates at step 2; step 3 is its autoreset row; a new episode runs 4-5.
# env 1: truncated at step 3 with V(true final obs) = 1.2; step 4 is its autoreset row;
#        a new episode starts at step 5. The autoreset row's stored value (1.5) differs
#        from the final value on purpose: the explicit one must be used.
REWARDS = [[1.0, 0.5], [0.0, 1.0], [2.0, -1.0], [0.0, 1.0], [1.0, 0.0], [1.0, 2.0]]
VALUES = [[0.5, 1.0], [0.4, 0.8], [0.3, 0.6], [0.9, 0.7], [0.2, 1.5], [0.1, 0.3]]
TERMINATED = [[0, 0], [0, 0], [1, 0], [0, 0], [0, 0], [0, 0]]
TRUNCATED = [[0, 0], [0, 0], [0, 0], [0, 1], [0, 0], [0, 0]]
VALID = [[1, 1], [1, 1], [1, 1], [0, 1], [1, 0], [1, 1]]
FINAL_VALUE_ENV1_STEP3 = 1.2
LAST_VALUE = [0.6, 0.4]

# GAE by hand, gamma * lambda = 0.72.
# env 0:
#   A5 = 1 + 0.9*0.6 - 0.1                        = 1.44
#   A4 = (1 + 0.9*0.1 - 0.2) + 0.72*1.44          = 0.89 + 1.0368 = 1.9268
#   A3 = 0 (autoreset row)
#   A2 = 2 + 0 - 0.3 (terminated, no bootstrap)   = 1.7
#   A1 = (0 + 0.9*0.3 - 0.4) + 0.72*1.7           = -0.13 + 1.224 = 1.094
#   A0 = (1 + 0.9*0.4 - 0.5) + 0.72*1.094         = 0.86 + 0.78768 = 1.64768
# env 1:
#   A5 = 2 + 0.9*0.4 - 0.3                        = 2.06
#   A4 = 0 (autoreset row)
#   A3 = 1 + 0.9*1.2 - 0.7 (truncated, bootstrap) = 1.38
#   A2 = (-1 + 0.9*0.7 - 0.6) + 0.72*1.38         = -0.97 + 0.9936 = 0.0236
#   A1 = (1 + 0.9*0.6 - 0.8) + 0.72*0.0236        = 0.74 + 0.016992 = 0.756992
#   A0 = (0.5 + 0.9*0.8 - 1.0) + 0.72*0.756992    = 0.22 + 0.54503424 = 0.76503424
EXPECTED_GAE_ADV = [
    [1.64768, 0.76503424],
    [1.094, 0.756992],
    [1.7, 0.0236],
    [0.0, 1.38],
    [1.9268, 0.0],
    [1.44, 2.06],
]
# returns = A + V (on autoreset rows: the stored value)
EXPECTED_GAE_RET = [
    [2.14768, 1.76503424],
    [1.494, 1.556992],
    [2.0, 0.6236],
    [0.9, 2.08],
    [2.1268, 1.5],
    [1.54, 2.36],
]
# Monte-Carlo returns by hand:
# env 0: G5 = 1 + 0.9*0.6 = 1.54; G4 = 1 + 0.9*1.54 = 2.386; G3 = V3 = 0.9 (autoreset row);
#        G2 = 2 (terminated); G1 = 0 + 0.9*2 = 1.8; G0 = 1 + 0.9*1.8 = 2.62
# env 1: G5 = 2 + 0.9*0.4 = 2.36; G4 = V4 = 1.5 (autoreset row); G3 = 1 + 0.9*1.2 = 2.08;
#        G2 = -1 + 0.9*2.08 = 0.872; G1 = 1 + 0.9*0.872 = 1.7848; G0 = 0.5 + 0.9*1.7848 = 2.10632
EXPECTED_MC_RET = [
    [2.62, 2.10632],
    [1.8, 1.7848],
    [2.0, 0.872],
    [0.9, 2.08],
    [2.386, 1.5],
    [1.54, 2.36],
]
# advantages = G - V, 0 on autoreset rows
EXPECTED_MC_ADV = [
    [2.12, 1.10632],
    [1.4, 0.9848],
    [1.7, 0.272],
    [0.0, 1.38],
    [2.186, 0.0],
    [1.44, 2.06],
]


def _hand_buffer(use_gae: bool, via_add: bool = True) -> RolloutBuffer:
    buf = RolloutBuffer(
        6,
        2,
        spaces.Box(-1.0, 1.0, (3,)),
        spaces.Discrete(2),
        gamma=GAMMA,
        gae_lambda=LAMBDA,
        use_gae=use_gae,
    )
    for t in range(6):
        final_value = [0.0, FINAL_VALUE_ENV1_STEP3] if (t == 3 and via_add) else None
        buf.add(
            np.full((2, 3), t / 10, dtype=np.float32),
            np.array([0, 1]),
            np.array(REWARDS[t]),
            np.array(TERMINATED[t], dtype=bool),
            np.array(TRUNCATED[t], dtype=bool),
            torch.tensor(VALUES[t]),
            torch.zeros(2),
            np.array(VALID[t], dtype=bool),
            final_value=final_value,
        )
    if not via_add:
        buf.set_truncation_values(3, np.array([False, True]), [FINAL_VALUE_ENV1_STEP3])
    return buf


def _close(actual: torch.Tensor, expected: list[list[float]]) -> None:
    torch.testing.assert_close(
        actual.double(), torch.tensor(expected, dtype=torch.float64), atol=1e-6, rtol=0
    )


@pytest.mark.parametrize("via_add", [True, False])
def test_gae_matches_hand_computed_trajectory(via_add: bool) -> None:
    buf = _hand_buffer(use_gae=True, via_add=via_add)
    buf.compute_returns_and_advantages(torch.tensor(LAST_VALUE), last_done=[False, False])
    _close(buf.advantages, EXPECTED_GAE_ADV)
    _close(buf.returns, EXPECTED_GAE_RET)


def test_monte_carlo_matches_hand_computed_trajectory() -> None:
    buf = _hand_buffer(use_gae=False)
    buf.compute_returns_and_advantages(np.array(LAST_VALUE), last_done=np.zeros(2, dtype=bool))
    _close(buf.returns, EXPECTED_MC_RET)
    _close(buf.advantages, EXPECTED_MC_ADV)


def test_autoreset_row_bootstrap_uses_value_of_autoreset_row() -> None:
    # Without an explicit value, "autoreset_row" takes V of the autoreset row (1.5 here).
    fresh = RolloutBuffer(
        6, 2, spaces.Box(-1.0, 1.0, (3,)), spaces.Discrete(2), gamma=GAMMA, gae_lambda=LAMBDA
    )
    for t in range(6):
        fresh.add(
            np.zeros((2, 3)),
            [0, 1],
            REWARDS[t],
            TERMINATED[t],
            TRUNCATED[t],
            VALUES[t],
            [0.0, 0.0],
            VALID[t],
        )
    with pytest.raises(ValueError, match="no bootstrap value"):
        fresh.compute_returns_and_advantages(LAST_VALUE)
    fresh.compute_returns_and_advantages(LAST_VALUE, truncation_bootstrap="autoreset_row")
    # env 1 with bootstrap 1.5 instead of 1.2: A3 = 1 + 0.9*1.5 - 0.7 = 1.65
    assert fresh.advantages[3, 1].item() == pytest.approx(1.65, abs=1e-6)
    # A2 = -0.97 + 0.72*1.65 = 0.218
    assert fresh.advantages[2, 1].item() == pytest.approx(0.218, abs=1e-6)
    # env 0 is unaffected
    _close(fresh.advantages[:, :1], [[row[0]] for row in EXPECTED_GAE_ADV])


def test_truncation_on_last_row_bootstraps_from_last_value_in_autoreset_mode() -> None:
    buf = RolloutBuffer(2, 1, spaces.Discrete(3), spaces.Discrete(2), gamma=0.5, gae_lambda=1.0)
    buf.add([0], [0], [1.0], [False], [False], [0.0], [0.0], [True])
    buf.add([1], [1], [1.0], [False], [True], [0.0], [0.0], [True])
    with pytest.raises(ValueError, match="no bootstrap value"):
        buf.compute_returns_and_advantages([4.0], last_done=[True])
    buf.compute_returns_and_advantages(
        [4.0], last_done=[True], truncation_bootstrap="autoreset_row"
    )
    # G1 = 1 + 0.5*4 = 3, G0 = 1 + 0.5*3 = 2.5
    _close(buf.returns, [[2.5], [3.0]])


def _random_rollout(
    rng: np.random.Generator, num_steps: int, num_envs: int, autoreset: bool
) -> dict[str, np.ndarray]:
    """Random rewards/values with flags that a next-step (or same-step) autoreset env emits."""
    term = np.zeros((num_steps, num_envs), dtype=bool)
    trunc = np.zeros_like(term)
    valid = np.ones_like(term)
    prev_done = rng.random(num_envs) < 0.3  # the rollout may start on an autoreset row
    for t in range(num_steps):
        valid[t] = ~prev_done if autoreset else True
        term[t] = valid[t] & (rng.random(num_envs) < 0.15)
        trunc[t] = valid[t] & (rng.random(num_envs) < 0.1)  # may coincide with term
        prev_done = term[t] | trunc[t]
    rewards = rng.normal(size=(num_steps, num_envs))
    rewards[~valid] = 0.0
    return {
        "rewards": rewards.astype(np.float32),
        "values": rng.normal(size=(num_steps, num_envs)).astype(np.float32),
        "trunc_values": rng.normal(size=(num_steps, num_envs)).astype(np.float32),
        "last_value": rng.normal(size=num_envs).astype(np.float32),
        "term": term,
        "trunc": trunc,
        "valid": valid,
    }


def _naive(data: dict[str, np.ndarray], gamma: float, lam: float, use_gae: bool) -> np.ndarray:
    """Per-environment, per-step pure-Python reference; returns advantages."""
    num_steps, num_envs = data["rewards"].shape
    adv = np.zeros((num_steps, num_envs))
    for n in range(num_envs):
        running = 0.0  # A_{t+1} (GAE) or G_{t+1} (MC)
        next_value = float(data["last_value"][n])
        for t in reversed(range(num_steps)):
            value = float(data["values"][t, n])
            if not data["valid"][t, n]:
                adv[t, n], running, next_value = 0.0, (0.0 if use_gae else value), value
                continue
            reward = float(data["rewards"][t, n])
            if data["term"][t, n]:
                target, cont = 0.0, 0.0
            elif data["trunc"][t, n]:
                target, cont = float(data["trunc_values"][t, n]), 0.0
            else:
                target, cont = (next_value if use_gae else running), 1.0
                if not use_gae and t == num_steps - 1:
                    target = next_value
            if use_gae:
                running = reward + gamma * target - value + gamma * lam * cont * running
                adv[t, n] = running
            else:
                running = reward + gamma * target
                adv[t, n] = running - value
            next_value = value
    return adv


def _fill(data: dict[str, np.ndarray], use_gae: bool, gamma: float, lam: float) -> RolloutBuffer:
    num_steps, num_envs = data["rewards"].shape
    buf = RolloutBuffer(
        num_steps,
        num_envs,
        spaces.Box(-1, 1, (2,)),
        spaces.Box(-1, 1, (1,)),
        gamma=gamma,
        gae_lambda=lam,
        use_gae=use_gae,
    )
    for t in range(num_steps):
        buf.add(
            np.zeros((num_envs, 2)),
            np.zeros((num_envs, 1)),
            data["rewards"][t],
            data["term"][t],
            data["trunc"][t],
            data["values"][t],
            np.zeros(num_envs),
            data["valid"][t],
            final_value=data["trunc_values"][t],
        )
    buf.compute_returns_and_advantages(
        data["last_value"], last_done=data["term"][-1] | data["trunc"][-1]
    )
    return buf


@pytest.mark.parametrize("use_gae", [True, False])
@pytest.mark.parametrize("autoreset", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_vectorised_matches_naive_per_env_loop(use_gae: bool, autoreset: bool, seed: int) -> None:
    rng = np.random.default_rng(seed)
    data = _random_rollout(rng, num_steps=40, num_envs=7, autoreset=autoreset)
    gamma, lam = 0.97, 0.9
    buf = _fill(data, use_gae, gamma, lam)
    expected = _naive(data, gamma, lam, use_gae)
    torch.testing.assert_close(
        buf.advantages.double(), torch.from_numpy(expected), atol=1e-6, rtol=0
    )
    torch.testing.assert_close(
        buf.returns.double(),
        torch.from_numpy(expected + data["values"].astype(np.float64)),
        atol=1e-6,
        rtol=0,
    )
    assert bool((buf.advantages[torch.from_numpy(~data["valid"])] == 0).all())


def test_gae_with_lambda_one_equals_monte_carlo() -> None:
    data = _random_rollout(np.random.default_rng(5), num_steps=30, num_envs=4, autoreset=True)
    gae = _fill(data, use_gae=True, gamma=0.95, lam=1.0)
    mc = _fill(data, use_gae=False, gamma=0.95, lam=1.0)
    torch.testing.assert_close(gae.returns, mc.returns, atol=1e-5, rtol=0)


def test_normalisation_statistics_ignore_autoreset_rows() -> None:
    buf = _hand_buffer(use_gae=True)
    buf.compute_returns_and_advantages(LAST_VALUE)
    valid = torch.tensor(VALID, dtype=torch.bool)
    raw = torch.tensor(EXPECTED_GAE_ADV, dtype=torch.float64)[valid]
    expected = (raw - raw.mean()) / raw.std(correction=0)
    batch = next(iter(buf.minibatches(100, np.random.default_rng(0), normalize_advantages=True)))
    rows = batch.indices
    flat_expected = torch.zeros(12, dtype=torch.float64)
    flat_expected[valid.reshape(-1)] = expected
    torch.testing.assert_close(batch.advantages.double(), flat_expected[rows], atol=1e-5, rtol=0)
    assert abs(batch.advantages.mean().item()) < 1e-6


def test_inconsistent_valid_mask_is_rejected() -> None:
    buf = RolloutBuffer(2, 1, spaces.Discrete(2), spaces.Discrete(2))
    buf.add([0], [0], [1.0], [False], [False], [0.0], [0.0], [True])
    buf.add([0], [0], [0.0], [False], [False], [0.0], [0.0], [False])  # no episode ended
    with pytest.raises(ValueError, match="next row is marked invalid"):
        buf.compute_returns_and_advantages([0.0])


def test_last_done_must_agree_with_stored_flags() -> None:
    buf = RolloutBuffer(1, 2, spaces.Discrete(2), spaces.Discrete(2))
    buf.add(
        [0, 0],
        [0, 0],
        [1.0, 1.0],
        [True, False],
        [False, False],
        [0.0, 0.0],
        [0.0, 0.0],
        [True, True],
    )
    with pytest.raises(ValueError, match="last_done"):
        buf.compute_returns_and_advantages([0.0, 0.0], last_done=[False, True])
    buf.compute_returns_and_advantages([0.0, 0.0], last_done=[True, False])
