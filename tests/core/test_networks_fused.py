"""FusedMLPChain: the same outputs and gradients as the stacked modules under autograd."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agile_core.networks.fused import ACTIVATIONS, FusedMLPChain
from agile_core.networks.mlp import EvolvableMLP
from agile_core.networks.stacked import FlatParameters, NotStackableError, stack_modules


def members(activation: str, layer_norm: bool, count: int = 3) -> list[EvolvableMLP]:
    """Same architecture with a residual layer whose gate is open, different weights."""
    nets = []
    for seed in range(count):
        torch.manual_seed(seed)
        net = EvolvableMLP(5, 3, hidden_size=[16, 12], activation=activation, layer_norm=layer_norm,
                           output_activation="Tanh")
        net.add_layer(0, rng=np.random.default_rng(0))
        with torch.no_grad():
            net.layers[1].gate.fill_(0.3 + 0.1 * seed)
        nets.append(net)
    return nets


def autograd_and_fused(nets: list[EvolvableMLP], x: torch.Tensor, train: bool = True) -> tuple:
    """``(reference, fused, chain, out, fused_out)``: the stacked `nets` differentiated by autograd
    on `x` and, on a second stack, by a fused chain with the same output gradient (gradients in
    one flat buffer, as under StackedAdam)."""
    reference, fused = stack_modules(nets), stack_modules(nets)
    FlatParameters(fused)
    reference.train(train)
    fused.train(train)
    out = reference(x)
    grad_out = torch.randn_like(out)
    (out * grad_out).sum().backward()
    chain = FusedMLPChain([fused])
    tape: list = []
    fused_out = chain.forward(x, tape)
    chain.backward(tape, grad_out)
    return reference, fused, chain, out, fused_out


@pytest.mark.parametrize("layer_norm", [True, False])
@pytest.mark.parametrize("activation", [name for name in ACTIVATIONS if name != "Identity"])
def test_fused_chain_matches_autograd(activation: str, layer_norm: bool) -> None:
    x = torch.randn(3, 10, 5)
    reference, fused, chain, out, fused_out = autograd_and_fused(members(activation, layer_norm), x)

    assert torch.allclose(fused_out, out, atol=1e-6)
    assert torch.allclose(chain.forward(x), fused_out)  # no tape: same values
    for (name, a), b in zip(reference.named_parameters(), fused.parameters(), strict=True):
        assert torch.allclose(a.grad, b.grad, atol=1e-5), name


def test_two_mlps_chain_and_gradients_accumulate() -> None:
    first, second = members("ReLU", True), []
    for seed in range(3):
        torch.manual_seed(10 + seed)
        second.append(EvolvableMLP(3, 2, hidden_size=[8]))
    ref_a, ref_b = stack_modules(first), stack_modules(second)
    fus_a, fus_b = stack_modules(first), stack_modules(second)
    x = torch.randn(3, 7, 5)
    grad_out = torch.randn(3, 7, 2)
    for _ in range(2):  # two backward passes accumulate, as autograd does
        (ref_b(ref_a(x)) * grad_out).sum().backward()
    chain = FusedMLPChain([fus_a, fus_b])
    for _ in range(2):
        tape: list = []
        chain.forward(x, tape)
        chain.backward(tape, grad_out)
    for a, b in zip([*ref_a.parameters(), *ref_b.parameters()], [*fus_a.parameters(), *fus_b.parameters()],
                    strict=True):
        assert torch.allclose(a.grad, b.grad, atol=1e-5)


def test_unknown_activation_is_not_fused() -> None:
    nets = [EvolvableMLP(4, 2, hidden_size=[8], activation="Softplus") for _ in range(2)]
    with pytest.raises(NotStackableError):
        FusedMLPChain([stack_modules(nets)])


def test_backward_needs_its_own_tape() -> None:
    chain = FusedMLPChain([stack_modules(members("ReLU", True, count=2))])
    with pytest.raises(ValueError):
        chain.backward([], torch.zeros(2, 4, 3))


def test_input_gradient_feeds_a_shared_encoder() -> None:
    """Two heads on one encoder (as a shared actor-critic): head input gradients add up."""
    torch.manual_seed(0)
    encoders = [EvolvableMLP(4, 6, hidden_size=[8]) for _ in range(2)]
    heads_a = [EvolvableMLP(6, 3, hidden_size=[8]) for _ in range(2)]
    heads_b = [EvolvableMLP(6, 1, hidden_size=[8]) for _ in range(2)]
    ref = [stack_modules(nets) for nets in (encoders, heads_a, heads_b)]
    fus = [stack_modules(nets) for nets in (encoders, heads_a, heads_b)]
    x = torch.randn(2, 5, 4)
    grad_a, grad_b = torch.randn(2, 5, 3), torch.randn(2, 5, 1)
    latent = ref[0](x)
    ((ref[1](latent) * grad_a).sum() + (ref[2](latent) * grad_b).sum()).backward()

    encoder, head_a, head_b = (FusedMLPChain([net]) for net in fus)
    tapes: list[list] = [[], [], []]
    fused_latent = encoder.forward(x, tapes[0])
    head_a.forward(fused_latent, tapes[1])
    head_b.forward(fused_latent, tapes[2])
    latent_grad = head_a.backward(tapes[1], grad_a, input_grad=True) + head_b.backward(tapes[2], grad_b,
                                                                                       input_grad=True)
    assert encoder.backward(tapes[0], latent_grad) is None
    for a, b in zip([p for net in ref for p in net.parameters()], [p for net in fus for p in net.parameters()],
                    strict=True):
        assert torch.allclose(a.grad, b.grad, atol=1e-5)


@pytest.mark.parametrize("activation", ["ReLU", "Sigmoid"])
def test_members_of_different_widths_stack_padded(activation: str) -> None:
    """Zero-padded members compute, and get the gradients, of themselves alone (padding stays 0)."""
    from agile_core.networks.stacked import (
        bind_members,
        corner,
        is_bound,
        member_layout,
        padding_mask,
    )

    nets = []
    for seed, (grow, shrink) in enumerate([(0, 0), (16, 0), (0, 4)]):
        torch.manual_seed(seed)
        net = EvolvableMLP(5, 3, hidden_size=[16, 12], activation=activation)
        if grow:
            net.add_node(0, grow, rng=np.random.default_rng(seed))
        if shrink:
            net.remove_node(1, shrink, rng=np.random.default_rng(seed))
        nets.append(net)
    assert [net.hidden_size for net in nets] == [[16, 12], [32, 12], [16, 8]]
    stacked = stack_modules(nets)
    flat = FlatParameters(stacked)
    mask = padding_mask(stacked, nets, flat)
    assert mask is not None and 0 < float(mask.mean()) < 1
    x = torch.randn(3, 7, 5)
    grad_out = torch.randn(3, 7, 3)
    chain = FusedMLPChain([stacked])
    tape: list = []
    out = chain.forward(x, tape)
    chain.backward(tape, grad_out)
    flat.grad.mul_(mask)
    for index, net in enumerate(nets):
        expected = net(x[index])
        assert torch.allclose(out[index], expected, atol=1e-6)
        assert torch.allclose(stacked(x)[index], expected, atol=1e-6)  # the module path pads the same way
        (expected * grad_out[index]).sum().backward()
    for name, param in stacked.named_parameters():
        grads = member_layout(stacked, name)(param.grad)
        for index, net in enumerate(nets):
            own = net.get_parameter(name)
            region = corner(own.shape)
            assert torch.allclose(grads[index][region], own.grad, atol=1e-5), name
            padded = grads[index].clone()
            padded[region] = 0
            assert not padded.any(), name
    before = [{key: value.clone() for key, value in net.state_dict().items()} for net in nets]
    bind_members(stacked, nets)  # each member's weights become views of exactly its own corner
    for index, (net, state) in enumerate(zip(nets, before, strict=True)):
        for key, value in net.state_dict().items():
            assert torch.equal(value, state[key]), key
            assert is_bound(member_layout(stacked, key)(stacked.get_parameter(key)), net.get_parameter(key), index)


@pytest.mark.parametrize(("activation", "layer_norm"), [("ReLU", True), ("Tanh", False)])
def test_residual_shortcuts_of_every_shape_match_autograd(activation: str, layer_norm: bool) -> None:
    """Shortcuts that copy units (square, wider input, phantom layers) take the elementwise path,
    one that does not (a permuted copy) the matmul; all give autograd's outputs and gradients."""
    nets = []
    for seed in range(5):
        torch.manual_seed(seed)
        net = EvolvableMLP(5, 3, hidden_size=[16, 12], activation=activation, layer_norm=layer_norm)
        if seed != 3:  # member 3 has no inserted layer: a phantom in the stack
            net.add_layer(0, rng=np.random.default_rng(seed))
        if seed == 1:  # the inserted layer now reads more units than it writes
            net.add_node(0, 8, rng=np.random.default_rng(seed))
        if seed == 0:  # narrower than the others: its copy ends before the stack's last units
            net.remove_node(0, 4, rng=np.random.default_rng(seed))
        if seed == 2:  # the inserted layer writes more units than it reads (and than member 1 writes)
            net.add_node(1, 8, rng=np.random.default_rng(seed))
        with torch.no_grad():  # no unit, gate or layer left at its function-preserving start
            for param in net.parameters():
                param.normal_(0.0, 0.5)
        nets.append(net)
    with torch.no_grad():  # member 4's shortcut now sends unit j to unit 15 - j
        nets[4].layers[1].shortcut.copy_(nets[4].layers[1].shortcut.flip(0))
    copying, shifted = nets[:4], nets
    for group, expect_mask in ((copying, True), (shifted, False)):
        reference, fused = stack_modules(group), stack_modules(group)
        FlatParameters(fused)
        chain = FusedMLPChain([fused])
        residual = [layer for layer in chain.layers if layer.shortcut is not None]
        assert residual and all((layer.shortcut_mask is not None) == expect_mask for layer in residual)
        x = torch.randn(len(group), 9, 5)
        out = reference(x)
        grad_out = torch.randn_like(out)
        (out * grad_out).sum().backward()
        tape: list = []
        assert torch.allclose(chain.forward(x, tape), out, atol=1e-6)
        chain.backward(tape, grad_out)
        for (name, a), b in zip(reference.named_parameters(), fused.parameters(), strict=True):
            assert torch.allclose(a.grad, b.grad, atol=1e-5), name
        x.requires_grad_(True)
        (chain(x) * grad_out).sum().backward()
        expected = torch.autograd.grad((reference(x) * grad_out).sum(), x)[0]
        assert torch.allclose(x.grad, expected, atol=1e-5)


