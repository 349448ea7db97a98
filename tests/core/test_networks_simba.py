"""EvolvableSimBa: construction, dispatch, function-preserving mutations, bounds, round-trips,
cloning, and stacked (population) equality forward and backward, also across widths."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from gymnasium import spaces

from agile_core.networks import (
    ContinuousQNetwork,
    DeterministicActor,
    EvolvableCNN,
    EvolvableMLP,
    EvolvableModule,
    EvolvableMultiInput,
    EvolvableSimBa,
    MutationError,
    SimbaBlock,
    build_encoder,
    from_config,
    infer_arch,
    registered_types,
    resolve_encoder_config,
)
from agile_core.networks.fused import fuse_stacked_mlps
from agile_core.networks.stacked import (
    FlatParameters,
    NotStackableError,
    bind_members,
    corner,
    member_layout,
    padding_mask,
    stack_modules,
    structure_key,
)
from agile_core.specs.network import NetworkSpec, SimbaConfig

TOL = 1e-5
VECTOR = spaces.Box(-1, 1, (5,))
IMAGE = spaces.Box(0, 255, (3, 32, 32), dtype=np.uint8)


def _simba(seed: int = 0, **kwargs) -> EvolvableSimBa:
    torch.manual_seed(seed)
    defaults = dict(num_inputs=6, num_outputs=3, hidden_size=16, num_blocks=2, scale_factor=2)
    defaults.update(kwargs)
    return EvolvableSimBa(**defaults)


def _scrambled(net: EvolvableSimBa, seed: int = 0) -> EvolvableSimBa:
    """Move every parameter away from its initial value (norm gains, biases and zero layers too),
    so preservation is tested on a network in a generic state."""
    generator = torch.Generator().manual_seed(100 + seed)
    with torch.no_grad():
        for param in net.parameters():
            param.add_(0.3 * torch.randn(param.shape, generator=generator, dtype=param.dtype))
    return net


def _x(batch: int = 64, dim: int = 6) -> torch.Tensor:
    return torch.randn(batch, dim, generator=torch.Generator().manual_seed(1)) * 3


def _diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).detach().abs().max())


# ---------------------------------------------------------------------- construction and dispatch
def test_architecture_and_forward_shapes() -> None:
    net = _simba(output_activation="Tanh")
    assert net.hidden_size == 16 and net.num_blocks == 2 and net.inner_size == 32
    assert all(isinstance(block, SimbaBlock) for block in net.blocks)
    assert [(b.width, b.inner) for b in net.blocks] == [(16, 32), (16, 32)]
    x = _x()
    out = net(x)
    assert out.shape == (64, 3) and float(out.detach().abs().max()) <= 1.0
    # the forward pass is exactly the SimBa recipe
    h = net.input_layer(x)
    for block in net.blocks:
        h = h + block.project(torch.relu(block.expand(block.norm(h))))
    assert torch.allclose(out, torch.tanh(net.output_layer(net.final_norm(h))), atol=1e-6)
    assert net(torch.randn(4, 7, 6)).shape == (4, 7, 3)  # leading batch dimensions


def test_input_shape_is_flattened() -> None:
    net = EvolvableSimBa(12, 2, hidden_size=8, input_shape=(3, 4))
    assert net(torch.randn(5, 3, 4)).shape == (5, 2)
    assert net(torch.randn(7, 5, 3, 4)).shape == (7, 5, 2)
    with pytest.raises(ValueError):
        EvolvableSimBa(10, 2, input_shape=(3, 4))


def test_constructor_checks_bounds() -> None:
    with pytest.raises(ValueError):
        EvolvableSimBa(4, 2, hidden_size=300)
    with pytest.raises(ValueError):
        EvolvableSimBa(4, 2, num_blocks=5, max_blocks=4)
    with pytest.raises(ValueError):
        EvolvableSimBa(4, 2, activation="Swish")


def test_from_spec_accepts_pydantic_and_dict() -> None:
    spec = SimbaConfig(hidden_size=32, num_blocks=3, activation="GELU", scale_factor=2)
    a = EvolvableSimBa.from_spec(spec, 12, 4, input_shape=(3, 4))
    b = EvolvableSimBa.from_spec(spec.model_dump(), 12, 4, input_shape=(3, 4))
    assert a.config == b.config
    assert (a.hidden_size, a.num_blocks, a.inner_size, a.activation) == (32, 3, 64, "GELU")
    assert a(torch.randn(5, 3, 4)).shape == (5, 4)


def test_build_encoder_from_simba_config_and_from_simba_flag() -> None:
    from_config_spec = build_encoder(VECTOR, {"latent_dim": 16, "encoder_config": {"arch": "simba", "hidden_size": 32,
                                                                                   "num_blocks": 3}})
    assert isinstance(from_config_spec, EvolvableSimBa)
    assert (from_config_spec.num_inputs, from_config_spec.num_outputs) == (5, 16)
    assert (from_config_spec.hidden_size, from_config_spec.num_blocks) == (32, 3)

    flagged = build_encoder(VECTOR, NetworkSpec(simba=True, latent_dim=16))
    assert isinstance(flagged, EvolvableSimBa)
    assert flagged.config == EvolvableSimBa.from_spec(SimbaConfig(), 5, 16).config  # SimBa defaults

    keyed = build_encoder(VECTOR, {"simba": True, "encoder_config": {"hidden_size": 24, "num_blocks": 1}})
    assert isinstance(keyed, EvolvableSimBa) and (keyed.hidden_size, keyed.num_blocks) == (24, 1)

    for space, inputs in ((spaces.Box(-1, 1, (3, 4)), 12), (spaces.Discrete(6), 6), (spaces.MultiBinary(7), 7)):
        encoder = build_encoder(space, {"simba": True, "latent_dim": 8})
        assert isinstance(encoder, EvolvableSimBa) and encoder.num_inputs == inputs
    assert infer_arch(VECTOR, simba=True) == "simba"
    assert isinstance(resolve_encoder_config(VECTOR, {"simba": True}), SimbaConfig)


def test_simba_flag_keeps_image_and_composite_encoders() -> None:
    assert isinstance(build_encoder(IMAGE, {"simba": True}), EvolvableCNN)
    composite = spaces.Dict({"img": IMAGE, "vec": VECTOR})
    assert isinstance(build_encoder(composite, {"simba": True}), EvolvableMultiInput)
    assert isinstance(build_encoder(VECTOR, {"simba": False}), EvolvableMLP)


def test_simba_on_the_wrong_space_or_recurrent_is_refused() -> None:
    with pytest.raises(ValueError, match="simba"):
        build_encoder(IMAGE, {"encoder_config": {"arch": "simba"}})
    with pytest.raises(ValueError, match="SimBa"):
        build_encoder(VECTOR, {"simba": True}, recurrent=True)
    with pytest.raises(ValueError, match="SimBa"):
        build_encoder(VECTOR, {"encoder_config": {"arch": "simba"}}, recurrent=True)


def test_registered_for_from_config() -> None:
    assert registered_types()["EvolvableSimBa"] is EvolvableSimBa


# ---------------------------------------------------------------------- mutations
@pytest.mark.parametrize("activation", ["ReLU", "Tanh", "GELU", "Sigmoid", "ELU"])
def test_add_node_is_exactly_function_preserving(activation: str) -> None:
    net = _scrambled(_simba(activation=activation, output_activation="Tanh"))
    x = _x()
    before = net(x)
    change = net.mutate("add_node", np.random.default_rng(0), numb_new_nodes=24)
    assert change == {"numb_new_nodes": 24}
    assert net.hidden_size == 40 and net.inner_size == 80
    assert all((block.width, block.inner) == (40, 80) for block in net.blocks)
    assert net.norm_eps == pytest.approx(1e-5 * 16 / 40)
    assert _diff(net(x), before) < TOL
    net.add_node(8, rng=np.random.default_rng(1))  # twice in a row: still exact
    assert _diff(net(x), before) < TOL


@pytest.mark.parametrize("position", [0, 1, 2])
def test_add_block_is_an_exact_identity_at_every_position(position: int) -> None:
    net = _scrambled(_simba())
    x = _x()
    before = net(x)
    assert net.mutate("add_block", position=position) == {"position": position}
    assert net.num_blocks == 3
    new = net.blocks[position]
    assert not new.project.weight.any() and not new.project.bias.any()
    assert torch.equal(net(x), before)


def test_new_block_and_new_nodes_receive_gradients() -> None:
    net = _scrambled(_simba())
    net.add_block(1, rng=np.random.default_rng(0))
    net.add_node(8, rng=np.random.default_rng(0))
    net(_x()).pow(2).sum().backward()
    assert float(net.blocks[1].project.weight.grad.abs().sum()) > 0
    assert float(net.input_layer.weight.grad[16:].abs().sum()) > 0  # new stream units
    assert float(net.blocks[0].project.weight.grad[:, 32:].abs().sum()) > 0  # new inner units' outgoing weights


def test_growth_stays_exact_through_long_random_sequences() -> None:
    rng = np.random.default_rng(3)
    net = _scrambled(_simba(hidden_size=8, num_blocks=1, max_mlp_nodes=96))
    x = _x()
    grew = 0
    for _ in range(30):
        names = net.mutation_methods()
        name = str(rng.choice(names))
        before = net(x)
        net.mutate(name, rng)
        if name.startswith("add"):
            grew += 1
            assert _diff(net(x), before) < TOL, name
        with torch.no_grad():  # training moves the new units and blocks away from their start
            for param in net.parameters():
                param.add_(0.05 * torch.randn_like(param))
    assert grew > 5


def test_remove_node_keeps_leading_units() -> None:
    net = _simba()
    input_w = net.input_layer.weight.detach().clone()
    expand = net.blocks[0].expand.weight.detach().clone()
    project = net.blocks[1].project.weight.detach().clone()
    gains = net.final_norm.weight.detach().clone()
    out_w = net.output_layer.weight.detach().clone()
    assert net.remove_node(numb_nodes=6, rng=np.random.default_rng(0)) == {"numb_nodes": 6}
    assert net.hidden_size == 10 and net.inner_size == 20
    assert torch.equal(net.input_layer.weight, input_w[:10])
    assert torch.equal(net.blocks[0].expand.weight, expand[:20, :10])
    assert torch.equal(net.blocks[1].project.weight, project[:10, :20])
    assert torch.equal(net.final_norm.weight, gains[:10])
    assert torch.equal(net.output_layer.weight, out_w[:, :10])
    assert net(_x()).shape == (64, 3)


def test_remove_block_drops_that_block() -> None:
    net = _simba(num_blocks=3)
    kept = [net.blocks[0], net.blocks[2]]
    assert net.remove_block(1, rng=np.random.default_rng(0)) == {"position": 1}
    assert list(net.blocks) == kept
    net.blocks[0].project.weight.data.zero_()
    net.blocks[0].project.bias.data.zero_()
    before = net(_x())
    net.remove_block(0, rng=np.random.default_rng(0))  # removing an identity block changes nothing
    assert _diff(net(_x()), before) < TOL


def test_bounds_are_respected() -> None:
    net = _simba(hidden_size=8, num_blocks=1, min_blocks=1, max_blocks=2, min_mlp_nodes=8, max_mlp_nodes=20)
    assert "remove_block" not in net.mutation_methods()
    assert "remove_node" not in net.mutation_methods()
    with pytest.raises(MutationError):
        net.mutate("remove_block")
    with pytest.raises(MutationError):
        net.remove_node(rng=np.random.default_rng(0))
    with pytest.raises(MutationError):
        net.add_node(numb_new_nodes=13)  # 8 + 13 > 20
    with pytest.raises(MutationError):
        net.add_block(position=2)  # positions are 0 .. num_blocks
    assert net.add_node(rng=np.random.default_rng(0))["numb_new_nodes"] <= 12
    if net.hidden_size < 20:
        net.add_node(numb_new_nodes=20 - net.hidden_size)
    assert net.hidden_size == 20 and "add_node" not in net.mutation_methods()
    net.add_block()
    assert "add_block" not in net.mutation_methods()
    with pytest.raises(MutationError):
        net.add_block()
    assert net.mutation_methods("layer") == ["remove_block"]
    assert net.mutation_methods("node") == ["remove_node"]
    assert net.mutation_methods("activation") == ["change_activation"]
    with pytest.raises(MutationError):
        net.remove_node(numb_nodes=13)  # would leave 7 < 8


def test_sampled_mutations_stay_within_bounds() -> None:
    rng = np.random.default_rng(5)
    net = _simba(hidden_size=8, num_blocks=1, max_blocks=3, max_mlp_nodes=48)
    for _ in range(60):
        net.mutate(str(rng.choice(net.mutation_methods())), rng)
        assert 1 <= net.num_blocks <= 3
        assert 8 <= net.hidden_size <= 48
        assert net.inner_size == 2 * net.hidden_size
    assert net(_x()).shape == (64, 3)


def test_mutation_kinds_and_errors() -> None:
    net = _simba()
    assert net.mutation_kind("add_block") == "layer"
    assert net.mutation_kind("remove_node") == "node"
    assert net.mutation_kind("change_activation") == "activation"
    with pytest.raises(MutationError, match="unknown"):
        net.mutate("add_layer")
    with pytest.raises(MutationError, match="bad parameters"):
        net.mutate("add_node", hidden_layer=0)
    with pytest.raises(MutationError):
        net.mutate("change_activation", activation="Swish")


def test_change_activation() -> None:
    net = _simba(activation="ReLU")
    change = net.mutate("change_activation", np.random.default_rng(0))
    assert change["activation"] != "ReLU"
    assert net.config["activation"] == change["activation"]
    assert all(block.activation_name == change["activation"] for block in net.blocks)
    net.add_block(0, rng=np.random.default_rng(0))
    assert net.blocks[0].activation_name == change["activation"]  # new blocks follow
    assert net(_x()).shape == (64, 3)


def test_mutations_leave_the_global_rng_alone_and_replay_reproducibly() -> None:
    torch.manual_seed(7)
    state = torch.random.get_rng_state()
    net, twin = _simba(), _simba()
    torch.random.set_rng_state(state)
    rng = np.random.default_rng(11)
    for _ in range(20):
        name = str(rng.choice(net.mutation_methods()))
        seed = int(rng.integers(2**31))
        change = net.mutate(name, np.random.default_rng(seed))
        assert twin.mutate(name, np.random.default_rng(seed), **change) == change
        assert twin.config == net.config
    assert torch.equal(torch.random.get_rng_state(), state)
    for a, b in zip(net.state_dict().values(), twin.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_mutations_keep_dtype_and_train_mode() -> None:
    net = _simba(dtype=torch.float64)
    net.eval()
    rng = np.random.default_rng(2)
    for _ in range(20):
        net.mutate(str(rng.choice(net.mutation_methods())), rng)
    assert all(t.dtype == torch.float64 for t in [*net.parameters(), *net.buffers()])
    assert not any(module.training for module in net.modules())
    assert net(_x().double()).dtype == torch.float64


# ---------------------------------------------------------------------- config, clone, resizing
def _mutated(seed: int = 0) -> EvolvableSimBa:
    net = _simba()
    rng = np.random.default_rng(seed)
    for name in ["add_block", "add_node", "remove_node", "add_node", "change_activation", "remove_block"]:
        net.mutate(name, rng)
    return net


def test_config_round_trip_rebuilds_identical_network() -> None:
    net = _mutated()
    config = net.config
    assert config["type"] == "EvolvableSimBa"
    rebuilt = from_config(json.loads(json.dumps(config)))
    assert isinstance(rebuilt, EvolvableSimBa)
    rebuilt.load_state_dict(net.state_dict())
    assert rebuilt.config == config
    assert rebuilt.norm_eps == net.norm_eps != 1e-5  # growth rescaled eps, and the config keeps it
    assert torch.equal(rebuilt(_x()), net(_x()))
    assert isinstance(EvolvableModule.from_config(config), EvolvableSimBa)
    with pytest.raises(ValueError):
        EvolvableMLP.from_config(config)


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


def test_latent_resizing_and_input_remapping() -> None:
    net = _simba()
    x = _x()
    before = net(x)
    net.set_num_outputs(5, torch.Generator().manual_seed(0))
    assert net.num_outputs == 5 and net.config["num_outputs"] == 5
    assert torch.allclose(net(x)[:, :3], before, atol=1e-6)  # the leading outputs survive
    net.set_num_outputs(2)
    assert torch.allclose(net(x), before[:, :2], atol=1e-6)
    net.remap_inputs([0, 1, 2, 3, 4, 5, None, None])
    wide = torch.cat([x, torch.randn(64, 2)], dim=1)
    assert net.num_inputs == 8 and torch.allclose(net(wide), before[:, :2], atol=1e-6)  # new inputs: zero weights


def test_rl_networks_with_a_simba_encoder_mutate_end_to_end() -> None:
    box = spaces.Box(-1, 1, (2,))
    spec = {"latent_dim": 16, "simba": True, "encoder_config": {"hidden_size": 16, "num_blocks": 1},
            "head_config": {"hidden_size": [16]}}
    torch.manual_seed(0)
    actor = DeterministicActor(VECTOR, box, spec)
    critic = ContinuousQNetwork(VECTOR, box, spec)
    assert isinstance(actor.encoder, EvolvableSimBa) and isinstance(critic.encoder, EvolvableSimBa)
    obs, action = torch.randn(9, 5), torch.rand(9, 2) * 2 - 1
    before_actor, before_critic = actor(obs), critic(obs, action)
    for name in ("encoder.add_node", "encoder.add_block", "add_latent_node"):
        change = actor.mutate(name, np.random.default_rng(0))
        critic.mutate(name, np.random.default_rng(0), **change)
    assert _diff(actor(obs), before_actor) < TOL
    assert _diff(critic(obs, action), before_critic) < TOL
    rebuilt = from_config(json.loads(json.dumps(actor.config)))
    rebuilt.load_state_dict(actor.state_dict())
    assert torch.equal(rebuilt(obs), actor(obs))


# ---------------------------------------------------------------------- stacking
def _population(widths: list[int], activation: str = "ReLU") -> list[EvolvableSimBa]:
    """Members of the same block count: grown (exactly) or shrunk to `widths`, weights scrambled."""
    nets = []
    for seed, width in enumerate(widths):
        net = _simba(seed, activation=activation)
        if width > net.hidden_size:
            net.add_node(width - net.hidden_size, rng=np.random.default_rng(seed))
        elif width < net.hidden_size:
            net.remove_node(net.hidden_size - width, rng=np.random.default_rng(seed))
        if seed == 1:
            net.add_block(1, rng=np.random.default_rng(seed))
            net.remove_block(0, rng=np.random.default_rng(seed))
        nets.append(_scrambled(net, seed))
    return nets


def test_members_of_one_structure_share_a_key_and_others_do_not() -> None:
    a, b = _simba(0), _simba(1, hidden_size=24)
    assert structure_key(a) == structure_key(b)
    assert structure_key(a) != structure_key(_simba(2, num_blocks=3))
    assert structure_key(a) != structure_key(_simba(3, activation="Tanh"))
    # a SimBa encoder's activation has no per-member version: members that differ in it do not
    # stack, though their keys without activations agree
    tanh = _simba(3, activation="Tanh")
    assert structure_key(a, activations=False) == structure_key(tanh, activations=False)
    with pytest.raises(NotStackableError):
        stack_modules([a, tanh])


def test_members_whose_simba_activations_differ_learn_in_groups_of_their_activation() -> None:
    pytest.importorskip("agile_offpolicy")
    from agile_core.algorithms.group import make_member_groups
    from agile_offpolicy.dqn import DQN

    obs_space, act_space = spaces.Box(-1.0, 1.0, (3,), np.float32), spaces.Discrete(2)
    agents = [DQN(obs_space, act_space, seed=seed, net_config={
        "latent_dim": 8, "simba": True, "head_config": {"hidden_size": [8]},
        "encoder_config": {"hidden_size": 8, "num_blocks": 1, "activation": activation}})
        for seed, activation in enumerate(["ReLU", "Tanh", "ReLU"])]
    groups = make_member_groups(agents)
    assert [slots for slots, _ in groups] == [[0, 2], [1]]
    assert all(group.stacked for _, group in groups)


@pytest.mark.parametrize("activation", ["ReLU", "Sigmoid"])
@pytest.mark.parametrize("widths", [[16, 16, 16], [16, 40, 10]])
def test_stacked_members_compute_and_get_the_gradients_of_themselves_alone(widths: list[int],
                                                                           activation: str) -> None:
    nets = _population(widths, activation)
    assert [net.hidden_size for net in nets] == widths
    stacked = stack_modules(nets)
    flat = FlatParameters(stacked)
    mask = padding_mask(stacked, nets, flat)
    assert (mask is None) == (len(set(widths)) == 1)
    x = torch.randn(len(nets), 7, 6)
    grad_out = torch.randn(len(nets), 7, 3)
    out = stacked(x)
    (out * grad_out).sum().backward()
    if mask is not None:
        flat.grad.mul_(mask)
    for index, net in enumerate(nets):
        expected = net(x[index])
        assert torch.allclose(out[index], expected, atol=1e-5)
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
    bind_members(stacked, nets)  # members become views of their own corners, values unchanged
    for net, state in zip(nets, before, strict=True):
        for key, value in net.state_dict().items():
            assert torch.equal(value, state[key]), key


def test_stacked_input_gradient_matches_and_padding_stays_zero_after_updates() -> None:
    nets = _population([16, 32, 8])
    stacked = stack_modules(nets)
    flat = FlatParameters(stacked)
    mask = padding_mask(stacked, nets, flat)
    assert mask is not None
    x = torch.randn(3, 5, 6, requires_grad=True)
    for _ in range(3):  # a few masked gradient steps keep the padding exactly zero
        flat.zero_grad()
        stacked(x.detach()).square().sum().backward()
        with torch.no_grad():
            flat.data.sub_(0.01 * flat.grad * mask)
    bind_members(stacked, nets)
    out = stacked(x)
    grad_out = torch.randn_like(out)
    (out * grad_out).sum().backward()
    for index, net in enumerate(nets):
        xi = x.detach()[index].clone().requires_grad_(True)
        alone = net(xi)
        assert torch.allclose(out[index], alone, atol=1e-5)
        (alone * grad_out[index]).sum().backward()
        assert torch.allclose(x.grad[index], xi.grad, atol=1e-5)
    assert not (flat.data * (1 - mask)).any()


def test_a_stacked_network_with_simba_encoders_fuses_its_heads_only() -> None:
    box = spaces.Box(-1, 1, (2,))
    spec = {"latent_dim": 16, "simba": True, "encoder_config": {"hidden_size": 16, "num_blocks": 1},
            "head_config": {"hidden_size": [16]}}
    actors = []
    for seed in range(3):
        torch.manual_seed(seed)
        actor = DeterministicActor(VECTOR, box, spec)
        if seed == 1:
            actor.mutate("encoder.add_node", np.random.default_rng(seed), numb_new_nodes=16)
        actors.append(actor)
    stacked = stack_modules(actors)
    FlatParameters(stacked)
    fused = fuse_stacked_mlps(stacked)
    assert fused >= 1  # the MLP heads fuse; the SimBa encoder runs as stacked modules
    assert not stacked.__dict__.get("agile_fused_heads")
    obs = torch.randn(3, 4, 5)
    out = stacked(obs)
    for index, actor in enumerate(actors):
        assert torch.allclose(out[index], actor(obs[index]), atol=1e-5)


def test_a_population_group_with_simba_encoders_of_different_widths_learns_as_its_members_alone() -> None:
    """DDPG members whose SimBa encoders differ in width and blocks' weights stack into one group,
    and the group's learning steps equal each member's own (weights and Adam moments)."""
    pytest.importorskip("agile_offpolicy")
    from agile_core.algorithms.group import MemberGroup
    from agile_offpolicy.buffers import ReplayBuffer
    from agile_offpolicy.ddpg import DDPG
    from agile_offpolicy.population import sample_padded

    obs_space, act_space = spaces.Box(-1.0, 1.0, (3,), np.float32), spaces.Box(-2.0, 2.0, (1,), np.float32)
    net = {"latent_dim": 16, "simba": True, "encoder_config": {"hidden_size": 16, "num_blocks": 1, "scale_factor": 2},
           "head_config": {"hidden_size": [16]}}

    def build() -> list[DDPG]:
        agents = [DDPG(obs_space, act_space, net_config=net, seed=i, batch_size=8 + 8 * i, lr_actor=1e-3 * (i + 1),
                       lr_critic=2e-3) for i in range(3)]
        agents[0].apply_architecture_mutation("encoder.add_node", np.random.default_rng(1), numb_new_nodes=16)
        agents[2].apply_architecture_mutation("encoder.remove_node", np.random.default_rng(2), numb_nodes=8)
        for agent in agents:
            agent.apply_architecture_mutation("encoder.add_block", np.random.default_rng(3), position=1)
        generator = torch.Generator().manual_seed(0)
        for agent in agents:  # let the inserted blocks do something (targets as their online networks)
            for online, target in ((agent.actor, agent.actor_target), (agent.critic, agent.critic_target)):
                with torch.no_grad():
                    weight = online.encoder.blocks[1].project.weight
                    weight.copy_(0.1 * torch.randn(weight.shape, generator=generator))
                    target.encoder.blocks[1].project.weight.copy_(weight)
        return agents

    memory = ReplayBuffer(500, obs_space, act_space)
    rng = np.random.default_rng(0)
    rows = 300
    memory.add(rng.uniform(-1, 1, (rows, 3)).astype(np.float32), rng.uniform(-2, 2, (rows, 1)).astype(np.float32),
               rng.normal(size=rows).astype(np.float32), rng.uniform(-1, 1, (rows, 3)).astype(np.float32),
               rng.random(rows) < 0.2)
    batched, single = build(), build()
    assert [agent.actor.encoder.hidden_size for agent in batched] == [32, 16, 8]
    # A first step alone, as in tests/offpolicy/test_population_groups.py: just after add_node the
    # new stream units sit exactly at the mean of the old ones, where some gradients are pure
    # rounding noise that Adam scales up to full steps; one step moves them off that point.
    for agents in (batched, single):
        for agent in agents:
            agent.learn(memory.sample(agent.batch_size, agent.rng))
    group = MemberGroup(batched)
    assert group.stacked
    for active in [(True, True, True), (True, False, True), (False, True, True)]:
        view = group.select(active)
        part = list(active[view.offset:view.offset + len(view)])
        group.algorithm.learn_population(view, sample_padded(memory, view.members, part, "cpu"), part)
        for agent, on in zip(single, active, strict=True):
            if on:
                agent.learn(memory.sample(agent.batch_size, agent.rng))
    for mine, theirs in zip(batched, single, strict=True):
        for name in mine.network_names:
            for (key, a), b in zip(getattr(mine, name).named_parameters(), getattr(theirs, name).parameters(),
                                   strict=True):
                assert a.shape == b.shape and torch.allclose(a, b, atol=1e-5), f"{name}.{key}"
        state_a, state_b = (agent.critic_optimizer.state_dict()["state"] for agent in (mine, theirs))
        for key in state_b:
            assert torch.allclose(state_a[key]["exp_avg"], state_b[key]["exp_avg"], atol=1e-5, rtol=1e-4)
