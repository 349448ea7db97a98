"""The parameter-noise mutation: a few weights, noise relative to each weight, norms and biases kept."""

import numpy as np
import pytest
import torch
from torch import nn

from agile_core.algorithms.base import MUTATED_FRACTION, perturb_weights


def network() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 64), nn.LayerNorm(64), nn.ReLU(), nn.Linear(64, 64), nn.LayerNorm(64),
                         nn.ReLU(), nn.Linear(64, 2))


@pytest.mark.parametrize("seed", range(5))
def test_only_a_few_weights_move_by_a_share_of_themselves(seed):
    net = network()
    with torch.no_grad():
        net[0].weight[0, 0] = 0.0
    before = {name: p.detach().clone() for name, p in net.named_parameters()}
    changed = perturb_weights(net, np.random.default_rng(seed), 0.1)
    assert changed > 0
    moved = 0
    for name, param in net.named_parameters():
        diff = param.detach() - before[name]
        if param.dim() < 2:  # biases and LayerNorm gains and shifts are never perturbed
            assert torch.equal(diff, torch.zeros_like(diff)), name
            continue
        entries = int((diff != 0).sum())
        assert entries <= np.ceil(MUTATED_FRACTION * param.numel())
        # noise is relative to each weight: |dw| <= 6 sd |w| almost surely, zero stays zero
        assert torch.all(diff.abs() <= 0.6 * before[name].abs() + 1e-12), name
        moved += entries
    assert moved == changed
    assert float(net[0].weight[0, 0].detach()) == 0.0


def test_a_perturbed_network_keeps_its_function():
    net = network()
    x = torch.randn(256, 4)
    with torch.no_grad():
        before = net(x)
        perturb_weights(net, np.random.default_rng(0), 0.1)
        after = net(x)
    assert (after - before).abs().mean() < 0.1 * before.abs().mean()


def test_same_seed_same_mutation_and_zero_sd_changes_nothing():
    first, second = network(), network()
    perturb_weights(first, np.random.default_rng(3), 0.1)
    perturb_weights(second, np.random.default_rng(3), 0.1)
    for a, b in zip(first.parameters(), second.parameters(), strict=True):
        assert torch.equal(a, b)
    third = network()
    assert perturb_weights(third, np.random.default_rng(3), 0.0) == 0
    for a, b in zip(third.parameters(), network().parameters(), strict=True):
        assert torch.equal(a, b)
