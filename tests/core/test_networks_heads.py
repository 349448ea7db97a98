"""RL networks (encoder + heads): delegated and latent mutations, preservation, round-trips,
Rainbow distributions and noise, actor distributions and bounds, recurrent variants."""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch.distributions import Bernoulli, Categorical, Normal

from agile_core.networks import (
    ContinuousQNetwork,
    DeterministicActor,
    EvolvableNetwork,
    MutationError,
    NoisyLinear,
    QNetwork,
    RainbowQNetwork,
    StochasticActor,
    ValueNetwork,
    from_config,
    mean_weights,
)
from agile_core.networks.stacked import stack_modules

TOL = 1e-5
OBS = spaces.Box(-1, 1, (6,))
IMAGE = spaces.Box(0, 1, (3, 16, 16))
DICT = spaces.Dict({"img": spaces.Box(0, 1, (1, 10, 10)), "pos": spaces.Box(-1, 1, (3,)), "mode": spaces.Discrete(2)})
BOX = spaces.Box(-2.0, 3.0, (2,))
SPEC = {"latent_dim": 16, "min_latent_dim": 8, "max_latent_dim": 40,
        "encoder_config": {"hidden_size": [16]}, "head_config": {"hidden_size": [16]}}
LSTM_SPEC = {**SPEC, "encoder_config": {"arch": "lstm", "hidden_state_size": 16}}
CNN_SPEC = {**SPEC, "encoder_config": {"channel_size": [8], "kernel_size": [4], "stride_size": [2], "layer_norm": True}}
DICT_SPEC = {**SPEC, "encoder_config": {"arch": "multiinput", "latent_dim": 8,
                                        "cnn_config": {"channel_size": [8], "kernel_size": [3], "stride_size": [2]},
                                        "mlp_config": {"hidden_size": [16]}}}

FACTORIES: dict[str, Callable[[], EvolvableNetwork]] = {
    "q": lambda: QNetwork(OBS, spaces.Discrete(3), SPEC),
    "rainbow": lambda: RainbowQNetwork(OBS, spaces.Discrete(3), SPEC, num_atoms=11, v_min=-5, v_max=5),
    "deterministic": lambda: DeterministicActor(OBS, BOX, SPEC),
    "gaussian": lambda: StochasticActor(OBS, BOX, SPEC, action_std_init=0.5),
    "categorical": lambda: StochasticActor(OBS, spaces.Discrete(4), SPEC),
    "multidiscrete": lambda: StochasticActor(OBS, spaces.MultiDiscrete([3, 2]), SPEC),
    "multibinary": lambda: StochasticActor(OBS, spaces.MultiBinary(3), SPEC),
    "value": lambda: ValueNetwork(OBS, SPEC),
    "continuous_q": lambda: ContinuousQNetwork(OBS, BOX, SPEC),
    "recurrent_q": lambda: QNetwork(OBS, spaces.Discrete(3), LSTM_SPEC, recurrent=True),
    "recurrent_actor": lambda: StochasticActor(OBS, BOX, LSTM_SPEC, recurrent=True),
    "image_q": lambda: QNetwork(IMAGE, spaces.Discrete(3), CNN_SPEC),
    "dict_value": lambda: ValueNetwork(DICT, DICT_SPEC),
}
ACTIONS = {
    "gaussian": torch.randn(8, 2, generator=torch.Generator().manual_seed(2)),
    "categorical": torch.tensor([0, 1, 2, 3, 0, 1, 2, 3]),
    "multidiscrete": torch.tensor([[0, 1], [2, 0], [1, 1], [0, 0], [2, 1], [1, 0], [0, 1], [2, 0]]),
    "multibinary": torch.tensor([[0, 1, 1], [1, 0, 0]] * 4, dtype=torch.float32),
    "recurrent_actor": torch.randn(8, 5, 2, generator=torch.Generator().manual_seed(2)),
}


def _make(kind: str, seed: int = 0) -> EvolvableNetwork:
    torch.manual_seed(seed)
    return FACTORIES[kind]()


def _obs(kind: str):
    gen = torch.Generator().manual_seed(1)
    if kind.startswith("recurrent"):
        return torch.randn(8, 5, 6, generator=gen)
    if kind == "image_q":
        return torch.rand(8, 3, 16, 16, generator=gen)
    if kind == "dict_value":
        return {"img": torch.rand(8, 1, 10, 10, generator=gen), "pos": torch.randn(8, 3, generator=gen),
                "mode": torch.eye(2)[torch.tensor([0, 1] * 4)]}
    return torch.randn(8, 6, generator=gen) * 2


