"""Action masks: stored with every rollout row and applied again when PPO learns."""

import dataclasses

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from agile_onpolicy.collect import collect_rollouts
from agile_onpolicy.ppo import PPO
from agile_onpolicy.rollout import RecurrentBatch, RolloutBuffer

torch.set_num_threads(1)
NET = {"latent_dim": 16, "encoder_config": {"hidden_size": [16]}, "head_config": {"hidden_size": [16]}}
LSTM_NET = {"latent_dim": 16, "encoder_config": {"hidden_state_size": 16}, "head_config": {"hidden_size": [16]}}


class MaskedChoiceEnv(gym.Env):
    """Four actions; at step t only actions t % 4 and (t + 1) % 4 are allowed, and t % 4 pays 1.

    The observation is the one-hot of t % 4; episodes last 6 steps; every reset and step info
    carries ``action_mask`` (int8, 1 = allowed).
    """

    observation_space = spaces.Box(0.0, 1.0, (4,), np.float32)
    action_space = spaces.Discrete(4)

    def __init__(self) -> None:
        self.t = 0

    def _obs_info(self) -> tuple[np.ndarray, dict]:
        obs = np.zeros(4, dtype=np.float32)
        obs[self.t % 4] = 1.0
        mask = np.zeros(4, dtype=np.int8)
        mask[[self.t % 4, (self.t + 1) % 4]] = 1
        return obs, {"action_mask": mask}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs_info()

    def step(self, action):
        mask = self._obs_info()[1]["action_mask"]
        if not mask[int(action)]:
            raise AssertionError(f"masked action {action} taken at step {self.t}")
        reward = float(int(action) == self.t % 4)
        self.t += 1
        obs, info = self._obs_info()
        return obs, reward, self.t >= 6, False, info


def masked_env(num_envs: int = 3) -> gym.vector.VectorEnv:
    return gym.vector.SyncVectorEnv([MaskedChoiceEnv] * num_envs)


def agent_for(env: gym.vector.VectorEnv, recurrent: bool) -> PPO:
    torch.manual_seed(0)
    return PPO(env.single_observation_space, env.single_action_space, seed=0, lr=1e-2, learn_step=48, batch_size=16,
               recurrent=recurrent, max_seq_len=4, update_epochs=2, net_config=LSTM_NET if recurrent else NET)


def expected_mask(obs: torch.Tensor) -> torch.Tensor:
    """The mask the env sent with observation `obs` (one-hot of t % 4)."""
    t = obs.argmax(dim=-1)
    mask = torch.nn.functional.one_hot(t, 4) | torch.nn.functional.one_hot((t + 1) % 4, 4)
    return mask.bool()


@pytest.mark.parametrize("recurrent", [False, True], ids=["mlp", "lstm"])
def test_masked_actions_have_zero_probability_when_acting_and_learning(recurrent):
    env = masked_env()
    agent = agent_for(env, recurrent)
    buffer = agent.create_rollout_buffer(env.num_envs)
    collect_rollouts(agent, env, buffer, seed=0)  # the env itself raises on a masked action

    # Acting: the stored mask is the one the env sent with each observation, and allows the action.
    n = buffer.size
    assert buffer.action_masks is not None and buffer.action_masks.shape == (n, env.num_envs, 4)
    assert torch.equal(buffer.action_masks[:n], expected_mask(buffer.observations[:n]))
    taken = buffer.action_masks[:n].gather(-1, buffer.actions[:n].unsqueeze(-1)).squeeze(-1)
    assert taken.all()

    # Learning, first epoch (weights unchanged): the ratio is exactly 1 on every row ...
    batches = list(agent._minibatches(buffer))
    assert all(batch.action_masks is not None for batch in batches)
    for batch in batches:
        log_prob, _, _, loss_mask = agent.evaluate_batch(batch)
        rows = loss_mask if loss_mask is not None else torch.ones_like(log_prob, dtype=torch.bool)
        torch.testing.assert_close(log_prob[rows], batch.old_log_probs[rows], atol=1e-5, rtol=0)
        losses = agent.compute_losses(batch)
        assert float(losses["approx_kl"]) == pytest.approx(0.0, abs=1e-6)
        assert float(losses["clip_fraction"]) == 0.0
        # ... and a masked action (the one two steps ahead is never allowed) has probability 0.
        masked_action = (batch.obs.argmax(dim=-1) + 2) % 4
        masked_log_prob, *_ = agent.evaluate_batch(dataclasses.replace(batch, actions=masked_action))
        assert torch.exp(masked_log_prob[rows]).max() == 0.0
        # Re-scoring without the stored masks would compare different distributions.
        unmasked, *_ = agent.evaluate_batch(dataclasses.replace(batch, action_masks=None))
        assert (unmasked[rows] - batch.old_log_probs[rows]).abs().max() > 1e-2

    stats = agent.learn(buffer)
    assert np.isfinite(stats["loss"]) and stats["minibatches"] >= 2


