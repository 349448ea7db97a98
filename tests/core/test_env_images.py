"""Channels-last ``[H, W, C]`` image observations: the layout arithmetic, the Gymnasium wrappers
that move channels first, the warning when a manifest's env is left channels-last, DQN and PPO
training through the CNN encoder, and (with the `atari` extra) Breakout's layouts."""

import textwrap
import warnings

import numpy as np
import pytest
import torch
from gymnasium import spaces

from agile_core.environments import make_vector_env
from agile_core.environments.images import ImageLayout, image_layout, looks_channels_last
from agile_core.environments.wrappers import ChannelsFirst, ImageObservation
from agile_core.specs.env import GymEnvSpec
from tests.core.image_envs import ChannelsLastImageEnv

torch.set_num_threads(1)
ENTRYPOINT = "tests.core.image_envs:ChannelsLastImageEnv"
RGB = spaces.Box(0, 255, (12, 16, 3), np.uint8)


def test_channels_first_moves_the_last_axis_first():
    layout = ImageLayout(RGB)
    images = np.random.default_rng(0).integers(0, 256, size=(5, 12, 16, 3), dtype=np.uint8)
    moved = layout(images)
    assert moved.shape == (5, 3, 12, 16) and moved.dtype == np.uint8
    np.testing.assert_array_equal(moved, images.transpose(0, 3, 1, 2))
    np.testing.assert_array_equal(layout(images[0]), images[0].transpose(2, 0, 1))  # one observation
    assert layout.space == spaces.Box(0, 255, (3, 12, 16), np.uint8)


def test_grayscale_and_downsample_keep_uint8_and_average_blocks():
    space, transform = image_layout(RGB, grayscale=True, downsample=4)
    assert space == spaces.Box(0, 255, (1, 3, 4), np.uint8)
    image = np.zeros((12, 16, 3), np.uint8)
    image[:4, :4] = [255, 0, 0]      # a red block
    image[4:8, 4:8] = [10, 20, 30]
    out = transform(image)
    assert out.shape == (1, 3, 4) and out.dtype == np.uint8
    assert out[0, 0, 0] == round(0.299 * 255)
    assert out[0, 1, 1] == round(0.299 * 10 + 0.587 * 20 + 0.114 * 30)
    assert out[0, 2, 3] == 0
    assert space.contains(out)


def test_downsample_crops_to_a_multiple_of_the_block():
    space, transform = image_layout(spaces.Box(0, 255, (13, 17, 3), np.uint8), channels_first=False, downsample=2)
    assert space.shape == (6, 8, 3)
    image = np.arange(13 * 17 * 3, dtype=np.float64).reshape(13, 17, 3) % 251
    block = image[:2, :2].mean(axis=(0, 1))
    np.testing.assert_array_equal(transform(image.astype(np.uint8))[0, 0], np.rint(block).astype(np.uint8))


@pytest.mark.parametrize(("space", "kwargs", "error"), [
    (spaces.Box(0, 1, (4,)), {}, TypeError),
    (spaces.Discrete(3), {}, TypeError),
    (spaces.Box(0, 255, (8, 8, 4), np.uint8), {"grayscale": True}, ValueError),
    (RGB, {"downsample": 0}, ValueError),
    (RGB, {"downsample": 2.0}, ValueError),
    (RGB, {"downsample": 13}, ValueError),
])
def test_bad_layouts_are_refused(space, kwargs, error):
    with pytest.raises(error):
        ImageLayout(space, **kwargs)


def test_gym_wrappers_give_channels_first_observations():
    env = ChannelsFirst(ChannelsLastImageEnv())
    assert env.observation_space == spaces.Box(0, 255, (3, 12, 16), np.uint8)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (3, 12, 16) and env.observation_space.contains(obs)
    raw, _ = ChannelsLastImageEnv().reset(seed=0)
    np.testing.assert_array_equal(obs, raw.transpose(2, 0, 1))
    small = ImageObservation(ChannelsLastImageEnv(), grayscale=True, downsample=2)
    small.reset(seed=1)
    obs, *_ = small.step(0)
    assert obs.shape == (1, 6, 8) and small.observation_space.contains(obs)


def test_channels_last_detection():
    assert looks_channels_last(RGB)
    assert looks_channels_last(spaces.Box(0, 255, (210, 160, 3), np.uint8))
    assert not looks_channels_last(spaces.Box(0, 255, (4, 84, 84), np.uint8))
    assert not looks_channels_last(spaces.Box(0, 1, (12, 16, 3), np.float32))
    assert not looks_channels_last(spaces.Box(0, 1, (8,), np.float32))