def _outputs(kind: str, net: EvolvableNetwork) -> torch.Tensor:
    obs = _obs(kind)
    if kind == "rainbow":
        return net(obs, output="log_probs")
    if kind == "continuous_q":
        return net(obs, torch.ones(8, 2))
    if kind in ACTIONS:
        out = net(obs, ACTIONS[kind])
        return torch.cat([out[1].reshape(-1), out[2].reshape(-1)])
    out = net(obs)
    return out[0] if isinstance(out, tuple) else out


def _diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).detach().abs().max())


def _growing(names: list[str]) -> list[str]:
    return [name for name in names if name.split(".")[-1].startswith("add")]


@pytest.mark.parametrize("kind", sorted(FACTORIES))
def test_every_growing_mutation_preserves_function(kind: str) -> None:
    base = _make(kind)
    names = _growing(base.mutation_methods())
    assert "add_latent_node" in names
    assert any(name.startswith("encoder.") for name in names)
    assert any(name.startswith(head) for head in base.head_names for name in names)
    for name in names:
        net = base.clone()
        before = _outputs(kind, net)
        change = net.mutate(name, np.random.default_rng(0))
        assert _diff(_outputs(kind, net), before) < TOL, (name, change)


@pytest.mark.parametrize("kind", sorted(FACTORIES))
def test_round_trip_clone_and_replay(kind: str) -> None:
    net, twin = _make(kind, 0), _make(kind, 1)
    rng = np.random.default_rng(9)
    for _ in range(8):
        name = str(rng.choice(net.mutation_methods()))
        change = net.mutate(name, rng)
        twin.mutate(name, **change)
        assert twin.config == net.config, name
    config = json.loads(json.dumps(net.config))
    assert config["type"] == type(net).__name__
    rebuilt = from_config(config)
    assert type(rebuilt) is type(net)
    rebuilt.load_state_dict(net.state_dict())
    assert torch.equal(_outputs(kind, rebuilt), _outputs(kind, net))
    copy = net.clone()
    ptrs = {t.data_ptr() for t in [*net.parameters(), *net.buffers()]}
    assert not ptrs & {t.data_ptr() for t in [*copy.parameters(), *copy.buffers()]}
    assert torch.equal(_outputs(kind, copy), _outputs(kind, net))


def test_latent_bounds_and_shrinking_keeps_overlap() -> None:
    net = _make("continuous_q")
    encoder_rows = net.encoder.output_layer.weight.detach().clone()
    head_cols = net.head.blocks[0].main.weight.detach().clone()
    assert net.remove_latent_node(numb_nodes=8, rng=np.random.default_rng(0)) == {"numb_nodes": 8}
    assert net.latent_dim == 8 and net.encoder.num_outputs == 8
    assert torch.equal(net.encoder.output_layer.weight, encoder_rows[:8])
    # the head reads [latent (16 -> 8), action (2)]: latent columns 0..7 and both action columns survive
    assert torch.equal(net.head.blocks[0].main.weight, torch.cat([head_cols[:, :8], head_cols[:, 16:]], dim=1))
    assert "remove_latent_node" not in net.mutation_methods()
    with pytest.raises(MutationError):
        net.mutate("remove_latent_node")
    net.add_latent_node(numb_new_nodes=32, rng=np.random.default_rng(0))
    assert net.latent_dim == 40 and "add_latent_node" not in net.mutation_methods()
    with pytest.raises(MutationError):
        net.add_latent_node(numb_new_nodes=1)
    assert net.mutation_kind("add_latent_node") == "node"
    assert net.mutation_kind("encoder.add_layer") == "layer"
    assert net.mutation_kind("head.change_activation") == "activation"


def test_rainbow_distribution_shapes_and_values() -> None:
    net = _make("rainbow")
    obs = _obs("rainbow")
    q = net(obs)
    probs = net(obs, output="probs")
    log_probs = net(obs, output="log_probs")
    assert q.shape == (8, 3) and probs.shape == log_probs.shape == (8, 3, 11)
    assert torch.allclose(probs.sum(-1), torch.ones(8, 3), atol=1e-5)
    assert torch.allclose(log_probs.exp(), probs, atol=1e-6)
    assert torch.allclose(q, (probs * net.support).sum(-1), atol=1e-5)
    assert torch.allclose(net.support, torch.linspace(-5, 5, 11))
    with pytest.raises(ValueError):
        net(obs, output="values")


