"""agile_marl.envs.wrappers: channels-last ``[H, W, C]`` image observations of PettingZoo envs
moved channels-first (and optionally grayscaled and downsampled), IPPO training through the CNN
encoder, the warning for an env left channels-last, and cooperative pong's layouts."""

import textwrap
import warnings

import numpy as np
import pytest
import torch
from gymnasium import spaces

from agile_marl.envs import make_vec_env
from agile_marl.envs.wrappers import ChannelsFirst, ImageObservation
from agile_marl.specs.env import MultiAgentEnvSpec
from tests.marl.image_envs import ImagePairEnv
from tests.marl.toy_envs import ToyHeteroEnv

torch.set_num_threads(1)
ENTRYPOINT = "tests.marl.image_envs:ImagePairEnv"


def test_channels_first_relays_every_agents_frames():
    env = ChannelsFirst(ImagePairEnv())
    raw = ImagePairEnv()
    for agent in env.possible_agents:
        assert env.observation_space(agent) == spaces.Box(0, 255, (3, 12, 16), np.uint8)
    obs, _ = env.reset(seed=0)
    expected, _ = raw.reset(seed=0)
    for agent in env.possible_agents:
        np.testing.assert_array_equal(obs[agent], expected[agent].transpose(2, 0, 1))
    obs, rewards, *_ = env.step(dict.fromkeys(env.agents, 0))
    assert set(rewards) == set(env.possible_agents)
    assert all(env.observation_space(a).contains(o) for a, o in obs.items())


def test_image_observation_grayscale_and_downsample():
    env = ImageObservation(ImagePairEnv(), grayscale=True, downsample=2)
    assert env.observation_space("player_0").shape == (1, 6, 8)
    obs, _ = env.reset(seed=1)
    assert obs["player_1"].shape == (1, 6, 8) and obs["player_1"].dtype == np.uint8


def test_envs_without_images_are_refused():
    with pytest.raises(TypeError, match=r"channels-last \[H, W, C\] Box"):
        ImageObservation(ToyHeteroEnv())


def test_a_channels_last_env_warns_with_the_marl_wrapper():
    with pytest.warns(UserWarning, match=r"agile_marl\.envs\.wrappers:ChannelsFirst"):
        make_vec_env(MultiAgentEnvSpec(name="images", entrypoint=ENTRYPOINT, num_envs=1)).close()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        env = make_vec_env(MultiAgentEnvSpec(name="images", entrypoint=ENTRYPOINT, num_envs=2,
                                             wrappers=["agile_marl.envs.wrappers:ChannelsFirst"]))
    assert env.observation_spaces["player_0"].shape == (3, 12, 16)
    env.close()


MANIFEST = """
algorithm:
  name: IPPO
  batch_size: 32
  learn_step: 64
  update_epochs: 1
environment:
  name: image_pair
  entrypoint: tests.marl.image_envs:ImagePairEnv
  num_envs: 2
  wrappers:
    - agile_marl.envs.wrappers:ChannelsFirst
training:
  max_steps: 256
  evo_steps: 128
  pop_size: 2
  eval_loop: 1
  seed: 0
network:
  latent_dim: 16
  encoder_config: {channel_size: [8], kernel_size: [3], stride_size: [2]}
  head_config: {hidden_size: [16]}
mutation:
  probabilities: {no_mut: 0.4, arch_mut: 0.3, new_layer: 0.3, params_mut: 0.2, act_mut: 0.0, rl_hp_mut: 0.0}
  rand_seed: 0
tournament_selection: {tournament_size: 2, elitism: true}
"""


def test_ippo_trains_on_channels_last_images_through_the_cnn():
    from agile_core.specs.manifest import TrainingManifest
    from agile_core.trainer import LocalTrainer

    manifest = TrainingManifest.from_text(textwrap.dedent(MANIFEST))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        population, fitnesses = LocalTrainer.from_manifest(manifest).train(verbose=False)
    assert len(population) == 2 and len(fitnesses) == 2
    for agent in population:
        assert agent.steps >= 256
        networks = [m for m in vars(agent).values() if isinstance(m, torch.nn.Module)]
        assert any(type(m).__name__ == "EvolvableCNN" for net in networks for m in net.modules())


def test_cooperative_pong_layouts():
    pong = pytest.importorskip("pettingzoo.butterfly.cooperative_pong_v6",
                               reason="PettingZoo butterfly needs pygame (uv sync --extra butterfly)")
    env = ImageObservation(pong.parallel_env(), grayscale=True, downsample=4)
    assert env.observation_space("paddle_0") == spaces.Box(0, 255, (1, 70, 120), np.uint8)
    obs, _ = env.reset(seed=0)
    assert {o.shape for o in obs.values()} == {(1, 70, 120)}
    env.close()
