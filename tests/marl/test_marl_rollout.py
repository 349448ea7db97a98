"""MultiAgentRolloutBuffer: per-agent storage of heterogeneous spaces and masks, GAE with dead
agents and truncations against a hand computation, and the padded population batch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from agile_marl.buffers.rollout import (
    MultiAgentRolloutBuffer,
    compute_advantages_together,
    population_batch,
)
from tests.marl.oracles_ippo import gae_by_hand

OBS = {
    "speaker_0": spaces.Discrete(3),
    "listener_0": spaces.Box(-1.0, 1.0, (4,), np.float32),
    "listener_1": spaces.Box(-1.0, 1.0, (4,), np.float32),
    "scout_0": spaces.Dict({"pos": spaces.Box(-1.0, 1.0, (2,), np.float32), "id": spaces.Discrete(4)}),
}
ACTIONS = {
    "speaker_0": spaces.Discrete(5),
    "listener_0": spaces.Box(-1.0, 1.0, (2,), np.float32),
    "listener_1": spaces.Box(-1.0, 1.0, (2,), np.float32),
    "scout_0": spaces.MultiDiscrete([3, 2]),
}
GROUPS = {"speaker": ["speaker_0"], "listener": ["listener_0", "listener_1"], "scout": ["scout_0"]}


def life_flags(rng: np.random.Generator, steps: int, envs: int, p_end: float = 0.15) -> dict[str, np.ndarray]:
    """Flags an env following the contract gives one agent: a valid step that does not end the
    agent's episode is followed by a valid one; after an end come 1-2 invalid steps."""
    valid = np.zeros((steps, envs), bool)
    term, trunc = np.zeros((steps, envs), bool), np.zeros((steps, envs), bool)
    for env in range(envs):
        dead = 0
        for t in range(steps):
            if dead:
                dead -= 1
                continue
            valid[t, env] = True
            if rng.random() < p_end:
                (term if rng.random() < 0.5 else trunc)[t, env] = True
                dead = int(rng.integers(1, 3))
    return {"valid": valid, "term": term, "trunc": trunc}


def sample(space: spaces.Space, rng: np.random.Generator, envs: int) -> object:
    if isinstance(space, spaces.Dict):
        return {key: sample(sub, rng, envs) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Discrete):
        return rng.integers(0, space.n, envs)
    if isinstance(space, spaces.MultiDiscrete):
        return np.stack([rng.integers(0, n, envs) for n in space.nvec], axis=1)
    return rng.uniform(-1, 1, (envs, *space.shape)).astype(np.float32)


def filled(steps: int = 12, envs: int = 3, seed: int = 0, masks: bool = True) -> tuple[MultiAgentRolloutBuffer, dict]:
    rng = np.random.default_rng(seed)
    buffer = MultiAgentRolloutBuffer(steps, envs, OBS, ACTIONS)
    flags = {agent: life_flags(rng, steps, envs) for agent in OBS}
    explicit = {agent: rng.normal(size=(steps, envs)) for agent in OBS}
    for t in range(steps):
        mask = {"speaker_0": rng.random((envs, 5)) < 0.6} if masks and t % 2 else None
        buffer.add({a: sample(OBS[a], rng, envs) for a in OBS}, {a: sample(ACTIONS[a], rng, envs) for a in OBS},
                   {a: rng.normal(size=envs) for a in OBS}, {a: rng.normal(size=envs) for a in OBS},
                   {a: rng.normal(size=envs) for a in OBS}, {a: flags[a]["term"][t] for a in OBS},
                   {a: flags[a]["trunc"][t] for a in OBS}, {a: flags[a]["valid"][t] for a in OBS},
                   final_values={"listener_0": explicit["listener_0"][t]}, action_masks=mask)
    return buffer, {"flags": flags, "explicit": explicit}


def test_storage_shapes_dtypes_and_masks() -> None:
    buffer, _ = filled()
    assert buffer.full and buffer.size == 12
    speaker, listener, scout = (buffer.agents[a] for a in ("speaker_0", "listener_0", "scout_0"))
    assert speaker.observations.shape == (12, 3) and speaker.observations.dtype == torch.int64
    assert listener.observations.shape == (12, 3, 4) and listener.actions.shape == (12, 3, 2)
    assert listener.actions.dtype == torch.float32 and speaker.actions.dtype == torch.int64
    assert scout.observations["pos"].shape == (12, 3, 2) and scout.observations["id"].shape == (12, 3)
    assert scout.actions.shape == (12, 3, 2) and scout.actions.dtype == torch.int64
    assert speaker.action_masks is not None and speaker.action_masks.shape == (12, 3, 5)
    assert speaker.action_masks[0].all() and not speaker.action_masks[1::2].all()  # unmasked rows allow all
    assert listener.action_masks is None and scout.action_masks is None
    for rollout in buffer.agents.values():
        assert rollout.values.shape == rollout.valid.shape == (12, 3)
    with pytest.raises(RuntimeError):
        buffer.add(*([{}] * 8))
    buffer.reset()
    assert buffer.size == 0 and not buffer.agents["speaker_0"].valid.any()