def test_rainbow_noisy_layers() -> None:
    net = _make("rainbow")
    noisy = [m for m in net.modules() if isinstance(m, NoisyLinear)]
    assert len(noisy) == 2
    assert net.advantage.output_layer is noisy[0] or net.value.output_layer is noisy[0]
    obs = _obs("rainbow")
    net.train()
    first = net(obs)
    assert torch.equal(net(obs), first)  # noise only changes on reset_noise
    net.reset_noise()
    assert _diff(net(obs), first) > 1e-6
    net.eval()
    mean_q = net(obs)
    net.reset_noise()
    assert torch.equal(net(obs), mean_q)
    layer = noisy[0]
    layer.train()
    x = torch.randn(4, layer.in_features)
    expected = x @ (layer.weight_mu + layer.weight_sigma * torch.outer(layer.eps_out, layer.eps_in)).T
    expected = expected + layer.bias_mu + layer.bias_sigma * layer.eps_out
    assert torch.allclose(layer(x), expected, atol=1e-6)


def test_mean_weights_switch_off_the_noise_of_single_and_stacked_layers_without_a_mode_change() -> None:
    nets = [_make("rainbow", seed) for seed in range(3)]
    stacked = stack_modules(nets)
    obs = _obs("rainbow")
    for net in nets:
        net.reset_noise()
    for net in nets:
        net.eval()
    mean_q = [net(obs) for net in nets]
    for net in nets:
        net.train()
    with mean_weights():
        for net, expected in zip(nets, mean_q, strict=True):
            assert torch.equal(net(obs), expected)
        members = stacked(obs.expand(len(nets), *obs.shape))
    for member, expected in zip(members, mean_q, strict=True):
        assert torch.allclose(member, expected, atol=1e-5)
    assert all(net.training for net in nets) and stacked.training
    assert _diff(nets[0](obs), mean_q[0]) > 1e-6  # noise is back outside the block


def test_gaussian_log_prob_matches_torch_normal() -> None:
    net = _make("gaussian")
    obs = _obs("gaussian")
    latent, _ = net.encode(obs)
    mean = net.head(latent)
    std = net.log_std.exp()
    assert torch.allclose(std, torch.full((2,), 0.5))
    reference = Normal(mean, std)
    action = ACTIONS["gaussian"]
    _, log_prob, entropy = net(obs, action)
    assert log_prob.shape == entropy.shape == (8,)
    assert torch.allclose(log_prob, reference.log_prob(action).sum(-1), atol=1e-5)
    assert torch.allclose(entropy, reference.entropy().sum(-1), atol=1e-5)
    greedy, _, _ = net(obs, deterministic=True)
    assert torch.allclose(greedy, mean)
    sampled, sample_log_prob, _ = net(obs)
    assert sampled.shape == (8, 2)
    assert torch.allclose(sample_log_prob, reference.log_prob(sampled).sum(-1), atol=1e-5)


def test_discrete_multidiscrete_multibinary_match_torch() -> None:
    net = _make("categorical")
    obs = _obs("categorical")
    logits = net.head(net.encode(obs)[0])
    action, log_prob, entropy = net(obs, ACTIONS["categorical"])
    reference = Categorical(logits=logits)
    assert torch.allclose(log_prob, reference.log_prob(ACTIONS["categorical"]), atol=1e-5)
    assert torch.allclose(entropy, reference.entropy(), atol=1e-5)
    greedy, _, _ = net(obs, deterministic=True)
    assert torch.equal(greedy, logits.argmax(-1))
    mask = torch.zeros(8, 4, dtype=torch.bool)
    mask[:, 2] = True
    masked, masked_log_prob, masked_entropy = net(obs, action_mask=mask)
    assert torch.equal(masked, torch.full((8,), 2)) and torch.allclose(masked_log_prob, torch.zeros(8), atol=1e-6)
    assert torch.allclose(masked_entropy, torch.zeros(8), atol=1e-6)

    net = _make("multidiscrete")
    logits = net.head(net.encode(obs)[0])
    action = ACTIONS["multidiscrete"]
    _, log_prob, entropy = net(obs, action)
    parts = [Categorical(logits=logits[:, :3]), Categorical(logits=logits[:, 3:])]
    assert torch.allclose(log_prob, parts[0].log_prob(action[:, 0]) + parts[1].log_prob(action[:, 1]), atol=1e-5)
    assert torch.allclose(entropy, parts[0].entropy() + parts[1].entropy(), atol=1e-5)
    assert net(obs)[0].shape == (8, 2)

    net = _make("multibinary")
    logits = net.head(net.encode(obs)[0])
    action = ACTIONS["multibinary"]
    _, log_prob, entropy = net(obs, action)
    reference = Bernoulli(logits=logits)
    assert torch.allclose(log_prob, reference.log_prob(action).sum(-1), atol=1e-5)
    assert torch.allclose(entropy, reference.entropy().sum(-1), atol=1e-5)
    sample = net(obs)[0]
    assert sample.shape == (8, 3) and set(sample.unique().tolist()) <= {0.0, 1.0}


