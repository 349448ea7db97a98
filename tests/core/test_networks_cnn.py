"""EvolvableCNN: channel/layer mutations, function preservation, bounds and round-trips."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from agile_core.networks import EvolvableCNN, MutationError, from_config
from agile_core.specs.network import CnnConfig

TOL = 1e-5


def _cnn(**kwargs) -> EvolvableCNN:
    torch.manual_seed(0)
    defaults = dict(input_shape=(3, 20, 20), num_outputs=10, channel_size=[8, 16], kernel_size=[4, 3],
                    stride_size=[2, 1])
    defaults.update(kwargs)
    return EvolvableCNN(**defaults)


def _x(shape=(3, 20, 20), batch: int = 6) -> torch.Tensor:
    return torch.rand(batch, *shape, generator=torch.Generator().manual_seed(1))


def _diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).detach().abs().max())


@pytest.mark.parametrize("layer_norm", [True, False])
@pytest.mark.parametrize("activation", ["ReLU", "Tanh", "GELU"])
def test_add_channel_preserves_function(layer_norm: bool, activation: str) -> None:
    for layer in range(2):
        net = _cnn(layer_norm=layer_norm, activation=activation)
        x = _x()
        before = net(x)
        change = net.add_channel(hidden_layer=layer, numb_new_channels=8, rng=np.random.default_rng(0))
        assert change == {"hidden_layer": layer, "numb_new_channels": 8}
        assert net.channel_size[layer] == [8, 16][layer] + 8
        assert _diff(net(x), before) < TOL


@pytest.mark.parametrize("layer_norm", [True, False])
def test_add_layer_is_identity(layer_norm: bool) -> None:
    for position in range(2):
        net = _cnn(layer_norm=layer_norm)
        x = _x()
        before = net(x)
        change = net.mutate("add_layer", np.random.default_rng(0), hidden_layer=position)
        assert change == {"hidden_layer": position, "kernel_size": 3}
        assert len(net.channel_size) == 3
        assert _diff(net(x), before) < TOL
        before = net(x)
        net.add_layer(hidden_layer=position, kernel_size=5, rng=np.random.default_rng(1))
        assert _diff(net(x), before) < TOL


def test_random_growth_sequences_stay_exact() -> None:
    rng = np.random.default_rng(4)
    net = _cnn(layer_norm=True, max_channel_size=64)
    x = _x()
    for _ in range(20):
        name = str(rng.choice(net.mutation_methods()))
        before = net(x)
        net.mutate(name, rng)
        if name.startswith("add"):
            assert _diff(net(x), before) < TOL, name


def test_remove_channel_keeps_overlapping_weights() -> None:
    net = _cnn()
    conv0 = net.blocks[0].main.weight.detach().clone()
    conv1 = net.blocks[1].main.weight.detach().clone()
    with pytest.raises(MutationError):
        net.remove_channel(hidden_layer=0, rng=np.random.default_rng(0))  # already at the minimum (8)
    net.remove_channel(hidden_layer=1, numb_channels=4, rng=np.random.default_rng(0))
    assert net.channel_size == [8, 12]
    assert torch.equal(net.blocks[0].main.weight, conv0)
    assert torch.equal(net.blocks[1].main.weight, conv1[:12])
    assert net(_x()).shape == (6, 10)


def test_remove_layer_remaps_the_flat_output_layer() -> None:
    net = _cnn()
    old_map = net.feature_map_shape()
    out_weight = net.output_layer.weight.detach().clone().reshape(10, *old_map)
    net.remove_layer(hidden_layer=1, rng=np.random.default_rng(0))
    new_map = net.feature_map_shape()
    assert new_map == (8, 9, 9) and old_map == (16, 7, 7)
    weight = net.output_layer.weight.detach().reshape(10, *new_map)
    assert torch.equal(weight[:, :8, :7, :7], out_weight[:, :8])
    assert float(weight[:, :, 7:, :].abs().sum()) == 0
    assert net(_x()).shape == (6, 10)


def test_bounds_are_respected() -> None:
    net = _cnn(channel_size=[8], kernel_size=[3], stride_size=[1], max_hidden_layers=2, max_channel_size=16)
    assert "remove_layer" not in net.mutation_methods()
    assert "remove_channel" not in net.mutation_methods()
    with pytest.raises(MutationError):
        net.add_channel(hidden_layer=0, numb_new_channels=9)
    net.add_channel(hidden_layer=0, numb_new_channels=8)
    assert "add_channel" not in net.mutation_methods()
    net.add_layer()
    assert "add_layer" not in net.mutation_methods()
    with pytest.raises(MutationError):
        net.mutate("add_layer")
    with pytest.raises(MutationError):
        net.add_layer(hidden_layer=0, kernel_size=4)


def test_config_round_trip_clone_and_replay() -> None:
    net, twin = _cnn(layer_norm=True), _cnn(layer_norm=True)
    rng = np.random.default_rng(8)
    for _ in range(12):
        name = str(rng.choice(net.mutation_methods()))
        change = net.mutate(name, rng)
        twin.mutate(name, **change)
        assert twin.config == net.config
    config = json.loads(json.dumps(net.config))
    rebuilt = from_config(config)
    rebuilt.load_state_dict(net.state_dict())
    assert torch.equal(rebuilt(_x()), net(_x()))
    copy = net.clone()
    ptrs = {t.data_ptr() for t in [*net.parameters(), *net.buffers()]}
    assert not ptrs & {t.data_ptr() for t in [*copy.parameters(), *copy.buffers()]}


def test_single_channel_and_leading_dims() -> None:
    net = EvolvableCNN((16, 16), 4, channel_size=[8], kernel_size=[3], stride_size=[2])
    assert net(torch.rand(5, 16, 16)).shape == (5, 4)
    assert net(torch.rand(2, 3, 16, 16)).shape == (2, 3, 4)
    spec = CnnConfig(channel_size=[8], kernel_size=[3], stride_size=[1], layer_norm=True)
    net = EvolvableCNN.from_spec(spec.model_dump(), (1, 8, 8), 5, dtype=torch.float64)
    net.add_channel(rng=np.random.default_rng(0))
    assert all(p.dtype == torch.float64 for p in net.parameters())


def test_too_small_images_are_rejected() -> None:
    with pytest.raises(ValueError, match="too small"):
        EvolvableCNN((3, 6, 6), 4, channel_size=[8, 8], kernel_size=[4, 4], stride_size=[2, 2])


def _is_orthogonal(weight: torch.Tensor, gain: float) -> bool:
    w = weight.detach().reshape(weight.shape[0], -1)
    gram = w @ w.T if w.shape[0] <= w.shape[1] else w.T @ w
    return torch.allclose(gram, gain**2 * torch.eye(gram.shape[0]), atol=1e-4)


def test_default_initialisation_is_unchanged_by_init_layers() -> None:
    torch.manual_seed(0)
    first = torch.nn.Conv2d(3, 8, 4, stride=2)
    second = torch.nn.Conv2d(8, 16, 3, stride=1)
    output = torch.nn.Linear(16 * 7 * 7, 10)
    net = _cnn()
    assert net.config["init_layers"] is False
    for mine, reference in ((net.blocks[0].main, first), (net.blocks[1].main, second), (net.output_layer, output)):
        assert torch.equal(mine.weight, reference.weight) and torch.equal(mine.bias, reference.bias)


def test_init_layers_gives_orthogonal_convolutions_and_output() -> None:
    net = _cnn(init_layers=True)
    for layer in [block.main for block in net.blocks] + [net.output_layer]:
        assert _is_orthogonal(layer.weight, 2 ** 0.5), layer
        assert not layer.bias.any()
    assert net.config["init_layers"] is True
    assert from_config(net.config).config == net.config
    assert EvolvableCNN.from_spec(CnnConfig(channel_size=[8], kernel_size=[3], stride_size=[2], init_layers=True),
                                  (3, 20, 20), 4).init_layers
    x = _x()
    before = net(x)
    net.add_layer(hidden_layer=0, rng=np.random.default_rng(0))  # mutations keep preserving function
    net.add_channel(hidden_layer=1, numb_new_channels=8, rng=np.random.default_rng(0))
    assert _diff(net(x), before) < TOL
