"""MultiAgentReplayBuffer: heterogeneous spaces, masks, the ring, population sampling, checkpoints."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from gymnasium import spaces

from agile_marl.buffers import MultiAgentBatch, MultiAgentReplayBuffer

OBS = {"a_0": spaces.Box(-1.0, 1.0, (3,), np.float32), "b_0": spaces.Box(-1.0, 1.0, (2, 4), np.float32),
       "c_0": spaces.Dict({"img": spaces.Box(0, 255, (1, 4, 4), np.uint8), "id": spaces.Discrete(5)})}
ACT = {"a_0": spaces.Discrete(3), "b_0": spaces.Box(-2.0, 2.0, (2,), np.float32), "c_0": spaces.Discrete(2, start=1)}


def step(rows: int, value: float, valid: dict[str, list[bool]] | None = None) -> tuple:
    """One vector step whose every entry encodes `value` (row r: value + r)."""
    base = value + np.arange(rows)
    obs = {"a_0": np.repeat(base[:, None], 3, 1).astype(np.float32),
           "b_0": np.repeat(base[:, None, None], 8, 1).reshape(rows, 2, 4).astype(np.float32),
           "c_0": {"img": np.full((rows, 1, 4, 4), 7, np.uint8), "id": (base % 5).astype(np.int64)}}
    action = {"a_0": (base % 3).astype(np.int64), "b_0": np.repeat(base[:, None], 2, 1).astype(np.float32) / 100,
              "c_0": np.ones(rows, np.int64) * 2}
    reward = {agent: base.astype(np.float32) for agent in OBS}
    done = {agent: base % 2 == 0 for agent in OBS}
    masks = valid or {agent: [True] * rows for agent in OBS}
    return obs, action, reward, obs, done, {agent: np.asarray(m) for agent, m in masks.items()}


def test_shapes_dtypes_and_masks_of_heterogeneous_agents() -> None:
    memory = MultiAgentReplayBuffer(10, OBS, ACT)
    stored = memory.add(*step(3, 0.0, {"a_0": [True, False, False], "b_0": [False, False, True],
                                       "c_0": [False, False, False]}))
    assert stored == 2 and len(memory) == 2  # row 1: no agent valid, skipped
    batch = memory.sample(5, np.random.default_rng(0))
    assert isinstance(batch, MultiAgentBatch)
    assert batch.obs["a_0"].shape == (5, 3) and batch.obs["a_0"].dtype == torch.float32
    assert batch.obs["b_0"].shape == (5, 2, 4)
    assert batch.obs["c_0"]["img"].shape == (5, 1, 4, 4) and batch.obs["c_0"]["img"].dtype == torch.uint8
    assert batch.obs["c_0"]["id"].shape == (5,) and batch.obs["c_0"]["id"].dtype == torch.int64
    assert batch.action["a_0"].dtype == torch.int64 and batch.action["b_0"].shape == (5, 2)
    assert batch.reward["a_0"].shape == batch.done["a_0"].shape == batch.mask["a_0"].shape == (5,)
    assert torch.allclose(batch.weights, torch.full((5,), 0.2))
    for row in range(5):  # the mask follows the row's stored value: row 0 (a valid), row 2 (b valid)
        value = int(batch.reward["a_0"][row])
        assert value in (0, 2)
        assert batch.mask["a_0"][row] == float(value == 0) and batch.mask["b_0"][row] == float(value == 2)
        assert batch.mask["c_0"][row] == 0.0 and batch.done["a_0"][row] == 1.0
        assert torch.all(batch.obs["b_0"][row] == value)
    one = batch.with_member_axis()
    assert one.obs["c_0"]["img"].shape == (1, 5, 1, 4, 4) and one.weights.shape == (1, 5)


def test_the_ring_overwrites_the_oldest_rows() -> None:
    memory = MultiAgentReplayBuffer(5, OBS, ACT)
    memory.add(*step(3, 0.0))
    memory.add(*step(4, 10.0))
    assert len(memory) == 5 and memory.ptr == 2
    values = sorted(float(v) for v in memory.sample_population(
        [SimpleNamespace(batch_size=200, rng=np.random.default_rng(1))], [True]).reward["a_0"].unique())
    assert values == [2.0, 10.0, 11.0, 12.0, 13.0]
    memory.add(*step(7, 100.0))  # more rows than the capacity: the last five stay
    assert len(memory) == 5
    stored = sorted(float(v) for v in memory._storage["reward"]["a_0"])
    assert stored == [102.0, 103.0, 104.0, 105.0, 106.0]


def test_population_sampling_draws_like_each_member_alone() -> None:
    memory = MultiAgentReplayBuffer(50, OBS, ACT)
    for value in range(0, 40, 4):
        memory.add(*step(4, float(value)))
    members = [SimpleNamespace(batch_size=size, rng=np.random.default_rng(seed)) for seed, size in enumerate([4, 7, 5])]
    alone = [SimpleNamespace(batch_size=size, rng=np.random.default_rng(seed)) for seed, size in enumerate([4, 7, 5])]
    batch = memory.sample_population(members, [True, False, True])
    assert batch.reward["a_0"].shape == (3, 5) and batch.obs["c_0"]["img"].shape == (3, 5, 1, 4, 4)
    np.testing.assert_allclose(batch.weights.sum(dim=1).numpy(), [1.0, 0.0, 1.0], rtol=1e-6)
    assert float(batch.weights[0, 4]) == 0.0 and float(batch.weights[2, 0]) == pytest.approx(0.2)
    for p in (0, 2):
        single = memory.sample(alone[p].batch_size, alone[p].rng)
        size = alone[p].batch_size
        assert torch.equal(batch.reward["b_0"][p, :size], single.reward["b_0"])
        assert torch.equal(batch.obs["c_0"]["id"][p, :size], single.obs["c_0"]["id"])
        assert members[p].rng.bit_generator.state == alone[p].rng.bit_generator.state
    assert members[1].rng.bit_generator.state == alone[1].rng.bit_generator.state  # idle: no draw
    with pytest.raises(ValueError):
        MultiAgentReplayBuffer(3, OBS, ACT).sample(2)


def test_state_dict_round_trip() -> None:
    memory = MultiAgentReplayBuffer(8, OBS, ACT)
    memory.add(*step(5, 0.0))
    memory.add(*step(5, 20.0))
    state = memory.state_dict()
    assert all(isinstance(value, np.ndarray | int) for value in state.values())
    restored = MultiAgentReplayBuffer(8, OBS, ACT)
    restored.load_state_dict({k: torch.as_tensor(v) if isinstance(v, np.ndarray) else v for k, v in state.items()})
    assert len(restored) == len(memory) == 8 and restored.ptr == memory.ptr
    a, b = memory.sample(6, np.random.default_rng(3)), restored.sample(6, np.random.default_rng(3))
    assert torch.equal(a.obs["c_0"]["img"], b.obs["c_0"]["img"]) and torch.equal(a.mask["b_0"], b.mask["b_0"])
    with pytest.raises(ValueError):
        MultiAgentReplayBuffer(9, OBS, ACT).load_state_dict(state)