def test_deterministic_actor_stays_within_bounds() -> None:
    net = _make("deterministic")
    actions = net(torch.randn(256, 6) * 100).detach()
    assert actions.shape == (256, 2)
    assert float(actions.min()) >= -2.0 and float(actions.max()) <= 3.0
    with torch.no_grad():
        net.head.output_layer.bias.fill_(50.0)
    assert torch.allclose(net(torch.randn(4, 6)), torch.full((4, 2), 3.0))
    with pytest.raises(ValueError):
        DeterministicActor(OBS, spaces.Box(-np.inf, np.inf, (2,)))


def test_recurrent_networks_take_and_return_hidden_state() -> None:
    net = _make("recurrent_actor")
    assert net.recurrent
    obs = _obs("recurrent_actor")
    hidden = net.initial_hidden_state(8)
    action, log_prob, entropy, (h, c) = net(obs, hidden_state=hidden)
    assert action.shape == (8, 5, 2) and log_prob.shape == entropy.shape == (8, 5)
    assert h.shape == c.shape == (1, 8, 16)
    step = net(obs[:, 0], hidden_state=hidden)
    assert step[0].shape == (8, 2) and len(step) == 4
    q = _make("recurrent_q")
    values, new_hidden = q(obs)
    assert values.shape == (8, 5, 3) and new_hidden[0].shape == (1, 8, 16)
    assert not _make("q").recurrent
    with pytest.raises(ValueError):
        _make("q").initial_hidden_state(2)


def test_wrong_action_spaces_are_rejected() -> None:
    with pytest.raises(ValueError):
        QNetwork(OBS, BOX)
    with pytest.raises(ValueError):
        DeterministicActor(OBS, spaces.Discrete(3))
    with pytest.raises(ValueError):
        StochasticActor(OBS, spaces.Text(3))


def test_networks_keep_dtype_through_mutations() -> None:
    torch.manual_seed(0)
    net = RainbowQNetwork(OBS, spaces.Discrete(3), SPEC, num_atoms=5, dtype=torch.float64)
    rng = np.random.default_rng(1)
    for _ in range(12):
        net.mutate(str(rng.choice(net.mutation_methods())), rng)
    assert all(t.dtype == torch.float64 for t in [*net.parameters(), *net.buffers()])
    assert net(torch.randn(3, 6, dtype=torch.float64)).dtype == torch.float64


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_mutations_keep_networks_on_the_gpu() -> None:
    device = torch.device("cuda")
    for kind in ("rainbow", "gaussian", "recurrent_q", "image_q", "dict_value", "continuous_q"):
        net = _make(kind).to(device)
        rng = np.random.default_rng(4)
        for _ in range(10):
            name = str(rng.choice(net.mutation_methods()))
            before = _on(kind, net, device)
            net.mutate(name, rng)
            after = _on(kind, net, device)
            if name.split(".")[-1].startswith("add"):
                assert _diff(after, before) < TOL, (kind, name)
        assert all(t.device.type == "cuda" for t in [*net.parameters(), *net.buffers()])
        rebuilt = from_config(net.config, device=device)
        rebuilt.load_state_dict(net.state_dict())
        assert torch.equal(_on(kind, rebuilt, device), _on(kind, net, device))


def _on(kind: str, net: EvolvableNetwork, device: torch.device) -> torch.Tensor:
    obs = _obs(kind)
    obs = {k: v.to(device) for k, v in obs.items()} if isinstance(obs, dict) else obs.to(device)
    if kind == "rainbow":
        return net(obs, output="log_probs")
    if kind == "continuous_q":
        return net(obs, torch.ones(8, 2, device=device))
    if kind in ACTIONS:
        out = net(obs, ACTIONS[kind].to(device))
        return torch.cat([out[1].reshape(-1), out[2].reshape(-1)])
    out = net(obs)
    return out[0] if isinstance(out, tuple) else out


@pytest.mark.parametrize("kind", ["rainbow", "recurrent_actor", "image_q", "dict_value"])
def test_seeded_mutations_are_reproducible_and_leave_the_global_rng_alone(kind: str) -> None:
    first, second = _make(kind), _make(kind)
    rngs = np.random.default_rng(21), np.random.default_rng(21)
    state = torch.get_rng_state()
    for _ in range(15):
        name = str(rngs[0].choice(first.mutation_methods()))
        assert str(rngs[1].choice(second.mutation_methods())) == name
        assert first.mutate(name, rngs[0]) == second.mutate(name, rngs[1])
    assert torch.equal(torch.get_rng_state(), state)
    theirs = second.state_dict()
    assert all(torch.equal(value, theirs[key]) for key, value in first.state_dict().items())
