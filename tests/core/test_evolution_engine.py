"""The paradigm-free evolution engine: mutations on a declared algorithm, optimizers kept
consistent, hyperparameter ranges respected, and evolution beating a badly chosen learning rate."""

from typing import Any

import numpy as np
import pytest
import torch

from agile_core.algorithms.base import EvolvableAlgorithm
from agile_core.hpo.hyperparameters import HyperparameterConfig, RLParameter
from agile_core.hpo.mutation import Mutations
from agile_core.hpo.selection import TournamentSelection
from agile_core.networks import EvolvableMLP
from agile_core.specs.mutation import MutationSpec
from agile_core.training.evolution import evolve_population

torch.set_num_threads(1)


def regression_data(seed: int = 0, n: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    y = (x @ torch.tensor([[1.5], [-2.0], [0.5], [1.0]]) + 0.3 * torch.sin(3 * x[:, :1]))
    return x, y


class Regressor(EvolvableAlgorithm):
    """A tiny supervised 'algorithm': an MLP fitted by SGD; fitness is minus the MSE."""

    hyperparameter_names = ("lr", "batch_size")

    def __init__(self, index: int = 0, lr: float = 1e-2, batch_size: int = 32,
                 hp_config: HyperparameterConfig | None = None, optimizer: str = "sgd", seed: int = 0,
                 hidden: list[int] | None = None) -> None:
        super().__init__(index=index, hp_config=hp_config)
        torch.manual_seed(seed)
        self.lr, self.batch_size = lr, batch_size
        self.net = EvolvableMLP(4, 1, hidden_size=hidden or [16], layer_norm=False, min_mlp_nodes=4, max_mlp_nodes=64)
        self.net_copy = self.net.clone()
        self.register_network_group("net", "net_copy")
        factory = torch.optim.SGD if optimizer == "sgd" else torch.optim.Adam
        self.register_optimizer("optimizer", ["net"], "lr", factory=factory)
        self.rng = np.random.default_rng(seed)

    def get_action(self, obs: Any, *args: Any, **kwargs: Any) -> Any:
        return self.net(obs)

    def learn(self, x: torch.Tensor, y: torch.Tensor) -> float:
        rows = self.rng.integers(0, len(x), size=self.batch_size)
        loss = torch.nn.functional.mse_loss(self.net(x[rows]), y[rows])
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return float(loss.detach())

    def test(self, env: Any, *args: Any, **kwargs: Any) -> float:
        x, y = env
        with torch.no_grad():
            score = -float(torch.nn.functional.mse_loss(self.net(x), y))
        self.fitness.append(score)
        return score


def _grads_flow(agent: Regressor) -> None:
    """Learning after a mutation changes every trainable parameter of the policy.

    Two steps: a new residual layer starts with a zero gate (exact identity), so on the very
    first step only the gate moves; from the second step its inner weights move too.
    """
    x, y = regression_data()
    before = {name: p.detach().clone() for name, p in agent.net.named_parameters()}
    agent.learn(x, y)
    agent.learn(x, y)
    for name, param in agent.net.named_parameters():
        assert not torch.equal(before[name], param.detach()), f"{name} did not update"


@pytest.mark.parametrize("operator", ["arch_mut", "params_mut", "act_mut", "rl_hp_mut"])
def test_every_mutation_leaves_a_consistent_agent_that_learns(operator):
    hp = HyperparameterConfig(lr=RLParameter("lr", 1e-4, 1.0), batch_size=RLParameter("batch_size", 8, 64, int))
    for seed in range(4):
        agent = Regressor(hp_config=hp, seed=seed)
        mutations = Mutations(rand_seed=seed)
        details = mutations.apply(agent, operator)
        assert details or operator == "act_mut"
        optimized = {id(p) for group in agent.optimizer.param_groups for p in group["params"]}
        assert optimized == {id(p) for p in agent.net.parameters()}
        assert agent.optimizer.param_groups[0]["lr"] == pytest.approx(agent.lr)
        assert agent.net_copy.config == agent.net.config  # follower replayed the architecture change
        _grads_flow(agent)


def test_architecture_mutation_is_function_preserving_through_the_algorithm():
    agent = Regressor(seed=1)
    x, _ = regression_data()
    with torch.no_grad():
        before = agent.net(x)
    rng = np.random.default_rng(0)
    grown = 0
    for _ in range(10):
        applied = agent.mutate_architecture(rng, new_layer_prob=0.5)
        if applied and applied["mutation"].startswith("add"):
            grown += 1
            with torch.no_grad():
                assert (agent.net(x) - before).abs().max() < 1e-5
        with torch.no_grad():
            before = agent.net(x)
    assert grown > 0


def test_adam_state_survives_a_mutation_that_does_not_touch_the_layer():
    agent = Regressor(optimizer="adam", seed=0, hidden=[16, 16])
    x, y = regression_data()
    for _ in range(3):
        agent.learn(x, y)
    params = dict(agent.net.named_parameters())
    state = {name: agent.optimizer.state[p]["exp_avg"].clone() for name, p in params.items()}
    shapes = {name: p.shape for name, p in params.items()}
    applied = agent.apply_architecture_mutation("add_node", hidden_layer=1, numb_new_nodes=8)
    assert applied["networks"] == ["net", "net_copy"]
    after = dict(agent.net.named_parameters())
    kept = [name for name in after if name in shapes and after[name].shape == shapes[name]]
    changed = [name for name in after if name not in shapes or after[name].shape != shapes[name]]
    assert kept and changed
    for name in kept:  # untouched layers keep their Adam moments exactly
        assert torch.equal(agent.optimizer.state[after[name]]["exp_avg"], state[name]), name
    for name in changed:  # resized tensors start fresh
        assert after[name] not in agent.optimizer.state
    _grads_flow(agent)


def test_rl_hp_mutation_respects_range_and_type():
    hp = HyperparameterConfig(lr=RLParameter("lr", 1e-3, 2e-3), batch_size=RLParameter("batch_size", 8, 10, int))
    agent = Regressor(hp_config=hp, lr=1.5e-3, batch_size=9)
    rng = np.random.default_rng(0)
    for _ in range(200):
        agent.mutate_hyperparameter(rng)
        assert 1e-3 <= agent.lr <= 2e-3 and isinstance(agent.lr, float)
        assert 8 <= agent.batch_size <= 10 and isinstance(agent.batch_size, int)
        assert agent.optimizer.param_groups[0]["lr"] == agent.lr


def test_mutation_sequence_is_reproducible_and_recorded():
    def run(seed: int) -> list[str]:
        hp = HyperparameterConfig(lr=RLParameter("lr", 1e-4, 1.0))
        agents = [Regressor(index=i, hp_config=hp, seed=i) for i in range(4)]
        mutations = Mutations(no_mutation=0.1, architecture=0.3, parameters=0.3, rl_hp=0.3, rand_seed=seed)
        out = []
        for _ in range(3):
            mutations.mutation(agents)
            out.extend(agent.mut for agent in agents)
        assert all(len(agent.lineage.history) == 3 for agent in agents)
        return out

    assert run(7) == run(7)
    assert run(7) != run(8)


def test_mutations_state_dict_resumes_the_sequence():
    a = Mutations(rand_seed=3)
    a.rng.random(5)
    b = Mutations(rand_seed=99)
    b.load_state_dict(a.state_dict())
    assert a.rng.random() == b.rng.random() and a.generation == b.generation


def test_mutations_from_spec_normalises_probabilities():
    spec = MutationSpec.model_validate({"probabilities": {"no_mut": 1, "arch_mut": 1, "params_mut": 0,
                                                          "act_mut": 0, "rl_hp_mut": 2}, "rand_seed": 1})
    mutations = Mutations.from_spec(spec)
    assert mutations.probabilities.tolist() == [0.25, 0.25, 0.0, 0.0, 0.5]


def test_only_selected_agents_are_mutated():
    agents = [Regressor(index=i, seed=i) for i in range(3)]
    Mutations(no_mutation=0, parameters=1, architecture=0, rl_hp=0, rand_seed=0).mutation(agents, to_mutate={1})
    assert [agent.mut for agent in agents] == ["None", "params", "None"]


def _evolve(generations: int, evolve: bool, seed: int = 0) -> float:
    x, y = regression_data(seed)
    hp = HyperparameterConfig(lr=RLParameter("lr", 1e-5, 0.2, grow_factor=2.0, shrink_factor=0.5))
    population = [Regressor(index=i, lr=1e-4, seed=seed * 100 + i, hp_config=hp) for i in range(6)]
    selection = TournamentSelection(tournament_size=2, elitism=True, population_size=6, rng=seed) if evolve else None
    mutations = Mutations(no_mutation=0.0, architecture=0.0, parameters=0.0, rl_hp=1.0, rand_seed=seed) if evolve else None
    for _ in range(generations):
        for agent in population:
            for _ in range(20):
                agent.learn(x, y)
            agent.test((x, y))
        population = evolve_population(population, selection, mutations).population
    for agent in population:
        agent.test((x, y))
    return -max(agent.fitness[-1] for agent in population)


def test_evolution_fixes_a_badly_chosen_learning_rate():
    """Tournament selection + RL-HP mutation beats the same population with evolution off by >= 5x."""
    with_evolution = _evolve(generations=20, evolve=True)
    without = _evolve(generations=20, evolve=False)
    assert with_evolution * 5 <= without, (with_evolution, without)


def test_clone_shares_no_tensors_and_copy_weights_keeps_hyperparameters():
    agent = Regressor(index=0, lr=0.05, seed=0)
    twin = agent.clone(index=5)
    assert twin.index == 5 and twin.lineage.parent_id == 0
    source_ptrs = {p.data_ptr() for p in agent.net.parameters()}
    assert not source_ptrs & {p.data_ptr() for p in twin.net.parameters()}
    other = Regressor(index=1, lr=0.001, seed=3)
    other.net.mutate("add_node", hidden_layer=0, numb_new_nodes=8)
    agent.copy_weights_from(other)
    assert agent.lr == 0.05 and agent.net.config == other.net.config
    x, _ = regression_data()
    with torch.no_grad():
        assert torch.allclose(agent.net(x), other.net(x))
    _grads_flow(agent)
