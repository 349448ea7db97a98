"""Recurrent storage and BPTT sequence minibatches of the rollout buffer."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch import nn

from agile_onpolicy.rollout import RecurrentBatch, RolloutBuffer

T, N, LAYERS, HIDDEN = 10, 3, 2, 4
# next-step autoreset pattern:
#   env 0 terminates at step 2 -> row 3 autoreset -> new episode at row 4
#   env 1 truncates at step 6  -> row 7 autoreset -> new episode at row 8
#   env 2 starts the rollout on an autoreset row (row 0) -> new episode at row 1,
#         and terminates on the last row (9)
TERM = {(2, 0), (9, 2)}
TRUNC = {(6, 1)}
INVALID = {(3, 0), (7, 1), (0, 2)}
EPISODE_STARTS = {(0, 0), (0, 1), (4, 0), (8, 1), (1, 2)}


def _hidden_at(t: int) -> tuple[np.ndarray, np.ndarray]:
    """LSTM-convention (h, c), [layers, num_envs, hidden], with values encoding (layer, t, env, k)."""
    layer, env, k = np.meshgrid(np.arange(LAYERS), np.arange(N), np.arange(HIDDEN), indexing="ij")
    h = (1000 * layer + 100 * t + 10 * env + k).astype(np.float32)
    return h, -h


def _mask(cells: set[tuple[int, int]], t: int) -> np.ndarray:
    return np.array([(t, n) in cells for n in range(N)])


def _filled_buffer() -> RolloutBuffer:
    buf = RolloutBuffer(
        T,
        N,
        spaces.Box(-1e3, 1e3, (2,)),
        spaces.Discrete(3),
        gamma=0.9,
        gae_lambda=0.9,
        recurrent=True,
        hidden_state_shapes=((LAYERS, N, HIDDEN), (LAYERS, N, HIDDEN)),
    )
    buf.reset(episode_start=[True, True, False])  # env 2's first row is an autoreset row
    for t in range(T):
        obs = np.stack([np.full(N, t), np.arange(N)], axis=1).astype(np.float32)
        buf.add(
            obs,
            np.arange(N) % 3,
            np.ones(N),
            _mask(TERM, t),
            _mask(TRUNC, t),
            np.zeros(N),
            np.zeros(N),
            ~_mask(INVALID, t),
            hidden=_hidden_at(t),
            final_value=np.full(N, 5.0),
        )
    buf.compute_returns_and_advantages(np.zeros(N), last_done=[False, False, True])
    return buf


def _sequences(buf: RolloutBuffer, seq_type: str, seq_len: int | None, bs: int = 2) -> list[Any]:
    """Flatten all batches of an epoch into (batch, column) pairs."""
    batches = list(buf.recurrent_minibatches(seq_len, bs, np.random.default_rng(0), seq_type))  # type: ignore[arg-type]
    assert all(isinstance(b, RecurrentBatch) for b in batches)
    return [(b, j) for b in batches for j in range(b.env_indices.shape[0])]


def test_episode_start_is_derived_from_autoreset_rows() -> None:
    buf = _filled_buffer()
    expected = torch.zeros(T, N, dtype=torch.bool)
    for t, n in EPISODE_STARTS:
        expected[t, n] = True
    assert torch.equal(buf.episode_starts, expected)
    h, c = buf.hidden_states
    assert h.shape == (T, N, LAYERS, HIDDEN) and c.shape == (T, N, LAYERS, HIDDEN)


@pytest.mark.parametrize(
    ("seq_type", "seq_len", "starts", "padded_len"),
    [
        ("chunked", 4, [0, 4, 8], 4),
        ("maximum", None, [0], T),
        ("fifty_percent_overlap", 4, [0, 2, 4, 6], 4),
    ],
)
def test_sequences_cover_steps_with_hidden_starts_and_masks(
    seq_type: str, seq_len: int | None, starts: list[int], padded_len: int
) -> None:
    buf = _filled_buffer()
    owned_count = torch.zeros(T, N, dtype=torch.int64)
    planned = set()
    for batch, j in _sequences(buf, seq_type, seq_len):
        env = int(batch.env_indices[j])
        times = batch.time_indices[:, j]
        start = int(times[0])
        planned.add((env, start))
        length = min(padded_len, T - start)
        assert batch.obs.shape[0] == padded_len
        # covered steps and padding
        assert times[:length].tolist() == list(range(start, start + length))
        assert (times[length:] == -1).all()
        assert batch.step_mask[:, j].tolist() == [k < length for k in range(padded_len)]
        assert (batch.obs[length:, j] == 0).all()
        assert torch.equal(batch.obs[:length, j, 0], times[:length].float())
        assert (batch.obs[:length, j, 1] == env).all()
        # initial hidden state = stored (h, c) at the first step, LSTM convention [L, B, H]
        h0, c0 = batch.initial_hidden
        assert h0.shape == (LAYERS, batch.env_indices.shape[0], HIDDEN) and h0.is_contiguous()
        h_ref, c_ref = _hidden_at(start)
        assert np.array_equal(h0[:, j].numpy(), h_ref[:, env])
        assert np.array_equal(c0[:, j].numpy(), c_ref[:, env])
        # episode starts and validity
        for k in range(padded_len):
            t = int(times[k])
            real = k < length
            assert bool(batch.episode_starts[k, j]) == (real and (t, env) in EPISODE_STARTS)
            assert bool(batch.valid_mask[k, j]) == (real and (t, env) not in INVALID)
        owned = batch.loss_mask[:, j]
        assert not (owned & ~batch.valid_mask[:, j]).any()
        if seq_type == "fifty_percent_overlap" and start > 0:
            assert not owned[: padded_len // 2].any()  # burn-in half
        owned_count[times[owned], env] += 1
    assert planned == {(n, s) for n in range(N) for s in starts}
    expected = torch.ones(T, N, dtype=torch.int64)
    for t, n in INVALID:
        expected[t, n] = 0
    assert torch.equal(owned_count, expected)  # each valid row in the loss exactly once


def test_sequences_owning_no_valid_row_are_dropped() -> None:
    buf = _filled_buffer()
    planned = {
        (int(b.env_indices[j]), int(b.time_indices[0, j]))
        for b, j in _sequences(buf, "chunked", 1, bs=5)
    }
    assert planned == {(n, t) for t in range(T) for n in range(N)} - {(e, t) for t, e in INVALID}


def test_recurrent_batch_fields_and_normalisation() -> None:
    buf = _filled_buffer()
    batches = list(
        buf.recurrent_minibatches(4, 10, np.random.default_rng(1), normalize_advantages=True)
    )
    assert len(batches) == 1
    b = batches[0]
    assert b.actions.shape == (4, 9) and b.actions.dtype == torch.int64
    for field in (b.old_log_probs, b.old_values, b.advantages, b.returns):
        assert field.shape == (4, 9)
    adv = b.advantages[b.loss_mask]
    assert abs(adv.mean().item()) < 1e-5 and abs(adv.std(correction=0).item() - 1) < 1e-4
    assert (b.advantages[~b.valid_mask] == 0).all()


def test_recurrent_contract_errors() -> None:
    with pytest.raises(ValueError, match="hidden_state_shapes"):
        RolloutBuffer(2, 2, spaces.Discrete(2), spaces.Discrete(2), recurrent=True)
    with pytest.raises(ValueError, match="num_envs"):
        RolloutBuffer(
            2,
            2,
            spaces.Discrete(2),
            spaces.Discrete(2),
            recurrent=True,
            hidden_state_shapes=(1, 3, 4),
        )
    buf = RolloutBuffer(
        2,
        2,
        spaces.Discrete(2),
        spaces.Discrete(2),
        recurrent=True,
        hidden_state_shapes={"h": (2, 5)},
        hidden_batch_dim=0,
    )
    with pytest.raises(ValueError, match="hidden state"):
        buf.add([0, 0], [0, 0], [0, 0], [0, 0], [0, 0], [0, 0], [0, 0], [1, 1])
    buf.add(
        [0, 0],
        [0, 0],
        [0, 0],
        [0, 0],
        [0, 0],
        [0, 0],
        [0, 0],
        [1, 1],
        hidden={"h": torch.ones(2, 5)},
    )
    assert buf.hidden_states["h"].shape == (2, 2, 5)
    buf.compute_returns_and_advantages([0.0, 0.0])
    with pytest.raises(ValueError, match="sequence_type"):
        next(buf.recurrent_minibatches(2, 1, np.random.default_rng(0), "bogus"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="seq_len"):
        next(buf.recurrent_minibatches(None, 1, np.random.default_rng(0), "chunked"))
    batch = next(buf.recurrent_minibatches(None, 2, np.random.default_rng(0), "maximum"))
    assert batch.initial_hidden["h"].shape == (2, 5)


@pytest.mark.parametrize(
    ("seq_type", "seq_len"), [("chunked", 5), ("maximum", None), ("fifty_percent_overlap", 4)]
)
def test_lstm_replay_reproduces_rollout_outputs(seq_type: str, seq_len: int | None) -> None:
    """BPTT over the yielded sequences reproduces the step-by-step rollout exactly."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    num_steps, num_envs, hidden_size = 16, 3, 5
    lstm = nn.LSTM(2, hidden_size)
    buf = RolloutBuffer(
        num_steps,
        num_envs,
        spaces.Box(-5, 5, (2,)),
        spaces.Discrete(2),
        recurrent=True,
        hidden_state_shapes=((1, num_envs, hidden_size),) * 2,
    )
    h = (torch.zeros(1, num_envs, hidden_size), torch.zeros(1, num_envs, hidden_size))
    outputs = torch.zeros(num_steps, num_envs, hidden_size)
    autoreset = np.zeros(num_envs, dtype=bool)
    episode_start = np.ones(num_envs, dtype=bool)
    with torch.no_grad():
        for t in range(num_steps):
            keep = torch.as_tensor(~episode_start, dtype=torch.float32)[None, :, None]
            h = (h[0] * keep, h[1] * keep)  # reset the state where an episode begins
            obs = torch.as_tensor(rng.normal(size=(num_envs, 2)), dtype=torch.float32)
            out, next_h = lstm(obs[None], h)
            outputs[t] = out[0]
            valid = ~autoreset
            term = valid & (rng.random(num_envs) < 0.2)
            trunc = valid & ~term & (rng.random(num_envs) < 0.1)
            buf.add(
                obs,
                [0] * num_envs,
                np.ones(num_envs),
                term,
                trunc,
                np.zeros(num_envs),
                np.zeros(num_envs),
                valid,
                hidden=h,
                episode_start=episode_start,
                final_value=np.zeros(num_envs),
            )
            episode_start, autoreset, h = autoreset, term | trunc, next_h
        buf.compute_returns_and_advantages(np.zeros(num_envs))
        for batch in buf.recurrent_minibatches(seq_len, 2, rng, seq_type):  # type: ignore[arg-type]
            state = batch.initial_hidden
            for k in range(batch.obs.shape[0]):
                keep = (~batch.episode_starts[k]).float()[None, :, None]
                state = (state[0] * keep, state[1] * keep)
                out, state = lstm(batch.obs[k][None], state)
                real = batch.step_mask[k]
                expected = outputs[batch.time_indices[k][real], batch.env_indices[real]]
                torch.testing.assert_close(out[0][real], expected, atol=1e-5, rtol=0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_buffer_matches_cpu() -> None:
    """Same rollout stored on CUDA and on CPU gives identical returns and batches."""
    rng = np.random.default_rng(3)
    steps = [
        (rng.normal(size=(N, 2)), rng.integers(0, 3, N), rng.normal(size=N), rng.normal(size=N))
        for _ in range(T)
    ]
    results = []
    for device in ("cpu", "cuda"):
        buf = RolloutBuffer(
            T,
            N,
            spaces.Box(-9, 9, (2,)),
            spaces.Discrete(3),
            device=device,
            recurrent=True,
            hidden_state_shapes=((LAYERS, N, HIDDEN),) * 2,
        )
        buf.reset(episode_start=[True, True, False])
        for t, (obs, act, rew, val) in enumerate(steps):
            hidden = tuple(torch.as_tensor(x, device=device) for x in _hidden_at(t))
            buf.add(
                torch.as_tensor(obs, device=device),
                act,
                rew,
                _mask(TERM, t),
                _mask(TRUNC, t),
                torch.as_tensor(val, device=device),
                np.zeros(N),
                ~_mask(INVALID, t),
                hidden=hidden,
                final_value=np.full(N, 2.0),
            )
        buf.compute_returns_and_advantages(np.zeros(N), truncation_bootstrap="autoreset_row")
        flat = list(buf.minibatches(5, np.random.default_rng(0), normalize_advantages=True))
        seqs = list(
            buf.recurrent_minibatches(4, 2, np.random.default_rng(0), "fifty_percent_overlap")
        )
        assert flat[0].obs.device.type == device and seqs[0].initial_hidden[0].device.type == device
        results.append(
            (
                buf.returns.cpu(),
                [b.advantages.cpu() for b in flat],
                [(s.obs.cpu(), s.loss_mask.cpu(), s.initial_hidden[1].cpu()) for s in seqs],
            )
        )
    (ret_c, flat_c, seq_c), (ret_g, flat_g, seq_g) = results
    torch.testing.assert_close(ret_c, ret_g)
    for adv_c, adv_g in zip(flat_c, flat_g, strict=True):
        torch.testing.assert_close(adv_c, adv_g)
    for fields_c, fields_g in zip(seq_c, seq_g, strict=True):
        for x, y in zip(fields_c, fields_g, strict=True):
            torch.testing.assert_close(x, y)
