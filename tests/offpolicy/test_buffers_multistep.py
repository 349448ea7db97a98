"""Tests for MultiStepReplayBuffer: hand-computed n-step returns, autoreset masking, PER alignment."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from agile_offpolicy.buffers import MultiStepReplayBuffer, PrioritizedReplayBuffer, ReplayBuffer

OBS = spaces.Box(-np.inf, np.inf, (1,), np.float32)
ACT = spaces.Discrete(2)
GAMMA = 0.9


def _col(values: Sequence[float]) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)[:, None]


def _stored(buf: MultiStepReplayBuffer) -> dict[float, tuple[float, float, float, int]]:
    """Map obs -> (return, next_obs, done, n_steps) over everything stored."""
    b = buf.sample_from_indices(np.arange(len(buf)))
    return {
        float(o): (float(r), float(no), float(d), int(k))
        for o, r, no, d, k in zip(
            b.obs[:, 0], b.reward, b.next_obs[:, 0], b.done, b.n_steps, strict=True
        )
    }


def test_hand_computed_termination_and_truncation() -> None:
    """gamma=0.9, n=3. Env 0 terminates after 4 steps, env 1 is truncated after 5 steps."""
    buf = MultiStepReplayBuffer(64, OBS, ACT, n_step=3, gamma=GAMMA, num_envs=2)
    # per step: (obs, reward, next_obs, terminated, truncated, mask) for env0 / env1
    steps = [
        ([0, 100], [1, 10], [1, 101], [0, 0], [0, 0], [1, 1]),
        ([1, 101], [2, 20], [2, 102], [0, 0], [0, 0], [1, 1]),
        ([2, 102], [3, 30], [3, 103], [0, 0], [0, 0], [1, 1]),
        ([3, 103], [4, 40], [4, 104], [1, 0], [0, 0], [1, 1]),  # env0 terminates
        (
            [4, 104],
            [0, 50],
            [10, 105],
            [0, 0],
            [0, 1],
            [0, 1],
        ),  # env0 autoreset (masked), env1 truncated
        ([10, 105], [5, 0], [11, 110], [0, 0], [0, 0], [1, 0]),  # env1 autoreset (masked)
    ]
    returned = []
    for obs, rew, nxt, term, trunc, mask in steps:
        out = buf.add(
            _col(obs),
            np.zeros(2),
            np.asarray(rew, np.float32),
            _col(nxt),
            np.asarray(term, bool),
            np.asarray(trunc, bool),
            mask=np.asarray(mask, bool),
        )
        returned.append(out)
    expected = {
        # env 0 (terminated at obs 3 -> 4)
        0.0: (1 + 0.9 * 2 + 0.81 * 3, 3.0, 0.0, 3),
        1.0: (2 + 0.9 * 3 + 0.81 * 4, 4.0, 1.0, 3),
        2.0: (3 + 0.9 * 4, 4.0, 1.0, 2),
        3.0: (4.0, 4.0, 1.0, 1),
        # env 1 (truncated at obs 104 -> 105: bootstrap from the final obs, done=0)
        100.0: (10 + 0.9 * 20 + 0.81 * 30, 103.0, 0.0, 3),
        101.0: (20 + 0.9 * 30 + 0.81 * 40, 104.0, 0.0, 3),
        102.0: (30 + 0.9 * 40 + 0.81 * 50, 105.0, 0.0, 3),
        103.0: (40 + 0.9 * 50, 105.0, 0.0, 2),
        104.0: (50.0, 105.0, 0.0, 1),
    }
    got = _stored(buf)
    assert len(buf) == len(expected) and set(got) == set(expected)
    for key, (ret, next_o, done, taken) in expected.items():
        assert got[key][0] == pytest.approx(ret, rel=1e-6), key
        assert got[key][1:] == (next_o, done, taken), key
    np.testing.assert_array_equal(buf.pending, [1, 0])  # env0's new episode (obs 10) is pending
    assert [len(t.reward) for t in returned] == [0, 0, 2, 4, 3, 0]
    # returned 1-step transitions: obs, reward r_t, next_obs = obs + 1, terminated only at the end
    one = [t for t in returned if len(t.reward)]
    obs1 = np.concatenate([t.obs[:, 0] for t in one])
    np.testing.assert_array_equal(np.concatenate([t.next_obs[:, 0] for t in one]), obs1 + 1)
    np.testing.assert_array_equal(obs1, buf.sample_from_indices(np.arange(9)).obs[:, 0].numpy())
    rewards = {0: 1, 1: 2, 2: 3, 3: 4, 100: 10, 101: 20, 102: 30, 103: 40, 104: 50}
    np.testing.assert_array_equal(
        np.concatenate([t.reward for t in one]), [rewards[int(o)] for o in obs1]
    )
    term1 = np.concatenate([t.terminated for t in one])
    np.testing.assert_array_equal(obs1[term1], [3.0])


class CounterEnv(gym.Env):
    """obs = 10000*env_id + 100*episode + t; reward = t + 1; episode ends after `length` steps."""

    def __init__(self, env_id: int, length: int, terminate: bool) -> None:
        self.observation_space = OBS
        self.action_space = ACT
        self.env_id, self.length, self.terminate = env_id, length, terminate
        self.episode, self.t = -1, 0

    def _obs(self) -> np.ndarray:
        return np.array([10000 * self.env_id + 100 * self.episode + self.t], dtype=np.float32)

    def reset(
        self, *, seed: int | None = None, options: dict | None = None
    ) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.episode, self.t = self.episode + 1, 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        end = self.t == self.length
        return self._obs(), float(self.t), end and self.terminate, end and not self.terminate, {}


ENV_SPECS = [(3, True), (4, False), (5, True), (2, False), (1, True)]


Sink = Callable[..., Any]


def _sink(buf: ReplayBuffer | MultiStepReplayBuffer) -> Sink:
    """The add call a training loop makes for this buffer type."""
    if isinstance(buf, MultiStepReplayBuffer):
        return lambda o, a, r, no, te, tr, m: buf.add(o, a, r, no, te, tr, mask=m)
    return lambda o, a, r, no, te, tr, m: buf.add(o, a, r, no, te, truncated=tr, mask=m)


def _run_vector_loop(
    sinks: list[Sink], steps: int, on_step: Callable[[int], None] | None = None
) -> int:
    """Drive SyncVectorEnv (next-step autoreset) exactly like a training loop; return stored rows."""
    envs = gym.vector.SyncVectorEnv([partial(CounterEnv, i, *s) for i, s in enumerate(ENV_SPECS)])
    assert envs.metadata["autoreset_mode"] == gym.vector.AutoresetMode.NEXT_STEP
    rng = np.random.default_rng(0)
    obs, _ = envs.reset(seed=0)
    prev_done = np.zeros(envs.num_envs, dtype=bool)
    stored = 0
    for step in range(steps):
        action = rng.integers(0, 2, envs.num_envs)
        next_obs, reward, term, trunc, _ = envs.step(action)
        mask = ~prev_done  # the step after a done is the autoreset step: not a real transition
        stored += int(mask.sum())
        for sink in sinks:
            sink(obs, action, reward, next_obs, term, trunc, mask)
        prev_done = term | trunc
        obs = next_obs
        if on_step is not None:
            on_step(step)
    envs.close()
    return stored


def test_autoreset_masking_with_sync_vector_env() -> None:
    one = ReplayBuffer(1000, OBS, ACT)
    nstep = MultiStepReplayBuffer(1000, OBS, ACT, n_step=3, gamma=GAMMA, num_envs=len(ENV_SPECS))
    stored = _run_vector_loop([_sink(one), _sink(nstep)], steps=40)
    assert len(one) == stored

    b = one.sample_from_indices(np.arange(len(one)))
    obs, nxt, done, rew = (
        b.obs[:, 0].numpy(),
        b.next_obs[:, 0].numpy(),
        b.done.numpy(),
        b.reward.numpy(),
    )
    np.testing.assert_array_equal(nxt, obs + 1)  # never crosses an episode boundary
    env_id = (obs // 10000).astype(int)
    t_next = nxt % 100
    lengths = np.array([s[0] for s in ENV_SPECS])
    terminates = np.array([s[1] for s in ENV_SPECS])
    ends = t_next == lengths[env_id]
    np.testing.assert_array_equal(done, (ends & terminates[env_id]).astype(np.float32))
    assert ends.any() and (ends & ~terminates[env_id]).any()  # both kinds of episode end occurred
    np.testing.assert_array_equal(rew, t_next)

    # n-step: every stored transition against the closed form of the counter env
    n = nstep.sample_from_indices(np.arange(len(nstep)))
    obs, nxt = n.obs[:, 0].numpy(), n.next_obs[:, 0].numpy()
    env_id = (obs // 10000).astype(int)
    t0 = (obs % 100).astype(int)
    taken = np.minimum(3, lengths[env_id] - t0)
    np.testing.assert_array_equal(n.n_steps.numpy(), taken)
    np.testing.assert_array_equal(nxt, obs + taken)
    ret = [sum(GAMMA**k * (t + 1 + k) for k in range(m)) for t, m in zip(t0, taken, strict=True)]
    np.testing.assert_allclose(n.reward.numpy(), ret, rtol=1e-6)
    finished = t0 + taken == lengths[env_id]
    np.testing.assert_array_equal(
        n.done.numpy(), (finished & terminates[env_id]).astype(np.float32)
    )
    assert len(nstep) + nstep.pending.sum() == len(one)  # every transition starts one n-step row
    assert len(set(obs.tolist())) == len(obs)


def test_rainbow_alignment_with_prioritized_buffer() -> None:
    """n-step and PER buffers written in lock-step hold the same start transition at each index."""
    nstep = MultiStepReplayBuffer(13, OBS, ACT, n_step=3, gamma=GAMMA, num_envs=len(ENV_SPECS))
    per = PrioritizedReplayBuffer(13, OBS, ACT, alpha=0.6, seed=0)

    def lockstep(o: Any, a: Any, r: Any, no: Any, te: Any, tr: Any, m: Any) -> None:
        per.add(*nstep.add(o, a, r, no, te, tr, mask=m))
        assert per.ptr == nstep.ptr and len(per) == len(nstep)

    _run_vector_loop([lockstep], steps=30)
    assert len(per) == 13  # wrapped around several times
    batch = per.sample(32, beta=0.5)
    nb = nstep.sample_from_indices(batch.indices)
    np.testing.assert_array_equal(batch.obs.numpy(), nb.obs.numpy())
    np.testing.assert_array_equal(batch.action.numpy(), nb.action.numpy())
    np.testing.assert_array_equal(batch.next_obs.numpy(), batch.obs.numpy() + 1)
    t_next = batch.next_obs[:, 0].numpy() % 100
    np.testing.assert_array_equal(batch.reward.numpy(), t_next)  # 1-step reward of the same start


def test_n_step_one_matches_replay_buffer() -> None:
    one = ReplayBuffer(100, OBS, ACT)
    nstep = MultiStepReplayBuffer(100, OBS, ACT, n_step=1, gamma=GAMMA, num_envs=len(ENV_SPECS))
    _run_vector_loop([_sink(one), _sink(nstep)], steps=20)
    a = one.sample_from_indices(np.arange(len(one)))
    b = nstep.sample_from_indices(np.arange(len(nstep)))
    for x, y in zip(a[:5], b[:5], strict=True):
        np.testing.assert_array_equal(x.numpy(), y.numpy())
    assert int(b.n_steps.min()) == int(b.n_steps.max()) == 1


def test_state_dict_resumes_mid_episode() -> None:
    num = len(ENV_SPECS)
    ref = MultiStepReplayBuffer(50, OBS, ACT, n_step=4, gamma=GAMMA, num_envs=num)
    resumed = MultiStepReplayBuffer(50, OBS, ACT, n_step=4, gamma=GAMMA, num_envs=num)

    late = MultiStepReplayBuffer(50, OBS, ACT, n_step=4, gamma=GAMMA, num_envs=num)
    late_active = [False]
    add_late = _sink(late)

    def late_sink(*args: Any) -> None:
        if late_active[0]:
            add_late(*args)

    def checkpoint(step: int) -> None:
        if step != 11:
            return
        state = ref.state_dict()
        assert all(isinstance(v, (int, np.ndarray)) for v in state.values())
        late.load_state_dict(state)
        late_active[0] = True
        resumed.load_state_dict(state)

    _run_vector_loop([_sink(ref), late_sink], steps=25, on_step=checkpoint)
    assert len(ref) == len(late) and ref.ptr == late.ptr
    np.testing.assert_array_equal(ref.pending, late.pending)
    for x, y in zip(
        ref.sample_from_indices(np.arange(len(ref)))[:6],
        late.sample_from_indices(np.arange(len(late)))[:6],
        strict=True,
    ):
        np.testing.assert_array_equal(x.numpy(), y.numpy())
    assert resumed.pending.sum() > 0


def test_dict_observations_and_validation() -> None:
    obs_space = spaces.Dict({"img": spaces.Box(0, 255, (2, 2), np.uint8), "k": spaces.Discrete(9)})
    buf = MultiStepReplayBuffer(
        8, obs_space, spaces.Box(-1, 1, (2,), np.float32), 2, 0.5, num_envs=2
    )
    for t in range(3):
        o = {"img": np.full((2, 2, 2), t, np.uint8), "k": np.array([t, t])}
        no = {"img": np.full((2, 2, 2), t + 1, np.uint8), "k": np.array([t + 1, t + 1])}
        buf.add(
            o, np.full((2, 2), 0.25), np.ones(2), no, np.array([False, t == 2]), np.zeros(2, bool)
        )
    b = buf.sample_from_indices(np.arange(len(buf)))
    assert b.obs["img"].dtype.is_floating_point is False and b.action.shape == (len(buf), 2)
    np.testing.assert_array_equal(b.next_obs["k"].numpy(), b.obs["k"].numpy() + b.n_steps.numpy())
    with pytest.raises(ValueError):
        MultiStepReplayBuffer(8, OBS, ACT, n_step=0, gamma=0.9)
