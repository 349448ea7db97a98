"""EvolvableLSTM: hidden-state handling, function-preserving growth, bounds and round-trips."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from agile_core.networks import EvolvableLSTM, MutationError, from_config
from agile_core.specs.network import LstmConfig

TOL = 1e-5


def _lstm(**kwargs) -> EvolvableLSTM:
    torch.manual_seed(0)
    defaults = dict(num_inputs=5, num_outputs=7, hidden_state_size=16, num_layers=1)
    defaults.update(kwargs)
    return EvolvableLSTM(**defaults)


def _seq(batch: int = 4, steps: int = 9) -> torch.Tensor:
    return torch.randn(batch, steps, 5, generator=torch.Generator().manual_seed(1))


def _diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).detach().abs().max())


def test_shapes_and_stepwise_equals_sequence() -> None:
    net = _lstm(num_layers=2)
    x = _seq()
    features, (h, c) = net(x)
    assert features.shape == (4, 9, 7)
    assert h.shape == c.shape == (2, 4, 16)
    hidden = net.initial_hidden_state(4)
    assert all(float(t.abs().sum()) == 0 for t in hidden)
    steps = []
    for t in range(9):
        out, hidden = net(x[:, t], hidden)
        steps.append(out)
    assert _diff(torch.stack(steps, dim=1), features) < TOL
    assert _diff(hidden[0], h) < TOL


def test_add_node_preserves_function() -> None:
    for layers in (1, 2):
        net = _lstm(num_layers=layers)
        x = _seq()
        before, _ = net(x)
        assert net.add_node(numb_new_nodes=24, rng=np.random.default_rng(0)) == {"numb_new_nodes": 24}
        after, (h, _) = net(x)
        assert net.hidden_state_size == 40 and h.shape == (layers, 4, 40)
        assert _diff(after, before) < TOL


def test_add_layer_preserves_function_and_is_trainable() -> None:
    net = _lstm()
    x = _seq()
    before, _ = net(x)
    assert net.mutate("add_layer", np.random.default_rng(0)) == {}
    after, (h, _) = net(x)
    assert net.num_layers == 2 and h.shape[0] == 2
    assert _diff(after, before) < TOL
    after.pow(2).sum().backward()
    assert float(net.stack[1].gate.grad.abs()) > 0


def test_remove_node_keeps_overlapping_weights() -> None:
    net = _lstm(hidden_state_size=32)
    w_ih = net.stack[0].lstm.weight_ih_l0.detach().clone()
    w_hh = net.stack[0].lstm.weight_hh_l0.detach().clone()
    net.remove_node(numb_nodes=8, rng=np.random.default_rng(0))
    assert net.hidden_state_size == 24
    for gate in range(4):
        new_rows = slice(gate * 24, gate * 24 + 24)
        old_rows = slice(gate * 32, gate * 32 + 24)
        assert torch.equal(net.stack[0].lstm.weight_ih_l0[new_rows], w_ih[old_rows])
        assert torch.equal(net.stack[0].lstm.weight_hh_l0[new_rows], w_hh[old_rows, :24])
    assert net(_seq())[0].shape == (4, 9, 7)


def test_bounds_are_respected() -> None:
    net = _lstm(hidden_state_size=8, min_hidden_state_size=8, max_hidden_state_size=20, max_num_layers=2)
    assert set(net.mutation_methods()) == {"add_node", "add_layer"}
    with pytest.raises(MutationError):
        net.remove_layer()
    with pytest.raises(MutationError):
        net.add_node(numb_new_nodes=13)
    net.add_node(numb_new_nodes=12)
    net.add_layer()
    assert set(net.mutation_methods()) == {"remove_node", "remove_layer"}
    assert net.mutation_kind("add_node") == "node" and net.mutation_kind("add_layer") == "layer"


def test_config_round_trip_clone_and_replay() -> None:
    net, twin = _lstm(), _lstm()
    rng = np.random.default_rng(3)
    for _ in range(10):
        name = str(rng.choice(net.mutation_methods()))
        twin.mutate(name, **net.mutate(name, rng))
        assert twin.config == net.config
    rebuilt = from_config(json.loads(json.dumps(net.config)))
    rebuilt.load_state_dict(net.state_dict())
    assert torch.equal(rebuilt(_seq())[0], net(_seq())[0])
    copy = net.clone()
    ptrs = {t.data_ptr() for t in net.parameters()}
    assert not ptrs & {t.data_ptr() for t in copy.parameters()}
    assert torch.equal(copy(_seq())[0], net(_seq())[0])


def test_from_spec_and_dtype() -> None:
    spec = LstmConfig(hidden_state_size=16, num_layers=2)
    net = EvolvableLSTM.from_spec(spec, 6, 3, input_shape=(2, 3), dtype=torch.float64)
    out, _ = net(torch.randn(4, 5, 2, 3, dtype=torch.float64))
    assert out.shape == (4, 5, 3)
    net.add_node(rng=np.random.default_rng(0))
    net.add_layer(rng=np.random.default_rng(0))
    assert all(p.dtype == torch.float64 for p in net.parameters())
    assert net(torch.randn(4, 2, 3, dtype=torch.float64))[0].shape == (4, 3)
