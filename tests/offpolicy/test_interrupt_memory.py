"""The Ctrl-C checkpoint carries the replay memory even when no periodic checkpoints were asked
for, so a resumed off-policy run starts from the data it had."""

from __future__ import annotations

import os
import signal

import gymnasium as gym
import pytest

from agile_core.training.checkpointing import resume_run
from agile_core.training.interrupt import TrainingInterrupted
from agile_offpolicy import DQN, ReplayBuffer, train_off_policy

NET = {"latent_dim": 16, "encoder_config": {"hidden_size": [16]}, "head_config": {"hidden_size": [16]}}


class _CtrlCAfter(ReplayBuffer):
    """A replay buffer that presses Ctrl-C once it holds `after` transitions."""

    after = 300

    def add(self, *args, **kwargs):
        super().add(*args, **kwargs)
        if len(self) >= self.after and not getattr(self, "_pressed", False):
            self._pressed = True
            os.kill(os.getpid(), signal.SIGINT)


def test_ctrl_c_checkpoint_holds_the_replay_memory(tmp_path):
    env = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
    agent = DQN(env.single_observation_space, env.single_action_space, net_config=NET, seed=0)
    memory = _CtrlCAfter(1_000, env.single_observation_space, env.single_action_space)
    with pytest.raises(TrainingInterrupted) as caught:
        train_off_policy(env, "CartPole-v1", "DQN", [agent], memory, max_steps=2_000, evo_steps=1_000,
                         verbose=False, checkpoint_path=str(tmp_path / "ckpt"), batch_population=False)
    saved = resume_run(caught.value.checkpoint_path)
    assert "replay" in saved.buffers
    restored = ReplayBuffer(1_000, env.single_observation_space, env.single_action_space)
    restored.load_state_dict(saved.buffers["replay"])
    assert len(restored) == len(memory) >= 300
