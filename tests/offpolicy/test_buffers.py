"""Tests for the uniform ReplayBuffer and the space storage helpers."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from gymnasium import spaces

from agile_core.buffers.spaces import LeafSpec, iter_leaves, space_spec
from agile_offpolicy.buffers import ReplayBuffer

OBS = spaces.Box(-np.inf, np.inf, (4,), np.float32)
ACT = spaces.Discrete(2)


def _rows(start: int, n: int) -> np.ndarray:
    """CartPole-like obs rows whose first feature encodes the global row number."""
    vals = np.arange(start, start + n, dtype=np.float32)
    return np.repeat(vals[:, None], 4, axis=1)


def _add_counted(
    buf: ReplayBuffer, start: int, n: int, mask: np.ndarray | torch.Tensor | None = None
) -> np.ndarray:
    ids = np.arange(start, start + n)
    return buf.add(
        _rows(start, n),
        ids % 2,
        ids.astype(np.float32),
        _rows(start + 1, n),
        ids % 3 == 0,
        mask=mask,
    )


def test_ring_wraps_with_num_envs_rows_per_add() -> None:
    buf = ReplayBuffer(10, OBS, ACT)
    written = [_add_counted(buf, 3 * k, 3) for k in range(4)]  # 12 rows into 10 slots
    np.testing.assert_array_equal(written[3], [9, 0, 1])
    assert buf.ptr == 2 and len(buf) == 10 and buf.size == 10
    got = buf.sample_from_indices(np.arange(10))
    expected_ids = np.array([10, 11, 2, 3, 4, 5, 6, 7, 8, 9])
    np.testing.assert_array_equal(got.obs[:, 0].numpy(), expected_ids)
    np.testing.assert_array_equal(got.next_obs[:, 0].numpy(), expected_ids + 1)
    np.testing.assert_array_equal(got.reward.numpy(), expected_ids)
    np.testing.assert_array_equal(got.action.numpy(), expected_ids % 2)
    np.testing.assert_array_equal(got.done.numpy(), (expected_ids % 3 == 0).astype(np.float32))


def test_batch_larger_than_capacity_keeps_latest_rows() -> None:
    buf = ReplayBuffer(4, OBS, ACT)
    _add_counted(buf, 0, 3)
    idx = _add_counted(buf, 100, 6)
    np.testing.assert_array_equal(idx, [1, 2, 3, 0])
    obs = buf.sample_from_indices(np.arange(4)).obs[:, 0].numpy()
    np.testing.assert_array_equal(obs, [105, 102, 103, 104])
    assert buf.ptr == 1 and len(buf) == 4


def test_mask_skips_rows() -> None:
    buf = ReplayBuffer(8, OBS, ACT)
    idx = _add_counted(buf, 0, 4, mask=np.array([True, False, True, False]))
    np.testing.assert_array_equal(idx, [0, 1])
    assert len(buf) == 2
    np.testing.assert_array_equal(buf.sample_from_indices([0, 1]).obs[:, 0].numpy(), [0, 2])
    assert _add_counted(buf, 10, 4, mask=np.zeros(4, bool)).size == 0
    assert len(buf) == 2 and buf.ptr == 2
    _add_counted(buf, 20, 4, mask=torch.ones(4, dtype=torch.bool))
    assert len(buf) == 6
    with pytest.raises(ValueError):
        _add_counted(buf, 0, 4, mask=np.ones(3, bool))


def test_done_is_terminated_only() -> None:
    buf = ReplayBuffer(8, OBS, ACT)
    buf.add(
        _rows(0, 3),
        np.zeros(3),
        np.zeros(3),
        _rows(1, 3),
        np.array([True, False, False]),
        truncated=np.array([False, True, False]),
    )
    np.testing.assert_array_equal(buf.sample_from_indices([0, 1, 2]).done.numpy(), [1, 0, 0])


def test_uint8_images_stay_uint8() -> None:
    obs_space = spaces.Box(0, 255, (6, 6, 3), np.uint8)
    buf = ReplayBuffer(16, obs_space, ACT)
    rng = np.random.default_rng(0)
    imgs = rng.integers(0, 256, (5, 6, 6, 3), dtype=np.uint8)
    buf.add(imgs, np.ones(5), np.ones(5), imgs[::-1], np.zeros(5, bool))
    assert buf._storage["obs"].dtype == np.uint8
    batch = buf.sample_from_indices(np.arange(5))
    assert batch.obs.dtype == torch.uint8 and batch.next_obs.dtype == torch.uint8
    np.testing.assert_array_equal(batch.obs.numpy(), imgs)
    np.testing.assert_array_equal(batch.next_obs.numpy(), imgs[::-1])
    assert buf.nbytes == 16 * (2 * 6 * 6 * 3 + 8 + 4 + 4)


def test_float_dtype_recasts_float_leaves_only() -> None:
    obs_space = spaces.Dict(
        {"x": spaces.Box(-1, 1, (2,), np.float64), "img": spaces.Box(0, 255, (2,), np.uint8)}
    )
    buf = ReplayBuffer(4, obs_space, spaces.Box(-1, 1, (1,), np.float64), float_dtype=np.float32)
    assert buf._storage["obs"]["x"].dtype == np.float32
    assert buf._storage["obs"]["img"].dtype == np.uint8
    assert buf._storage["action"].dtype == np.float32


def test_nested_dict_and_tuple_observations() -> None:
    obs_space = spaces.Dict(
        {
            "pos": spaces.Box(-1, 1, (2,), np.float32),
            "pair": spaces.Tuple((spaces.Discrete(5), spaces.MultiBinary(3))),
            "img": spaces.Box(0, 255, (2, 2), np.uint8),
        }
    )
    buf = ReplayBuffer(6, obs_space, spaces.MultiDiscrete([3, 4]))
    n = 4

    def make(offset: int) -> dict:
        ids = np.arange(n) + offset
        return {
            "pos": np.stack([ids, -ids], axis=1).astype(np.float32),
            "pair": (ids % 5, np.stack([ids % 2] * 3, axis=1).astype(np.int8)),
            "img": np.broadcast_to(ids[:, None, None], (n, 2, 2)).astype(np.uint8),
        }

    for k in range(2):  # 8 rows into 6 slots
        buf.add(
            make(10 * k),
            np.stack([np.arange(n) % 3, np.arange(n) % 4], 1),
            np.zeros(n),
            make(10 * k + 1),
            np.zeros(n, bool),
        )
    batch = buf.sample_from_indices(np.arange(6))
    assert isinstance(batch.obs, dict) and isinstance(batch.obs["pair"], tuple)
    ids = np.array([12, 13, 2, 3, 10, 11])
    np.testing.assert_array_equal(batch.obs["pos"][:, 0].numpy(), ids)
    np.testing.assert_array_equal(batch.obs["pair"][0].numpy(), ids % 5)
    assert batch.obs["pair"][0].dtype == torch.int64
    assert batch.obs["pair"][1].dtype == torch.int8 and batch.obs["pair"][1].shape == (6, 3)
    np.testing.assert_array_equal(batch.next_obs["img"][:, 0, 0].numpy(), ids + 1)
    assert batch.obs["img"].dtype == torch.uint8
    assert batch.action.shape == (6, 2) and batch.action.dtype == torch.int64
    sampled = buf.sample(32, rng=np.random.default_rng(1))
    np.testing.assert_array_equal(sampled.obs["pos"][:, 0].numpy(), ids[sampled.indices])


@pytest.mark.parametrize(
    ("space", "action", "shape", "dtype"),
    [
        (spaces.Discrete(3), np.array([[0], [2], [1]]), (3,), torch.int64),
        (spaces.Box(-1, 1, (2,), np.float32), np.full((3, 2), 0.5), (3, 2), torch.float32),
        (spaces.MultiDiscrete([2, 5, 3]), np.array([[1, 4, 2]] * 3), (3, 3), torch.int64),
        (spaces.MultiBinary(4), np.ones((3, 4), np.int8), (3, 4), torch.int8),
    ],
)
def test_action_spaces(
    space: spaces.Space, action: np.ndarray, shape: tuple, dtype: torch.dtype
) -> None:
    buf = ReplayBuffer(5, OBS, space)
    buf.add(_rows(0, 3), torch.as_tensor(action), torch.zeros(3), _rows(1, 3), torch.zeros(3))
    got = buf.sample_from_indices([0, 1, 2]).action
    assert got.shape == shape and got.dtype == dtype
    np.testing.assert_array_equal(got.numpy(), np.asarray(action).reshape(shape))


def test_nbytes_equals_sum_of_arrays() -> None:
    buf = ReplayBuffer(1000, OBS, ACT)
    leaves = [leaf for tree in buf._storage.values() for _, leaf in iter_leaves(tree)]
    assert buf.nbytes == sum(a.nbytes for a in leaves) == 1000 * (4 * 4 * 2 + 8 + 4 + 4)
    assert all(a.flags.c_contiguous and a.shape[0] == 1000 for a in leaves)


def test_space_spec() -> None:
    spec = space_spec(spaces.Tuple((spaces.Discrete(3), spaces.MultiBinary((2, 2)))))
    assert spec == (LeafSpec((), np.dtype(np.int64)), LeafSpec((2, 2), np.dtype(np.int8)))
    with pytest.raises(TypeError):
        space_spec(spaces.Text(5))


def test_sampling_uniform_seeded_and_device() -> None:
    buf = ReplayBuffer(100, OBS, ACT, seed=3)
    _add_counted(buf, 0, 50)
    a = buf.sample(64, rng=np.random.default_rng(7))
    b = buf.sample(64, rng=np.random.default_rng(7))
    np.testing.assert_array_equal(a.indices, b.indices)
    assert a.obs.device.type == "cpu" and a.obs.shape == (64, 4) and a.reward.shape == (64,)
    np.testing.assert_array_equal(a.obs[:, 0].numpy(), a.indices)
    counts = np.bincount(buf.sample(50_000).indices, minlength=50)
    assert counts.shape == (50,) and counts.min() > 800 and counts.max() < 1200
    with pytest.raises(ValueError):
        ReplayBuffer(4, OBS, ACT).sample(1)
    with pytest.raises(IndexError):
        buf.sample_from_indices([50])


def test_state_dict_round_trip_without_pickle() -> None:
    obs_space = spaces.Dict({"a": spaces.Box(0, 9, (3,), np.float32), "b": spaces.Discrete(4)})
    src = ReplayBuffer(7, obs_space, ACT)
    for k in range(4):
        ids = np.arange(3) + 3 * k
        src.add(
            {"a": np.repeat(ids[:, None], 3, 1), "b": ids % 4},
            ids % 2,
            ids,
            {"a": np.repeat(ids[:, None] + 1, 3, 1), "b": (ids + 1) % 4},
            ids % 2 == 0,
        )
    state = src.state_dict()
    assert all(isinstance(v, (int, np.ndarray)) for v in state.values())
    stream = io.BytesIO()
    np.savez(stream, **state)
    stream.seek(0)
    with np.load(stream, allow_pickle=False) as loaded:
        restored = {k: loaded[k] for k in loaded.files}
    dst = ReplayBuffer(7, obs_space, ACT)
    dst.load_state_dict(restored)
    assert len(dst) == len(src) and dst.ptr == src.ptr
    for x, y in zip(
        src.sample_from_indices(np.arange(7)), dst.sample_from_indices(np.arange(7)), strict=True
    ):
        for (_, lx), (_, ly) in zip(iter_leaves(x), iter_leaves(y), strict=True):
            np.testing.assert_array_equal(np.asarray(lx), np.asarray(ly))
    with pytest.raises(ValueError):
        ReplayBuffer(8, obs_space, ACT).load_state_dict(state)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_samples_land_on_cuda() -> None:
    obs_space = spaces.Dict({"img": spaces.Box(0, 255, (3, 3), np.uint8), "v": OBS})
    buf = ReplayBuffer(32, obs_space, ACT, device="cuda")
    imgs = np.arange(4 * 9, dtype=np.uint8).reshape(4, 3, 3)
    obs = {"img": imgs, "v": _rows(0, 4)}
    buf.add(obs, np.ones(4), np.ones(4), obs, np.zeros(4, bool))
    batch = buf.sample_from_indices(np.arange(4))
    assert batch.obs["img"].is_cuda and batch.obs["img"].dtype == torch.uint8
    assert batch.reward.is_cuda and batch.done.is_cuda and batch.action.is_cuda
    np.testing.assert_array_equal(batch.obs["img"].cpu().numpy(), imgs)
