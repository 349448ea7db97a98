"""EvolvableMLP and the mutation API: preservation, bounds, round-trips, clones and replay."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from agile_core.networks import (
    EvolvableCNN,
    EvolvableMLP,
    EvolvableModule,
    MutationError,
    from_config,
)
from agile_core.specs.network import MlpConfig

TOL = 1e-5


def _mlp(**kwargs) -> EvolvableMLP:
    torch.manual_seed(0)
    defaults = dict(num_inputs=6, num_outputs=3, hidden_size=[16, 24], layer_norm=True)
    defaults.update(kwargs)
    return EvolvableMLP(**defaults)


def _diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).detach().abs().max())


def _x(batch: int = 64, dim: int = 6) -> torch.Tensor:
    return torch.randn(batch, dim, generator=torch.Generator().manual_seed(1)) * 3


@pytest.mark.parametrize("layer_norm", [True, False])
@pytest.mark.parametrize("activation", ["ReLU", "Tanh", "GELU", "Sigmoid", "PReLU"])
def test_add_node_preserves_function_on_every_layer(layer_norm: bool, activation: str) -> None:
    for layer in range(2):
        net = _mlp(layer_norm=layer_norm, activation=activation, output_activation="Tanh")
        x = _x()
        before = net(x)
        change = net.add_node(hidden_layer=layer, numb_new_nodes=40, rng=np.random.default_rng(0))
        assert change == {"hidden_layer": layer, "numb_new_nodes": 40}
        assert net.hidden_size[layer] == [16, 24][layer] + 40
        assert _diff(net(x), before) < TOL


@pytest.mark.parametrize("layer_norm", [True, False])
def test_add_layer_is_an_exact_identity_at_every_position(layer_norm: bool) -> None:
    for position in range(2):
        net = _mlp(layer_norm=layer_norm, activation="ELU")
        x = _x()
        before = net(x)
        assert net.mutate("add_layer", hidden_layer=position) == {"hidden_layer": position}
        assert net.hidden_size == [16, 16, 24] if position == 0 else [16, 24, 24]
        assert net.blocks[position + 1].residual
        assert _diff(net(x), before) < TOL


def test_growth_stays_exact_through_long_random_sequences() -> None:
    rng = np.random.default_rng(3)
    net = _mlp(hidden_size=[8], max_mlp_nodes=128)
    x = _x()
    for _ in range(40):
        grow = [name for name in net.mutation_methods() if name.startswith("add")]
        shrink = [name for name in net.mutation_methods() if name.startswith("remove")]
        name = str(rng.choice(grow + shrink))
        before = net(x)
        net.mutate(name, rng)
        if name in grow:
            assert _diff(net(x), before) < TOL, name


def test_new_layer_and_new_nodes_receive_gradients() -> None:
    net = _mlp()
    net.add_layer(hidden_layer=1, rng=np.random.default_rng(0))
    net.add_node(hidden_layer=0, numb_new_nodes=8, rng=np.random.default_rng(0))
    net(_x()).pow(2).sum().backward()
    new_block = net.blocks[2]
    assert new_block.gate.grad is not None and float(new_block.gate.grad.abs()) > 0
    assert float(net.blocks[0].main.weight.grad[16:].abs().sum()) > 0


def test_remove_node_keeps_overlapping_weights() -> None:
    net = _mlp()
    first, second = net.blocks[0].main.weight.detach().clone(), net.blocks[1].main.weight.detach().clone()
    gains = net.blocks[0].norm.weight.detach().clone()
    assert net.remove_node(hidden_layer=0, numb_nodes=6, rng=np.random.default_rng(0)) == {
        "hidden_layer": 0, "numb_nodes": 6}
    assert net.hidden_size == [10, 24]
    assert torch.equal(net.blocks[0].main.weight, first[:10])
    assert torch.equal(net.blocks[0].norm.weight, gains[:10])
    assert torch.equal(net.blocks[1].main.weight, second[:, :10])
    out_before = net.output_layer.weight.detach().clone()
    net.remove_node(hidden_layer=1, numb_nodes=4, rng=np.random.default_rng(0))
    assert torch.equal(net.output_layer.weight, out_before[:, :20])


def test_remove_layer_keeps_overlapping_weights() -> None:
    net = _mlp(hidden_size=[16, 24, 12])
    reader = net.blocks[2].main.weight.detach().clone()
    net.remove_layer(hidden_layer=1, rng=np.random.default_rng(0))
    assert net.hidden_size == [16, 12]
    # the reader now takes 16 inputs instead of 24: the first 16 columns survive
    assert torch.equal(net.blocks[1].main.weight, reader[:, :16])
    net.add_layer(hidden_layer=0, rng=np.random.default_rng(0))
    net.remove_layer(hidden_layer=0, rng=np.random.default_rng(0))
    assert not net.blocks[0].residual  # a layer reading the raw input is never residual
    assert net(_x()).shape == (64, 3)


def test_bounds_are_respected() -> None:
    net = _mlp(hidden_size=[8], min_hidden_layers=1, max_hidden_layers=2, min_mlp_nodes=8, max_mlp_nodes=20)
    assert "remove_layer" not in net.mutation_methods()
    assert "remove_node" not in net.mutation_methods()
    with pytest.raises(MutationError):
        net.mutate("remove_layer")
    with pytest.raises(MutationError):
        net.remove_node(rng=np.random.default_rng(0))
    with pytest.raises(MutationError):
        net.add_node(hidden_layer=0, numb_new_nodes=13)  # 8 + 13 > 20
    assert net.add_node(hidden_layer=0, rng=np.random.default_rng(0))["numb_new_nodes"] <= 12
    if net.hidden_size[0] < 20:
        net.add_node(hidden_layer=0, numb_new_nodes=20 - net.hidden_size[0])
    assert net.hidden_size == [20]
    assert "add_node" not in net.mutation_methods()
    net.add_layer(hidden_layer=0)
    assert "add_layer" not in net.mutation_methods()
    with pytest.raises(MutationError):
        net.add_layer(hidden_layer=0)
    assert net.mutation_methods("layer") == ["remove_layer"]
    assert net.mutation_methods("node") == ["remove_node"]
    assert net.mutation_methods("activation") == ["change_activation"]
    with pytest.raises(MutationError):
        net.remove_node(hidden_layer=0, numb_nodes=13)  # would leave 7 < 8


def test_sampled_mutations_stay_within_bounds() -> None:
    rng = np.random.default_rng(5)
    net = _mlp(hidden_size=[8], min_hidden_layers=1, max_hidden_layers=3, min_mlp_nodes=8, max_mlp_nodes=48)
    for _ in range(60):
        net.mutate(str(rng.choice(net.mutation_methods())), rng)
        assert 1 <= len(net.hidden_size) <= 3
        assert all(8 <= size <= 48 for size in net.hidden_size)


def test_mutation_kinds_and_errors() -> None:
    net = _mlp()
    assert net.mutation_kind("add_layer") == "layer"
    assert net.mutation_kind("remove_node") == "node"
    assert net.mutation_kind("change_activation") == "activation"
    with pytest.raises(MutationError, match="unknown"):
        net.mutate("add_channel")
    with pytest.raises(MutationError, match="bad parameters"):
        net.mutate("add_node", numb_new_channels=3)
    with pytest.raises(MutationError):
        net.mutate("add_node", hidden_layer=7)
    with pytest.raises(MutationError):
        net.mutate("change_activation", activation="Swish")


def test_change_activation() -> None:
    net = _mlp(activation="ReLU")
    change = net.mutate("change_activation", np.random.default_rng(0))
    assert change["activation"] != "ReLU"
    assert net.config["activation"] == change["activation"]
    assert all(block.activation_name == change["activation"] for block in net.blocks)
    net.change_activation(activation="PReLU", rng=None)
    assert net(_x()).shape == (64, 3)


def _mutated(seed: int = 0) -> EvolvableMLP:
    net = _mlp()
    rng = np.random.default_rng(seed)
    for name in ["add_layer", "add_node", "remove_node", "add_node", "change_activation", "add_layer"]:
        net.mutate(name, rng)
    return net


def test_config_round_trip_rebuilds_identical_network() -> None:
    net = _mutated()
    config = net.config
    assert config["type"] == "EvolvableMLP"
    json.dumps(config)
    rebuilt = from_config(json.loads(json.dumps(config)))
    assert isinstance(rebuilt, EvolvableMLP)
    rebuilt.load_state_dict(net.state_dict())
    assert rebuilt.config == config
    assert torch.equal(rebuilt(_x()), net(_x()))
    assert isinstance(EvolvableModule.from_config(config), EvolvableMLP)
    assert isinstance(EvolvableMLP.from_config(config, device="cpu"), EvolvableMLP)
    with pytest.raises(ValueError):
        EvolvableCNN.from_config(config)
    with pytest.raises(ValueError):
        from_config({**config, "type": "NoSuchNetwork"})


def test_clone_shares_no_tensors() -> None:
    net = _mutated()
    copy = net.clone()
    ours = {t.data_ptr() for t in [*net.parameters(), *net.buffers()]}
    theirs = {t.data_ptr() for t in [*copy.parameters(), *copy.buffers()]}
    assert not ours & theirs
    assert torch.equal(copy(_x()), net(_x()))
    with torch.no_grad():
        next(copy.parameters()).add_(1.0)
    assert not torch.equal(copy(_x()), net(_x()))


def test_replaying_resolved_kwargs_gives_the_same_architecture() -> None:
    net, twin = _mlp(), _mlp()
    rng = np.random.default_rng(11)
    for _ in range(25):
        name = str(rng.choice(net.mutation_methods()))
        change = net.mutate(name, rng)
        assert twin.mutate(name, **change) == change
        assert twin.config == net.config


def test_mutations_keep_dtype_and_train_mode() -> None:
    net = _mlp(dtype=torch.float64, noisy_output=True)
    net.eval()
    rng = np.random.default_rng(2)
    for _ in range(20):
        net.mutate(str(rng.choice(net.mutation_methods())), rng)
    assert all(t.dtype == torch.float64 for t in [*net.parameters(), *net.buffers()])
    assert not any(module.training for module in net.modules())
    assert net(_x().double()).dtype == torch.float64


def test_noisy_output_growth_is_exact_with_noise_on() -> None:
    net = _mlp(noisy_output=True)
    net.train()
    x = _x()
    before = net(x)
    net.add_node(hidden_layer=1, numb_new_nodes=16, rng=np.random.default_rng(0))
    net.add_layer(hidden_layer=1, rng=np.random.default_rng(0))
    assert _diff(net(x), before) < TOL
    net.reset_noise()
    assert _diff(net(x), before) > 1e-4


def test_from_spec_accepts_pydantic_and_dict_and_flattens_input_shape() -> None:
    spec = MlpConfig(hidden_size=[32, 32], activation="Tanh", layer_norm=False)
    a = EvolvableMLP.from_spec(spec, 12, 2, input_shape=(3, 4))
    b = EvolvableMLP.from_spec(spec.model_dump(), 12, 2, input_shape=(3, 4))
    assert a.config == b.config
    assert a(torch.randn(5, 3, 4)).shape == (5, 2)
    assert a(torch.randn(7, 5, 3, 4)).shape == (7, 5, 2)
    with pytest.raises(ValueError):
        EvolvableMLP(4, 2, hidden_size=[300])


def _is_orthogonal(weight: torch.Tensor, gain: float) -> bool:
    """Rows (or columns, whichever are fewer) orthonormal up to `gain`."""
    w = weight.detach().reshape(weight.shape[0], -1)
    gram = w @ w.T if w.shape[0] <= w.shape[1] else w.T @ w
    return torch.allclose(gram, gain**2 * torch.eye(gram.shape[0]), atol=1e-4)


def test_default_initialisation_is_unchanged_by_the_init_options() -> None:
    torch.manual_seed(0)
    reference = {
        "layers.0.main": torch.nn.Linear(6, 16), "layers.0.norm": torch.nn.LayerNorm(16),
        "layers.1.main": torch.nn.Linear(16, 24), "layers.1.norm": torch.nn.LayerNorm(24),
        "output_layer": torch.nn.Linear(24, 3),
    }
    expected = {f"{name}.{key}": value for name, module in reference.items()
                for key, value in module.state_dict().items()}
    net = _mlp()
    assert net.config["init_layers"] is False and net.config["output_vanish"] is False
    assert set(net.state_dict()) == set(expected)
    for key, value in net.state_dict().items():
        assert torch.equal(value, expected[key]), key


def test_init_layers_gives_orthogonal_weights_and_zero_biases() -> None:
    net = _mlp(init_layers=True, hidden_size=[16, 24, 8])
    linears = [block.main for block in net.blocks] + [net.output_layer]
    for layer in linears:
        assert _is_orthogonal(layer.weight, math.sqrt(2)), layer
        assert not layer.bias.any()
    assert net.config["init_layers"] is True
    assert EvolvableMLP.from_spec(MlpConfig(init_layers=True), 6, 3).init_layers
    rebuilt = from_config(net.config)  # the config round-trips, and a rebuilt network is orthogonal too
    assert rebuilt.config == net.config
    assert _is_orthogonal(rebuilt.output_layer.weight, math.sqrt(2))


def test_output_vanish_scales_the_initial_output_layer_by_a_tenth() -> None:
    plain, vanished = _mlp(), _mlp(output_vanish=True)
    assert torch.allclose(vanished.output_layer.weight, 0.1 * plain.output_layer.weight)
    assert torch.allclose(vanished.output_layer.bias, 0.1 * plain.output_layer.bias)
    for a, b in zip(plain.blocks, vanished.blocks, strict=True):  # hidden layers untouched
        assert torch.equal(a.main.weight, b.main.weight)
    both = _mlp(init_layers=True, output_vanish=True)
    assert _is_orthogonal(both.output_layer.weight, 0.1 * math.sqrt(2)) and not both.output_layer.bias.any()
    noisy_plain, noisy = _mlp(noisy_output=True), _mlp(noisy_output=True, output_vanish=True)
    assert torch.allclose(noisy.output_layer.weight_mu, 0.1 * noisy_plain.output_layer.weight_mu)
    assert torch.equal(noisy.output_layer.weight_sigma, noisy_plain.output_layer.weight_sigma)
    spec = EvolvableMLP.from_spec({"hidden_size": [16], "output_vanish": True}, 6, 3)
    assert spec.output_vanish and spec.config["output_vanish"] is True


def test_layers_added_after_an_orthogonal_init_keep_their_function_preserving_start() -> None:
    net = _mlp(init_layers=True, output_vanish=True)
    x = _x()
    before = net(x)
    net.add_layer(hidden_layer=0, rng=np.random.default_rng(0))
    net.add_node(hidden_layer=1, numb_new_nodes=16, rng=np.random.default_rng(0))
    assert _diff(net(x), before) < TOL
