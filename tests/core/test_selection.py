"""Tournament selection: elitism, fresh indices, tournament statistics, reproducibility, state."""

from __future__ import annotations

import copy
import json
from collections import Counter
from typing import Self

import numpy as np
import pytest

from agile_core.hpo.lineage import Lineage
from agile_core.hpo.protocols import EvolvableAgent, SelectionResult, SelectionStrategy
from agile_core.hpo.selection import TournamentSelection, mean_fitness, rng_from_state, rng_state


class FakeAgent:
    """Minimal agent satisfying EvolvableAgent: a weight vector and one hyperparameter."""

    def __init__(self, index: int, fitness: list[float] | None = None, lr: float = 1e-3) -> None:
        self.index = index
        self.fitness: list[float] = list(fitness or [])
        self.lineage = Lineage(id=index)
        self.steps = 0
        self.lr = lr
        self.weights = np.full(3, float(index))

    def clone(self, index: int | None = None) -> Self:
        twin = copy.deepcopy(self)
        if index is not None:
            twin.index = index
            twin.lineage = self.lineage.child(index, 0)
        return twin

    def copy_weights_from(self, other: Self) -> None:
        self.weights = other.weights.copy()


def population(fitnesses: list[float], start: int = 0) -> list[FakeAgent]:
    return [FakeAgent(start + i, [f]) for i, f in enumerate(fitnesses)]


def evaluate(agents: list[FakeAgent], rng: np.random.Generator) -> None:
    for agent in agents:
        agent.fitness.append(float(rng.normal()))


def run(seed: int, generations: int = 20, size: int = 6) -> list[list[tuple[int, int | None]]]:
    """(index, parent_id) of every slot, per generation."""
    selector = TournamentSelection(3, True, size, rng=seed)
    scores = np.random.default_rng(123)
    agents = population([0.0] * size)
    trace = []
    for _ in range(generations):
        evaluate(agents, scores)
        agents = selector.select(agents).population
        trace.append([(a.index, a.lineage.parent_id) for a in agents])
    return trace


def test_protocols_are_satisfied() -> None:
    assert isinstance(FakeAgent(0), EvolvableAgent)
    assert isinstance(TournamentSelection(2, True, 4, rng=0), SelectionStrategy)


def test_elitism_keeps_the_best_as_the_same_object() -> None:
    agents = population([1.0, 5.0, 3.0, 2.0, 4.0])
    best = agents[1]
    result = TournamentSelection(2, True, 5, rng=0).select(agents)
    assert isinstance(result, SelectionResult)
    assert result.elite is best
    assert result.population[0] is best
    assert best.fitness == [5.0]
    np.testing.assert_array_equal(result.population[0].weights, np.full(3, 1.0))
    assert best.index not in result.to_mutate
    others = {a.index for a in result.population[1:]}
    assert result.to_mutate == others
    assert [a.index for a in result.agents_to_mutate()] == [a.index for a in result.population[1:]]


def test_result_unpacks_as_triple() -> None:
    elite, new_population, to_mutate = TournamentSelection(2, True, 4, rng=0).select(
        population([1.0, 2.0, 3.0, 4.0])
    )
    assert elite.index == 3
    assert len(new_population) == 4
    assert len(to_mutate) == 3


def test_without_elitism_every_slot_is_a_clone() -> None:
    agents = population([1.0, 5.0, 3.0, 2.0])
    result = TournamentSelection(2, False, 4, rng=1).select(agents)
    assert result.elite is agents[1]
    assert all(a.index >= 4 for a in result.population)
    assert result.to_mutate == {a.index for a in result.population}


def test_full_tournament_always_picks_the_fittest() -> None:
    agents = population([1.0, 9.0, 3.0, 2.0])
    result = TournamentSelection(4, True, 4, rng=3).select(agents)
    assert all(a.lineage.parent_id == 1 for a in result.population[1:])
    np.testing.assert_array_equal(result.population[2].weights, agents[1].weights)


def test_fitter_agents_win_more_often() -> None:
    """Agent with fitness f wins a 3-of-10 tournament with probability C(f, 2) / C(10, 3)."""
    selector = TournamentSelection(3, False, 10, rng=2024)
    agents = population([float(f) for f in range(10)])
    wins: Counter[int | None] = Counter()
    rounds = 400
    for _ in range(rounds):
        for child in selector.select(agents).population:
            wins[child.lineage.parent_id] += 1
    total = rounds * 10
    assert wins[0] == 0 and wins[1] == 0
    for f in range(2, 10):
        expected = f * (f - 1) / 2 / 120
        assert abs(wins[f] / total - expected) < 0.02, (f, wins[f] / total, expected)
    counts = [wins[f] for f in range(2, 10)]
    assert counts == sorted(counts)


def test_population_size_constant_and_indices_never_reused() -> None:
    selector = TournamentSelection(2, True, 7, rng=5)
    scores = np.random.default_rng(0)
    agents = population([0.0] * 7)
    seen = {a.index for a in agents}
    for generation in range(1, 60):
        evaluate(agents, scores)
        result = selector.select(agents)
        assert len(result.population) == 7
        indices = [a.index for a in result.population]
        assert len(set(indices)) == 7
        new = set(indices) - {a.index for a in agents}
        assert new == result.to_mutate
        assert not new & seen
        seen |= new
        for agent in result.population:
            assert agent.lineage.id == agent.index
            if agent.index in new:
                assert agent.lineage.generation_born == generation
        agents = result.population
    assert selector.generation == 59
    assert selector.next_index == max(seen) + 1