def test_recurrent_padding_rows_carry_an_all_false_mask():
    env = masked_env(2)
    agent = agent_for(env, recurrent=True)
    buffer = agent.create_rollout_buffer(env.num_envs)
    collect_rollouts(agent, env, buffer, seed=0)
    batches = list(buffer.recurrent_minibatches(5, 2, np.random.default_rng(0)))  # 24 steps: last chunk padded
    padded = [b for b in batches if isinstance(b, RecurrentBatch) and not b.step_mask.all()]
    assert padded
    for batch in padded:
        assert batch.action_masks is not None
        assert not batch.action_masks[~batch.step_mask].any()
        assert batch.action_masks[batch.step_mask].sum(-1).eq(2).all()


def test_masked_agent_learns_the_paying_action():
    env = masked_env(4)
    torch.manual_seed(0)
    agent = PPO(env.single_observation_space, env.single_action_space, seed=0, lr=3e-3, learn_step=96, batch_size=32,
                update_epochs=4, ent_coef=0.0, net_config=NET)
    buffer = agent.create_rollout_buffer(env.num_envs)
    state = None
    for _ in range(20):
        state = collect_rollouts(agent, env, buffer, state=state, seed=0)
        agent.learn(buffer)
    assert agent.test(masked_env(4)) == pytest.approx(6.0)


def test_prepare_action_mask():
    discrete = PPO(spaces.Box(-1, 1, (2,)), spaces.Discrete(3), net_config=NET)
    mask = discrete.prepare_action_mask(np.array([[1, 0, 1], [0, 0, 0]], dtype=np.int8))
    assert mask is not None and mask.dtype == torch.bool
    assert mask.tolist() == [[True, False, True], [True, True, True]]  # nothing allowed: no mask sent
    assert discrete.prepare_action_mask(None) is None
    with pytest.raises(ValueError, match="entries"):
        discrete.prepare_action_mask(np.ones((1, 4)))

    multi = PPO(spaces.Box(-1, 1, (2,)), spaces.MultiDiscrete([2, 3]), net_config=NET)
    mask = multi.prepare_action_mask(torch.tensor([[1, 0, 0, 0, 0]]))
    assert mask is not None and mask.tolist() == [[True, False, True, True, True]]

    box = PPO(spaces.Box(-1, 1, (2,)), spaces.Box(-1, 1, (1,)), net_config=NET)
    assert box.prepare_action_mask(np.ones((1, 1))) is None


def test_buffer_mask_storage():
    buffer = RolloutBuffer(3, 2, spaces.Box(-1, 1, (1,)), spaces.Discrete(3))
    args = (np.zeros((2, 1)), np.zeros(2), np.zeros(2), np.zeros(2), np.zeros(2), np.zeros(2), np.zeros(2),
            np.ones(2))
    buffer.add(*args)
    assert buffer.action_masks is None
    buffer.add(*args, action_mask=np.array([[1, 0, 0], [0, 1, 1]]))
    buffer.add(*args)  # no mask for this row: everything allowed
    assert buffer.action_masks is not None
    assert buffer.action_masks[:, 0].tolist() == [[True] * 3, [True, False, False], [True] * 3]
    buffer.compute_returns_and_advantages(np.zeros(2))
    (batch,) = buffer.minibatches(6, np.random.default_rng(0))
    assert batch.action_masks is not None
    assert torch.equal(batch.action_masks, buffer.action_masks.flatten(0, 1)[batch.indices])

    box = RolloutBuffer(2, 2, spaces.Box(-1, 1, (1,)), spaces.Box(-1, 1, (1,)))
    with pytest.raises(ValueError, match="Discrete"):
        box.add(np.zeros((2, 1)), np.zeros((2, 1)), *args[2:], action_mask=np.ones((2, 1)))