def test_a_channels_last_env_warns_with_the_wrapper_to_use():
    with pytest.warns(UserWarning, match=r"channels-last \[H, W, C\].*agile_core\.environments\.wrappers:ChannelsFirst"):
        make_vector_env(GymEnvSpec(name="images", entrypoint=ENTRYPOINT, num_envs=2)).close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env = make_vector_env(GymEnvSpec(name="images", entrypoint=ENTRYPOINT, num_envs=2,
                                         wrappers=["agile_core.environments.wrappers:ChannelsFirst"]))
    assert env.single_observation_space.shape == (3, 12, 16)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (2, 3, 12, 16) and obs.dtype == np.uint8
    env.close()


MANIFEST = """
algorithm:
  name: {algo}
  batch_size: 32
  learn_step: {learn_step}
environment:
  name: channels_last_images
  entrypoint: tests.core.image_envs:ChannelsLastImageEnv
  num_envs: 2
  wrappers:
    - {wrapper}
training:
  max_steps: 256
  evo_steps: 128
  pop_size: 2
  eval_loop: 1
  seed: 0
network:
  latent_dim: 16
  encoder_config: {{channel_size: [8], kernel_size: [3], stride_size: [2]}}
  head_config: {{hidden_size: [16]}}
mutation:
  probabilities: {{no_mut: 0.4, arch_mut: 0.3, new_layer: 0.3, params_mut: 0.2, act_mut: 0.0, rl_hp_mut: 0.0}}
  rand_seed: 0
tournament_selection: {{tournament_size: 2, elitism: true}}
"""


def _cnn_modules(agent):
    return [module for module in vars(agent).values()
            if isinstance(module, torch.nn.Module)
            and any(type(m).__name__ == "EvolvableCNN" for m in module.modules())]


@pytest.mark.parametrize(("algo", "learn_step", "wrapper"), [
    ("DQN", 4, "agile_core.environments.wrappers:ChannelsFirst"),
    ("PPO", 64, "agile_core.environments.wrappers:ChannelsFirst"),
    ("DQN", 4, "{name: agile_core.environments.wrappers:ImageObservation, kwargs: {grayscale: true, downsample: 2}}"),
], ids=["dqn", "ppo", "dqn-grayscale"])
def test_channels_last_images_train_through_the_cnn(algo, learn_step, wrapper):
    from agile_core.specs.manifest import TrainingManifest
    from agile_core.trainer import LocalTrainer

    text = MANIFEST.format(algo=algo, learn_step=learn_step, wrapper=wrapper)
    manifest = TrainingManifest.from_text(textwrap.dedent(text))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no channels-last warning: the wrapper fixed the layout
        population, fitnesses = LocalTrainer.from_manifest(manifest).train(verbose=False)
    assert len(population) == 2 and len(fitnesses) == 2
    assert all(agent.steps >= 256 for agent in population)
    assert all(_cnn_modules(agent) for agent in population)


# ---------------------------------------------------------------------------- Atari (extra `atari`)


def test_breakout_layouts():
    pytest.importorskip("ale_py", reason="the `atari` extra is not installed (uv sync --extra atari)")
    native = make_vector_env(GymEnvSpec(name="ALE/Breakout-v5", num_envs=2))  # ale-py's AtariVectorEnv
    assert native.single_observation_space == spaces.Box(0, 255, (4, 84, 84), np.uint8)
    obs, _ = native.reset(seed=0)
    assert obs.shape == (2, 4, 84, 84)
    native.close()
    raw = make_vector_env(GymEnvSpec(name="ALE/Breakout-v5", num_envs=1,
                                     wrappers=["agile_core.environments.wrappers:ChannelsFirst"]))
    assert raw.single_observation_space.shape == (3, 210, 160)
    raw.close()
    pytest.importorskip("cv2", reason="OpenCV (part of the `atari` extra) is not installed")
    preprocessed = make_vector_env(GymEnvSpec.model_validate({
        "name": "ALE/Breakout-v5", "num_envs": 1, "config": {"frameskip": 1},
        "wrappers": ["gymnasium.wrappers.AtariPreprocessing",
                     {"name": "gymnasium.wrappers.FrameStackObservation", "kwargs": {"stack_size": 4}}]}))
    assert preprocessed.single_observation_space.shape == (4, 84, 84)
    preprocessed.close()