def test_index_counter_starts_above_every_index_seen() -> None:
    agents = [FakeAgent(i, [float(i)]) for i in (0, 5, 100)]
    result = TournamentSelection(2, True, 3, rng=0).select(agents)
    assert sorted(result.to_mutate) == [101, 102]


def test_identical_seeds_identical_outcomes_different_seeds_differ() -> None:
    assert run(11) == run(11)
    assert run(11) != run(12)


def test_state_dict_round_trip_resumes_the_same_sequence() -> None:
    scores = np.random.default_rng(9)
    selector = TournamentSelection(3, True, 6, rng=42)
    agents = population([0.0] * 6)
    for _ in range(4):
        evaluate(agents, scores)
        agents = selector.select(agents).population
    state = json.loads(json.dumps(selector.state_dict()))
    evaluate(agents, scores)
    snapshot = copy.deepcopy(agents)

    original = [(a.index, a.lineage.parent_id) for a in selector.select(agents).population]
    resumed_selector = TournamentSelection(3, True, 6, rng=0)
    resumed_selector.load_state_dict(state)
    assert resumed_selector.generation == 4
    resumed = [(a.index, a.lineage.parent_id) for a in resumed_selector.select(snapshot).population]
    assert resumed == original


def test_load_state_dict_rejects_another_kind() -> None:
    state = TournamentSelection(2, True, 4, rng=0).state_dict()
    state["kind"] = "multi_frequency"
    with pytest.raises(ValueError, match="saved by 'multi_frequency' selection"):
        TournamentSelection(2, True, 4).load_state_dict(state)


def test_rng_state_json_round_trip_for_other_bit_generators() -> None:
    rng = np.random.Generator(np.random.MT19937(3))
    rng.random(5)
    restored = rng_from_state(json.loads(json.dumps(rng_state(rng))))
    assert restored.random() == rng.random()


def test_eval_loop_averages_the_latest_scores() -> None:
    a, b = FakeAgent(0, [100.0, 0.0]), FakeAgent(1, [0.0, 50.0, 10.0])
    assert mean_fitness(a, 1) == 0.0
    assert mean_fitness(a, 3) == 50.0
    assert mean_fitness(b, 2) == 30.0
    assert TournamentSelection(2, True, 2, eval_loop=1).select([a, b]).elite is b
    assert TournamentSelection(2, True, 2, eval_loop=3).select([a, b]).elite is a


def test_nan_fitness_ranks_last() -> None:
    agents = [FakeAgent(0, [float("nan")]), FakeAgent(1, [-1e9])]
    assert TournamentSelection(2, True, 2, rng=0).select(agents).elite is agents[1]


def test_select_leaves_its_input_untouched() -> None:
    agents = population([3.0, 1.0, 2.0, 0.5])
    before = [(a.index, a.lineage.to_dict(), a.weights.copy(), list(a.fitness)) for a in agents]
    TournamentSelection(2, True, 4, rng=0).select(agents)
    for agent, (index, lineage, weights, fitness) in zip(agents, before, strict=True):
        assert agent.index == index
        assert agent.lineage.to_dict() == lineage
        np.testing.assert_array_equal(agent.weights, weights)
        assert agent.fitness == fitness


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"tournament_size": 1, "elitism": True, "population_size": 4},
            "tournament_size must be >= 2, got 1",
        ),
        (
            {"tournament_size": 5, "elitism": True, "population_size": 4},
            r"tournament_size \(5\) must be <= population_size \(4\)",
        ),
        (
            {"tournament_size": 2, "elitism": True, "population_size": 1},
            "population_size must be >= 2, got 1",
        ),
        (
            {"tournament_size": 2, "elitism": True, "population_size": 4, "eval_loop": 0},
            "eval_loop must be >= 1, got 0",
        ),
        (
            {"tournament_size": 2.5, "elitism": True, "population_size": 4},
            "tournament_size must be an integer, got 2.5",
        ),
        ({"tournament_size": 2, "elitism": "yes", "population_size": 4}, "elitism must be a bool"),
        (
            {"tournament_size": 2, "elitism": True, "population_size": 4, "rng": "seed"},
            "rng must be a numpy Generator, an integer seed or None",
        ),
    ],
)
def test_constructor_validation(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TournamentSelection(**kwargs)


def test_select_validation() -> None:
    selector = TournamentSelection(2, True, 3, rng=0)
    with pytest.raises(ValueError, match="tournament selection expects 3 agents, got 2"):
        selector.select(population([1.0, 2.0]))
    with pytest.raises(ValueError, match=r"agent indices must be unique, duplicated: \[1\]"):
        selector.select([FakeAgent(1, [1.0]), FakeAgent(1, [2.0]), FakeAgent(2, [0.0])])
    with pytest.raises(ValueError, match="agent 2 has no fitness values"):
        selector.select([FakeAgent(0, [1.0]), FakeAgent(1, [2.0]), FakeAgent(2)])
    assert selector.generation == 0
    assert selector.next_index == 0
