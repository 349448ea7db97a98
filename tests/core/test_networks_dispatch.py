"""Observation-space dispatch (build_encoder) and observation preprocessing."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from agile_core.networks import (
    EvolvableCNN,
    EvolvableLSTM,
    EvolvableMLP,
    EvolvableMultiInput,
    build_encoder,
    infer_arch,
    preprocess_observation,
)
from agile_core.specs.network import NetworkSpec

IMAGE = spaces.Box(0, 255, (3, 32, 32), dtype=np.uint8)
VECTOR = spaces.Box(-1, 1, (5,))


@pytest.mark.parametrize(
    ("space", "kind", "inputs"),
    [
        (VECTOR, EvolvableMLP, 5),
        (spaces.Box(-1, 1, (3, 4)), EvolvableMLP, 12),
        (spaces.Discrete(6), EvolvableMLP, 6),
        (spaces.MultiDiscrete([3, 4, 2]), EvolvableMLP, 3),
        (spaces.MultiBinary(7), EvolvableMLP, 7),
        (IMAGE, EvolvableCNN, None),
        (spaces.Dict({"img": IMAGE, "vec": VECTOR}), EvolvableMultiInput, None),
        (spaces.Tuple((VECTOR, spaces.Discrete(2))), EvolvableMultiInput, None),
    ],
)
def test_dispatch_by_space_kind(space: spaces.Space, kind: type, inputs: int | None) -> None:
    encoder = build_encoder(space, {"latent_dim": 16})
    assert isinstance(encoder, kind)
    assert encoder.num_outputs == 16
    if inputs is not None:
        assert encoder.num_inputs == inputs
    space.seed(0)
    batch = [space.sample() for _ in range(3)]
    if isinstance(space, spaces.Dict):
        raw = {key: np.stack([b[key] for b in batch]) for key in space.spaces}
    elif isinstance(space, spaces.Tuple):
        raw = tuple(np.stack([b[i] for b in batch]) for i in range(len(space.spaces)))
    else:
        raw = np.stack(batch)
    assert encoder(preprocess_observation(space, raw)).shape == (3, 16)


def test_recurrent_gives_lstm_and_explicit_arch_wins() -> None:
    encoder = build_encoder(VECTOR, None, recurrent=True, latent_dim=8)
    assert isinstance(encoder, EvolvableLSTM) and encoder.num_outputs == 8
    assert infer_arch(spaces.Discrete(3), recurrent=True) == "lstm"
    two_d = spaces.Box(0, 1, (12, 12))
    assert isinstance(build_encoder(two_d), EvolvableMLP)
    cnn = build_encoder(two_d, {"encoder_config": {"arch": "cnn", "channel_size": [8], "kernel_size": [3],
                                                   "stride_size": [1]}})
    assert isinstance(cnn, EvolvableCNN) and cnn(torch.rand(2, 12, 12)).shape == (2, 32)
    mlp_on_image = build_encoder(IMAGE, NetworkSpec(encoder_config={"arch": "mlp", "hidden_size": [8]}))
    assert isinstance(mlp_on_image, EvolvableMLP) and mlp_on_image.num_inputs == 3 * 32 * 32
    lstm = build_encoder(VECTOR, {"encoder_config": {"arch": "lstm", "hidden_state_size": 16}})
    assert isinstance(lstm, EvolvableLSTM)


def test_encoder_config_without_arch_configures_the_multi_input_part() -> None:
    space = spaces.Dict({"img": IMAGE, "vec": VECTOR})
    encoder = build_encoder(space, {"encoder_config": {"hidden_size": [24, 24]}})
    assert isinstance(encoder, EvolvableMultiInput)
    assert encoder.mlp is not None and encoder.mlp.hidden_size == [24, 24]
    encoder = build_encoder(space, {"encoder_config": {"channel_size": [8], "kernel_size": [4], "stride_size": [4]}})
    assert isinstance(encoder, EvolvableMultiInput) and encoder.cnns[0].channel_size == [8]


@pytest.mark.parametrize(
    ("space", "config", "recurrent"),
    [
        (VECTOR, {"arch": "cnn"}, False),
        (spaces.Discrete(4), {"arch": "cnn"}, False),
        (VECTOR, {"arch": "multiinput"}, False),
        (spaces.Dict({"a": VECTOR}), {"arch": "mlp"}, False),
        (IMAGE, {"arch": "lstm"}, False),
        (VECTOR, {"arch": "mlp"}, True),
        (IMAGE, None, True),
    ],
)
def test_mismatched_arch_raises_naming_space_and_arch(space: spaces.Space, config: dict | None,
                                                      recurrent: bool) -> None:
    with pytest.raises(ValueError) as error:
        build_encoder(space, {"encoder_config": config}, recurrent=recurrent)
    message = str(error.value)
    assert str(space) in message
    assert (config or {"arch": "lstm"})["arch"] in message or "recurrent" in message


def test_preprocess_box_images_and_batching() -> None:
    image = np.full((2, 3, 32, 32), 255, dtype=np.uint8)
    out = preprocess_observation(IMAGE, image, device="cpu")
    assert out.dtype == torch.float32 and out.shape == (2, 3, 32, 32) and float(out.max()) == 1.0
    raw = preprocess_observation(IMAGE, image, normalize_images=False)
    assert float(raw.max()) == 255.0
    single = preprocess_observation(VECTOR, np.zeros(5, dtype=np.float32))
    assert single.shape == (1, 5)
    assert preprocess_observation(VECTOR, torch.ones(4, 5)).shape == (4, 5)


def test_preprocess_discrete_and_multi_spaces() -> None:
    onehot = preprocess_observation(spaces.Discrete(4), np.array([0, 3, 1]))
    assert torch.equal(onehot, torch.eye(4)[[0, 3, 1]])
    assert preprocess_observation(spaces.Discrete(4), 2).shape == (1, 4)
    assert preprocess_observation(spaces.Discrete(4), np.array([[2], [1]])).shape == (2, 4)
    shifted = preprocess_observation(spaces.Discrete(3, start=5), np.array([5, 7]))
    assert torch.equal(shifted, torch.eye(3)[[0, 2]])
    multi = preprocess_observation(spaces.MultiDiscrete([3, 4]), np.array([[1, 2], [0, 3]]))
    assert multi.dtype == torch.float32 and multi.shape == (2, 2)
    binary = preprocess_observation(spaces.MultiBinary(3), np.array([1, 0, 1], dtype=np.int8))
    assert binary.shape == (1, 3)


def test_preprocess_dict_and_tuple() -> None:
    space = spaces.Dict({"img": IMAGE, "pos": VECTOR, "mode": spaces.Discrete(3)})
    obs = {"img": np.zeros((2, 3, 32, 32), dtype=np.uint8), "pos": np.zeros((2, 5)), "mode": np.array([1, 2])}
    out = preprocess_observation(space, obs)
    assert isinstance(out, dict) and out["mode"].shape == (2, 3) and out["img"].dtype == torch.float32
    tup = spaces.Tuple((VECTOR, spaces.Discrete(2)))
    out = preprocess_observation(tup, (np.zeros((2, 5)), np.array([0, 1])))
    assert isinstance(out, tuple) and out[1].shape == (2, 2)
    with pytest.raises(ValueError):
        preprocess_observation(spaces.Text(5), ["hello"])


def test_tensor_observations_come_back_as_the_tensor_and_dicts_are_refused() -> None:
    from agile_core.networks import preprocess_tensor_observation

    box = spaces.Box(0, 255, (2, 3, 3), np.uint8)
    tensor = preprocess_tensor_observation(box, np.full((4, 2, 3, 3), 255, np.uint8))
    assert tensor.shape == (4, 2, 3, 3) and float(tensor.max()) == 1.0
    with pytest.raises(ValueError, match="not a single tensor"):
        preprocess_tensor_observation(spaces.Dict({"a": spaces.Discrete(3)}), {"a": np.array([1])})