def test_gae_with_dead_agents_and_truncations_matches_a_hand_computation() -> None:
    buffer, info = filled()
    rng = np.random.default_rng(5)
    last = {agent: rng.normal(size=3) for agent in OBS}
    buffer.compute_advantages(last, gamma=0.9, gae_lambda=0.8)
    for agent, rollout in buffer.agents.items():
        values = rollout.values.double().numpy()
        for env in range(3):
            # the default truncation bootstrap: the value stored on the next (invalid) row, or last
            nxt = np.append(values[1:, env], last[agent][env])
            final = info["explicit"][agent][:, env] if agent == "listener_0" else nxt
            adv, ret = gae_by_hand(rollout.rewards[:, env].double().numpy(), values[:, env],
                                   rollout.terminations[:, env].numpy(), rollout.truncations[:, env].numpy(),
                                   rollout.valid[:, env].numpy(), final, last[agent][env], 0.9, 0.8)
            np.testing.assert_allclose(rollout.advantages[:, env].numpy(), adv, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(rollout.returns[:, env].numpy(), ret.astype(np.float32), rtol=1e-5, atol=1e-5)
        assert not rollout.advantages[~rollout.valid].any()  # invalid steps: no advantage


def test_advantages_together_equal_one_by_one() -> None:
    buffers = [filled(seed=s)[0] for s in range(3)] + [filled(steps=7, seed=9)[0]]
    twins = [filled(seed=s)[0] for s in range(3)] + [filled(steps=7, seed=9)[0]]
    rng = np.random.default_rng(1)
    lasts = [{agent: rng.normal(size=3) for agent in OBS} for _ in buffers]
    gammas, lambdas = [0.9, 0.99, 0.95, 0.8], [0.8, 0.95, 1.0, 0.5]
    compute_advantages_together(buffers, lasts, gammas, lambdas)
    for twin, last, gamma, lam in zip(twins, lasts, gammas, lambdas, strict=True):
        twin.compute_advantages(last, gamma, lam)
    for mine, theirs in zip(buffers, twins, strict=True):
        for agent in OBS:
            assert torch.equal(mine.agents[agent].advantages, theirs.agents[agent].advantages)
            assert torch.equal(mine.agents[agent].returns, theirs.agents[agent].returns)


def test_a_truncation_still_valid_at_the_next_step_needs_a_final_value() -> None:
    buffer = MultiAgentRolloutBuffer(2, 1, {"a_0": OBS["listener_0"]}, {"a_0": ACTIONS["listener_0"]})
    ones = {"a_0": np.ones(1, bool)}
    for truncated in (True, False):
        buffer.add({"a_0": np.zeros((1, 4))}, {"a_0": np.zeros((1, 2))}, {"a_0": [0.0]}, {"a_0": [0.0]},
                   {"a_0": [1.0]}, {"a_0": [False]}, {"a_0": [truncated]}, ones)
    with pytest.raises(ValueError, match="final_values"):
        buffer.compute_advantages({"a_0": [0.0]}, 0.99, 0.95)


def test_population_batch_pads_members_of_different_lengths() -> None:
    buffers = [filled(steps=12, seed=0)[0], None, filled(steps=5, seed=1, masks=False)[0]]
    for buffer in buffers:
        if buffer is not None:
            buffer.compute_advantages({agent: np.zeros(3) for agent in OBS}, 0.99, 0.95)
    batch = population_batch(buffers, GROUPS)
    assert batch.present == [True, False, True]
    listener = batch.groups["listener"]
    counts = [int(sum(int(buffers[0].agents[a].valid.sum()) for a in GROUPS["listener"])), 0,
              int(sum(int(buffers[2].agents[a].valid[:5].sum()) for a in GROUPS["listener"]))]
    assert listener.counts == counts
    rows = max(counts)
    assert listener.obs.shape == (3, rows, 4) and listener.actions.shape == (3, rows, 2)
    assert listener.scalars.shape == (3, rows, 4)
    torch.testing.assert_close(listener.weights.sum(dim=1), torch.tensor([1.0, 0.0, 1.0]))
    assert not listener.obs[1].any() and not listener.obs[2, counts[2]:].any()
    # member 0's rows: listener_0's valid rows in (step, env) order, then listener_1's
    first = buffers[0].agents["listener_0"]
    own = first.observations[first.valid]
    torch.testing.assert_close(listener.obs[0, : own.shape[0]], own)
    torch.testing.assert_close(listener.scalars[0, : own.shape[0], 2], first.advantages[first.valid])
    scout = batch.groups["scout"]
    assert set(scout.obs) == {"pos", "id"} and scout.obs["id"].shape[:2] == (3, max(scout.counts))
    speaker = batch.groups["speaker"]
    assert speaker.action_masks is not None and speaker.action_masks.shape[-1] == 5
    assert speaker.action_masks[2, : speaker.counts[2]].all()  # a member that stored no masks allows all
    mini = speaker.minibatch([np.array([0, 2]), np.zeros(0, np.int64), np.array([1])])
    assert mini.actions.shape == (3, 2) and mini.mask.tolist() == [[1, 1], [0, 0], [1, 0]]
    assert mini.counts.squeeze(1).tolist() == [2, 1, 1]