def test_a_member_range_computes_those_members_and_fills_their_gradient_rows() -> None:
    nets = members("ReLU", True, count=4)
    fused = stack_modules(nets)
    flat = FlatParameters(fused)
    chain = FusedMLPChain([fused])
    x = torch.randn(4, 6, 5)
    full = chain.forward(x)
    part = chain.members(1, 3)
    assert part is chain.members(1, 3)  # cached
    tape: list = []
    out = part.forward(x[1:3], tape)
    assert torch.allclose(out, full[1:3], atol=1e-6)
    grad_out = torch.randn_like(out)
    part.backward(tape, grad_out)

    reference = stack_modules(nets)
    (reference(x)[1:3] * grad_out).sum().backward()
    assert flat.grad is not None
    for (name, a), b in zip(reference.named_parameters(), fused.parameters(), strict=True):
        assert torch.allclose(a.grad[1:3], b.grad[1:3], atol=1e-5), name
        assert not b.grad[0].any() and not b.grad[3].any(), name
    with torch.no_grad():  # the range follows in-place updates of the full parameters
        for param in fused.parameters():
            param.mul_(0.5)
    assert torch.allclose(part.forward(x[1:3]), chain.forward(x)[1:3], atol=1e-6)


def test_members_with_their_own_activations_match_each_member_alone() -> None:
    nets = members("ReLU", True, count=4)
    for net, activation in zip(nets[1:], ["Tanh", "Tanh", "GELU"], strict=True):
        net.change_activation(activation, rng=np.random.default_rng(0))
    fused = stack_modules(nets)
    FlatParameters(fused)
    chain = FusedMLPChain([fused])
    x = torch.randn(4, 10, 5)
    tape: list = []
    out = chain.forward(x, tape)
    grad_out = torch.randn_like(out)
    chain.backward(tape, grad_out)
    for index, net in enumerate(nets):
        alone = net(x[index])
        (alone * grad_out[index]).sum().backward()
        assert torch.allclose(out[index], alone, atol=1e-6)
        for (name, param), stacked in zip(net.named_parameters(), fused.parameters(), strict=True):
            assert torch.allclose(param.grad, stacked.grad[index][tuple(slice(0, n) for n in param.shape)],
                                  atol=1e-5), name
    part = chain.members(1, 4)  # a member range keeps its members' own activations
    assert torch.allclose(part.forward(x[1:]), out[1:], atol=1e-6)


