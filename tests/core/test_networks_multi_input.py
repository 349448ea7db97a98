"""EvolvableMultiInput: Dict/Tuple spaces, delegated (lockstep) mutations, preservation, round-trips."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from gymnasium import spaces

from agile_core.networks import (
    EvolvableMultiInput,
    MutationError,
    from_config,
    preprocess_observation,
)

TOL = 1e-5
SMALL = {
    "latent_dim": 8,
    "cnn_config": {"channel_size": [8], "kernel_size": [3], "stride_size": [2], "layer_norm": True},
    "mlp_config": {"hidden_size": [16]},
}


def _dict_space() -> spaces.Dict:
    return spaces.Dict({
        "camera": spaces.Box(0, 255, (3, 12, 12), dtype=np.uint8),
        "depth": spaces.Box(0, 1, (1, 10, 10)),
        "position": spaces.Box(-1, 1, (3,)),
        "mode": spaces.Discrete(4),
        "flags": spaces.MultiBinary(2),
    })


def _net(space: spaces.Space) -> EvolvableMultiInput:
    torch.manual_seed(0)
    return EvolvableMultiInput.from_space(space, 12, SMALL)


def _obs(space: spaces.Space, batch: int = 5):
    space.seed(0)
    samples = [space.sample() for _ in range(batch)]
    if isinstance(space, spaces.Dict):
        stacked = {key: np.stack([s[key] for s in samples]) for key in space.spaces}
    else:
        stacked = tuple(np.stack([s[i] for s in samples]) for i in range(len(space.spaces)))
    return preprocess_observation(space, stacked)


def _diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).detach().abs().max())


def test_structure_and_forward() -> None:
    net = _net(_dict_space())
    assert len(net.cnns) == 2 and net.mlp is not None
    assert net.mlp.num_inputs == 3 + 4 + 2
    assert net(_obs(_dict_space())).shape == (5, 12)
    assert "cnn.add_channel" in net.mutation_methods()
    assert "mlp.add_node" in net.mutation_methods()
    assert net.mutation_kind("cnn.add_layer") == "layer"


def test_tuple_space_and_vector_only_and_image_only() -> None:
    tup = spaces.Tuple((spaces.Box(-1, 1, (4,)), spaces.Box(0, 1, (2, 8, 8)), spaces.MultiDiscrete([3, 2])))
    net = _net(tup)
    assert net(_obs(tup)).shape == (5, 12)
    vectors = spaces.Dict({"a": spaces.Box(-1, 1, (2,)), "b": spaces.Discrete(3)})
    assert not _net(vectors).cnns and _net(vectors)(_obs(vectors)).shape == (5, 12)
    images = spaces.Dict({"a": spaces.Box(0, 1, (1, 8, 8))})
    net = _net(images)
    assert net.mlp is None and net(_obs(images)).shape == (5, 12)
    assert not any(name.startswith("mlp.") for name in net.mutation_methods())


def test_every_growing_mutation_preserves_function() -> None:
    space = _dict_space()
    obs = _obs(space)
    base = _net(space)
    for name in [n for n in base.mutation_methods() if n.split(".")[-1].startswith("add")]:
        net = base.clone()
        before = net(obs)
        net.mutate(name, np.random.default_rng(0))
        assert _diff(net(obs), before) < TOL, name


def test_cnn_mutations_apply_to_every_cnn_in_lockstep() -> None:
    net = _net(_dict_space())
    change = net.mutate("cnn.add_channel", np.random.default_rng(0))
    first, second = net.cnns
    assert first.channel_size == second.channel_size == [8 + change["numb_new_channels"]]
    net.mutate("cnn.add_layer", np.random.default_rng(0))
    assert len(first.channel_size) == len(second.channel_size) == 2


def test_round_trip_clone_and_replay() -> None:
    space = _dict_space()
    net, twin = _net(space), _net(space)
    rng = np.random.default_rng(6)
    for _ in range(12):
        name = str(rng.choice(net.mutation_methods()))
        twin.mutate(name, **net.mutate(name, rng))
        assert twin.config == net.config
    rebuilt = from_config(json.loads(json.dumps(net.config)))
    rebuilt.load_state_dict(net.state_dict())
    obs = _obs(space)
    assert torch.equal(rebuilt(obs), net(obs))
    copy = net.clone()
    assert not {t.data_ptr() for t in net.parameters()} & {t.data_ptr() for t in copy.parameters()}


def test_unsupported_parts_are_rejected() -> None:
    nested = spaces.Dict({"inner": spaces.Dict({"a": spaces.Discrete(2)})})
    with pytest.raises(ValueError, match="inner"):
        _net(nested)
    with pytest.raises(MutationError):
        _net(spaces.Dict({"a": spaces.Discrete(3)})).mutate("cnn.add_layer")