@pytest.mark.parametrize("used", [(True, True), (True, False)])
def test_fused_heads_equal_the_encoder_then_each_head(used: tuple[bool, bool]) -> None:
    """One encoder, two heads (as a dueling or actor-critic network has): the same outputs and
    gradients as autograd over the stacked modules; an unused head adds nothing."""
    from agile_core.networks.fused import FusedHeads

    encoders = members("ReLU", True)
    heads = [[EvolvableMLP(3, outputs, hidden_size=[8]) for _ in range(3)] for outputs in (4, 1)]
    reference = [stack_modules(encoders), *(stack_modules(nets) for nets in heads)]
    fused = [stack_modules(encoders), *(stack_modules(nets) for nets in heads)]
    for module in fused:
        FlatParameters(module)
    tree = FusedHeads(FusedMLPChain([fused[0]]), [FusedMLPChain([fused[1]]), FusedMLPChain([fused[2]])])
    x = torch.randn(3, 10, 5, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    grads = [torch.randn(3, 10, outputs) for outputs in (4, 1)]

    latent = reference[0](x_ref)
    expected = [reference[1](latent), reference[2](latent)]
    sum((out * grad).sum() for out, grad, on in zip(expected, grads, used, strict=True) if on).backward()
    outs = tree(x)
    sum((out * grad).sum() for out, grad, on in zip(outs, grads, used, strict=True) if on).backward()

    for out, want in zip(outs, expected, strict=True):
        assert torch.allclose(out, want, atol=1e-6)
    assert torch.allclose(x.grad, x_ref.grad, atol=1e-5)
    for ref_module, fused_module in zip(reference, fused, strict=True):
        for (name, a), b in zip(ref_module.named_parameters(), fused_module.parameters(), strict=True):
            if a.grad is None:
                assert b.grad is None or not b.grad.any(), name
            else:
                assert torch.allclose(a.grad, b.grad, atol=1e-5), name
    part = tree.members(1, 3)  # a member range of the tree
    for whole, sliced in zip(tree(x.detach()), part(x.detach()[1:]), strict=True):
        assert torch.allclose(whole[1:], sliced, atol=1e-6)


def noisy_members(count: int = 3) -> list[EvolvableMLP]:
    """Rainbow-style heads (noisy output layer) of different widths, each with its own noise."""
    nets = []
    for seed in range(count):
        torch.manual_seed(seed)
        net = EvolvableMLP(5, 4, hidden_size=[12 + 2 * seed], layer_norm=True, noisy_output=True, noise_std=0.5)
        net.reset_noise()
        nets.append(net)
    return nets


@pytest.mark.parametrize("noise", [True, False])
def test_a_noisy_output_layer_fuses_with_its_noise_and_sigma_gradients(noise: bool) -> None:
    nets = noisy_members()
    x = torch.randn(3, 10, 5)
    reference, fused, chain, out, fused_out = autograd_and_fused(nets, x, train=noise)
    assert torch.allclose(fused_out, out, atol=1e-6)
    for (name, a), b in zip(reference.named_parameters(), fused.parameters(), strict=True):
        if "sigma" in name and not noise:
            assert a.grad is None and (b.grad is None or not b.grad.any()), name
        else:
            assert torch.allclose(a.grad, b.grad, atol=1e-5), name
    if noise:  # a member's redraw lands in the stacked buffers the chain reads
        nets[1].reset_noise()
        with torch.no_grad():
            assert torch.allclose(chain.forward(x)[1], nets[1](x[1]), atol=1e-6)
            part = chain.members(1, 3).forward(x[1:3])
            assert torch.allclose(part, chain.forward(x)[1:3], atol=1e-6)


def test_public_fallbacks_of_the_private_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without torch's private fused Adam and group norm kernels the same numbers come out."""
    import agile_core.networks.fused as fused_module
    import agile_core.networks.stacked_adam as adam_module
    from agile_core.networks.stacked_adam import StackedAdam

    x = torch.randn(3, 9, 6)
    for eps in (1e-5, 1e-3):
        expected = fused_module._normalise_rows(x, eps)
        monkeypatch.setattr(fused_module, "_GROUP_NORM", None)
        for got, want in zip(fused_module._normalise_rows(x, eps), expected, strict=True):
            assert torch.allclose(got.reshape(-1), want.reshape(-1), atol=1e-5)
        monkeypatch.undo()

    def trained(private: bool) -> list[torch.Tensor]:
        if not private:
            monkeypatch.setattr(adam_module, "_FUSED_ADAM", None)
        torch.manual_seed(0)
        nets = [EvolvableMLP(4, 2, hidden_size=[8]) for _ in range(2)]
        optimizers = [torch.optim.Adam(net.parameters(), lr=lr) for net, lr in zip(nets, (1e-2, 3e-3), strict=True)]
        stacked = stack_modules(nets)
        adam = StackedAdam(stacked, nets, optimizers)
        for _ in range(3):
            adam.zero_grad()
            stacked(torch.randn(2, 5, 4)).square().sum().backward()
            adam.step([True, False] if _ == 1 else None)
        monkeypatch.undo()
        return [param.detach().clone() for net in nets for param in net.parameters()]

    for a, b in zip(trained(True), trained(False), strict=True):
        assert torch.allclose(a, b, atol=1e-6)


def test_importing_the_packages_leaves_warning_filters_alone() -> None:
    """Our modules add no global warning filter (the third-party ones they import may)."""
    import subprocess
    import sys

    code = ("import warnings, torch, torch.optim, numpy, gymnasium; before = list(warnings.filters); "
            "import agile_core.algorithms.group, agile_core.networks.stacked, agile_core.networks.fused, "
            "agile_offpolicy.dqn, agile_onpolicy.ppo; "
            "assert list(warnings.filters) == before, [f for f in warnings.filters if f not in before]")
    subprocess.run([sys.executable, "-W", "default", "-c", code], check=True)
