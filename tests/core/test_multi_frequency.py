"""Multi-frequency PBT: layout resolution, schedule, brackets, migration kinds, reproducibility."""

from __future__ import annotations

import copy
import json
from typing import Self

import numpy as np
import pytest

from agile_core.hpo.lineage import Lineage
from agile_core.hpo.multi_frequency import (
    MultiFrequencySelection,
    default_ratios,
    resolve_multi_frequency_layout,
)
from agile_core.hpo.protocols import SelectionResult, SelectionStrategy


class FakeAgent:
    """Minimal agent satisfying EvolvableAgent: a weight vector and one hyperparameter."""

    def __init__(self, index: int, fitness: list[float] | None = None) -> None:
        self.index = index
        self.fitness: list[float] = list(fitness or [])
        self.lineage = Lineage(id=index)
        self.steps = 0
        self.lr = 0.001 * (index + 1)
        self.weights = np.full(2, float(index))

    def clone(self, index: int | None = None) -> Self:
        twin = copy.deepcopy(self)
        if index is not None:
            twin.index = index
        return twin

    def copy_weights_from(self, other: Self) -> None:
        self.weights = other.weights.copy()


def population(fitnesses: list[float]) -> list[FakeAgent]:
    return [FakeAgent(i, [f]) for i, f in enumerate(fitnesses)]


def evaluate(agents: list[FakeAgent], rng: np.random.Generator) -> None:
    for agent in agents:
        agent.fitness.append(float(rng.normal()))


def trace(seed: int, generations: int = 30) -> list[list[tuple[int, int | None]]]:
    selector = MultiFrequencySelection(16, 2, [1, 3], rng=seed)
    scores = np.random.default_rng(7)
    agents = population([0.0] * 16)
    out = []
    for _ in range(generations):
        evaluate(agents, scores)
        agents = selector.select(agents).population
        out.append([(a.index, a.lineage.parent_id) for a in agents])
    return out


# ---------------------------------------------------------------- layout resolver


@pytest.mark.parametrize(
    ("pop_size", "n_sub", "expected"),
    [
        (6, 2, (1, 0, 1, 1)),  # S=3
        (8, 2, (1, 0, 1, 2)),  # S=4
        (12, 2, (2, 0, 2, 2)),  # S=6: 1.5 rounds up
        (20, 2, (3, 0, 3, 4)),  # S=10: 2.5 rounds up
        (24, 3, (2, 0, 2, 4)),  # S=8
    ],
)
def test_layout_defaults(pop_size: int, n_sub: int, expected: tuple[int, int, int, int]) -> None:
    layout = resolve_multi_frequency_layout(pop_size, n_sub, None, None, None, None, None)
    counts = tuple(
        layout[k] for k in ("n_winners", "n_survivors", "n_open_for_migration", "n_losers")
    )
    assert counts == expected
    assert layout["subpopulation_size"] == pop_size // n_sub
    assert layout["ratios"] == default_ratios(n_sub)
    assert layout["pop_size"] == pop_size and layout["n_subpopulations"] == n_sub


def test_default_ratios() -> None:
    assert default_ratios(1) == [1]
    assert default_ratios(4) == [1, 5, 10, 15]


def test_layout_partial_counts_and_explicit_ratios() -> None:
    layout = resolve_multi_frequency_layout(
        pop_size=16,
        n_subpopulations=2,
        n_winners=3,
        n_survivors=1,
        n_open_for_migration=None,
        n_losers=None,
        ratios=[1, 4],
    )
    assert (
        layout["n_winners"],
        layout["n_survivors"],
        layout["n_open_for_migration"],
        layout["n_losers"],
    ) == (3, 1, 2, 2)
    assert layout["ratios"] == [1, 4]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"pop_size": 4, "n_subpopulations": 1}, "needs pop_size >= 6, got 4"),
        (
            {"pop_size": 10, "n_subpopulations": 3},
            r"pop_size \(10\) must be divisible by n_subpopulations \(3\)",
        ),
        (
            {"pop_size": 8, "n_subpopulations": 4},
            "at least 3 agents, but pop_size 8 split into 4 subpopulations gives 2",
        ),
        ({"pop_size": 8, "n_subpopulations": 0}, "n_subpopulations must be >= 1, got 0"),
        (
            {
                "pop_size": 8,
                "n_subpopulations": 2,
                "n_winners": 1,
                "n_survivors": 0,
                "n_open_for_migration": 1,
                "n_losers": 3,
            },
            r"must equal the subpopulation size 4, got 1 \+ 0 \+ 1 \+ 3 = 5",
        ),
        (
            {"pop_size": 8, "n_subpopulations": 2, "n_winners": 0, "n_losers": 3},
            "n_winners must be >= 1",
        ),
        (
            {
                "pop_size": 8,
                "n_subpopulations": 2,
                "n_winners": 2,
                "n_open_for_migration": 2,
                "n_losers": 0,
            },
            "n_losers must be >= 1",
        ),
        (
            {"pop_size": 8, "n_subpopulations": 2, "n_winners": 2, "n_open_for_migration": 2},
            "n_losers must be >= 1, but n_winners 2, n_survivors 0, n_open_for_migration 2 "
            "leave 0 of the subpopulation size 4",
        ),
        (
            {"pop_size": 8, "n_subpopulations": 2, "n_survivors": -1},
            "n_survivors must be >= 0, got -1",
        ),
        (
            {"pop_size": 8, "n_subpopulations": 2, "n_winners": True},
            "n_winners must be an integer, got True",
        ),
        (
            {"pop_size": 12, "n_subpopulations": 3, "ratios": [1, 5]},
            "evolution_frequency_ratios has 2 entries but n_subpopulations is 3",
        ),
        (
            {"pop_size": 12, "n_subpopulations": 2, "ratios": [1, 0]},
            r"evolution_frequency_ratios\[1\] must be >= 1, got 0",
        ),
    ],
)
def test_layout_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        resolve_multi_frequency_layout(**kwargs)
    assert "{" not in str(info.value) and "}" not in str(info.value)


# ---------------------------------------------------------------- schedule and brackets


def test_frequency_schedule() -> None:
    selector = MultiFrequencySelection(9, 3, [1, 2, 3], rng=0)
    expected = {1: [0], 2: [0, 1], 3: [0, 2], 4: [0, 1], 5: [0], 6: [0, 1, 2]}
    assert {c: selector.evolving_subpopulations(c) for c in range(1, 7)} == expected

    scores = np.random.default_rng(1)
    agents = population([0.0] * 9)
    for call in range(1, 7):
        evaluate(agents, scores)
        assert selector.evolving_subpopulations() == expected[call]
        new = selector.select(agents).population
        changed = {s // 3 for s in range(9) if new[s] is not agents[s]}
        assert changed == set(expected[call])  # every evolving one replaces >= 1 loser
        agents = new
    assert selector.generation == 6


def test_no_subpopulation_due_returns_the_same_population() -> None:
    agents = population([float(i) for i in range(8)])
    result = MultiFrequencySelection(8, 2, [2, 3], rng=0).select(agents)
    assert all(a is b for a, b in zip(result.population, agents, strict=True))
    assert result.to_mutate == set()
    assert result.elite is agents[7]


def test_brackets_and_loser_replacement() -> None:
    # Subpopulation 0 evolves (ratio 1), subpopulation 1 does not (ratio 1000) and is too weak
    # to send migrants, so only the exploit step acts.
    sub0 = [50.0, 90.0, 30.0, 70.0, 10.0, 80.0]
    sub1 = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    agents = population(sub0 + sub1)
    selector = MultiFrequencySelection(
        12, 2, [1, 1000], n_winners=2, n_survivors=1, n_open_for_migration=1, n_losers=2, rng=0
    )
    groups = selector.brackets([1, 5, 3, 0, 2, 4])
    assert groups == {
        "winners": [1, 5],
        "survivors": [3],
        "open_for_migration": [0],
        "losers": [2, 4],
    }

    result = selector.select(agents)
    new = result.population
    for slot in (1, 5, 3, 0, *range(6, 12)):
        assert new[slot] is agents[slot]
    clones = [new[2], new[4]]
    assert {c.index for c in clones} == {12, 13}
    assert result.to_mutate == {12, 13}
    for clone in clones:
        assert clone.lineage.parent_id in (1, 5)
        assert clone.lineage.generation_born == 1
        assert clone.lineage.history[-1]["event"] == "clone"
        parent = agents[clone.lineage.parent_id]
        assert clone.lr == parent.lr
        np.testing.assert_array_equal(clone.weights, parent.weights)
    assert result.elite is agents[1]


def test_parents_of_losers_are_spread_over_winners() -> None:
    selector = MultiFrequencySelection(
        24, 1, n_winners=4, n_survivors=0, n_open_for_migration=0, n_losers=20, rng=3
    )
    parents = {
        c.lineage.parent_id
        for c in selector.select(population([float(i) for i in range(24)])).agents_to_mutate()
    }
    assert parents <= {20, 21, 22, 23}
    assert len(parents) >= 3


# ---------------------------------------------------------------- migration


def _set_fitness(agents: list[FakeAgent], values: list[float]) -> None:
    for agent, value in zip(agents, values, strict=True):
        agent.fitness.append(value)


def test_weights_only_migration_from_a_faster_subpopulation() -> None:
    selector = MultiFrequencySelection(8, 2, [1, 2], rng=0)  # S=4: 1 winner, 1 open, 2 losers
    agents = population([0.0] * 8)
    agents = selector.select(agents).population  # call 1: only subpopulation 0 evolves
    _set_fitness(agents, [100.0, 90.0, 80.0, 70.0, 10.0, 5.0, 1.0, 0.0])
    local, source = agents[5], agents[0]
    local_weights = local.weights.copy()

    result = selector.select(agents)  # call 2: both evolve
    migrant = result.population[5]
    assert migrant is not local
    assert migrant.index == local.index
    assert migrant.lr == local.lr  # hyperparameters stay
    np.testing.assert_array_equal(migrant.weights, source.weights)  # weights travel
    np.testing.assert_array_equal(local.weights, local_weights)  # input untouched
    assert migrant.lineage.id == local.index
    assert migrant.lineage.history[-1] == {
        "generation": 2,
        "event": "migration",
        "kind": "weights",
        "source_id": source.index,
        "from_subpopulation": 0,
        "subpopulation": 1,
    }
    assert len(local.lineage.history) == len(migrant.lineage.history) - 1
    assert migrant.index not in result.to_mutate
    # Subpopulation 0's open agent (90) is fitter than anything in subpopulation 1: kept.
    assert result.population[1] is agents[1]
    # Losers of both subpopulations were replaced by mutated clones of their winners.
    assert len(result.to_mutate) == 4
    for slot in (2, 3, 6, 7):
        assert result.population[slot].index in result.to_mutate
    assert {result.population[s].lineage.parent_id for s in (6, 7)} == {agents[4].index}


def test_whole_agent_migration_from_a_slower_subpopulation() -> None:
    agents = population([100.0, 90.0, 80.0, 70.0, 10.0, 5.0, 1.0, 0.0])
    selector = MultiFrequencySelection(8, 2, [2, 1], rng=0)  # subpopulation 1 is the fast one
    result = selector.select(agents)
    migrant = result.population[5]
    source = agents[0]
    assert migrant.index == 10  # 8, 9 went to the loser clones
    assert migrant.lr == source.lr
    np.testing.assert_array_equal(migrant.weights, source.weights)
    assert migrant.lineage.parent_id == source.index
    assert migrant.lineage.history == [
        {
            "generation": 1,
            "event": "migration",
            "parent_id": 0,
            "kind": "whole",
            "replaced": 5,
            "from_subpopulation": 0,
            "subpopulation": 1,
        }
    ]
    assert migrant.index not in result.to_mutate
    assert result.to_mutate == {8, 9}
    assert all(result.population[s] is agents[s] for s in range(4))


def test_equal_ratios_migrate_whole_agents() -> None:
    agents = population([100.0, 90.0, 80.0, 70.0, 10.0, 5.0, 1.0, 0.0])
    result = MultiFrequencySelection(8, 2, [1, 1], rng=0).select(agents)
    migrant = result.population[5]
    assert migrant.index not in (5, 0) and migrant.lineage.parent_id == 0
    assert migrant.lineage.history[-1]["kind"] == "whole"


def test_open_slots_end_with_the_fittest_of_open_and_foreign_agents() -> None:
    # S=8 per subpopulation: 1 winner, 0 survivors, 2 open, 5 losers.
    sub0 = [99.0, 50.0, 40.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    sub1 = [60.0, 45.0, 30.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    agents = population(sub0 + sub1)
    selector = MultiFrequencySelection(
        16, 2, [1, 1000], n_winners=1, n_survivors=0, n_open_for_migration=2, n_losers=5, rng=0
    )
    result = selector.select(agents)
    assert result.population[1] is agents[1]  # 50 beats the second candidate (45)
    replaced = result.population[2]  # the weakest open agent (40) takes the best candidate (60)
    assert replaced.lineage.parent_id == 8
    assert replaced.lineage.history[-1]["kind"] == "whole"
    assert all(result.population[s] is agents[s] for s in range(8, 16))


def test_no_migration_when_foreign_agents_are_not_fitter() -> None:
    agents = population([10.0, 9.0, 8.0, 7.0, 5.0, 9.0, 1.0, 0.0])  # tie 9 vs 9: no migration
    result = MultiFrequencySelection(8, 2, [1000, 1], rng=0).select(agents)
    assert result.population[5] is agents[5]


# ---------------------------------------------------------------- invariants and state


def test_elite_is_global_best_and_kept() -> None:
    agents = population([1.0, 2.0, 3.0, 4.0, 9.0, 5.0, 6.0, 7.0])
    result = MultiFrequencySelection(8, 2, [1, 1], rng=0).select(agents)
    assert result.elite is agents[4]
    assert result.population[4] is agents[4]
    assert isinstance(result, SelectionResult)
    assert isinstance(MultiFrequencySelection(8, 2, rng=0), SelectionStrategy)


def test_indices_unique_never_reused_and_size_constant() -> None:
    selector = MultiFrequencySelection(12, 3, [1, 2, 3], rng=4)
    scores = np.random.default_rng(5)
    agents = population([0.0] * 12)
    seen = {a.index for a in agents}
    for _ in range(40):
        evaluate(agents, scores)
        result = selector.select(agents)
        assert len(result.population) == 12
        indices = [a.index for a in result.population]
        assert len(set(indices)) == 12
        new = set(indices) - {a.index for a in agents}
        assert result.to_mutate <= new
        assert not new & seen
        seen |= new
        agents = result.population


def test_identical_seeds_identical_outcomes_different_seeds_differ() -> None:
    assert trace(21) == trace(21)
    assert trace(21) != trace(22)


def test_state_dict_round_trip_resumes_the_same_sequence() -> None:
    scores = np.random.default_rng(2)
    selector = MultiFrequencySelection(16, 2, [1, 3], rng=8)
    agents = population([0.0] * 16)
    for _ in range(5):
        evaluate(agents, scores)
        agents = selector.select(agents).population
    state = json.loads(json.dumps(selector.state_dict()))
    assert state["kind"] == "multi_frequency" and state["generation"] == 5
    twin_agents = copy.deepcopy(agents)
    twin_scores = copy.deepcopy(scores)
    resumed = MultiFrequencySelection(16, 2, [1, 3], rng=999)
    resumed.load_state_dict(state)

    for _ in range(6):
        evaluate(agents, scores)
        evaluate(twin_agents, twin_scores)
        first = selector.select(agents)
        second = resumed.select(twin_agents)
        assert [(a.index, a.lineage.parent_id) for a in first.population] == [
            (a.index, a.lineage.parent_id) for a in second.population
        ]
        assert first.to_mutate == second.to_mutate
        agents, twin_agents = first.population, second.population


def test_population_must_match_the_layout() -> None:
    selector = MultiFrequencySelection(8, 2, rng=0)
    with pytest.raises(ValueError, match="multi_frequency selection expects 8 agents, got 6"):
        selector.select(population([1.0] * 6))


def test_layout_property_and_constructor_errors() -> None:
    selector = MultiFrequencySelection(12, 2, rng=0)
    assert selector.layout["ratios"] == [1, 5]
    assert list(selector.subpopulation_slots(1)) == [6, 7, 8, 9, 10, 11]
    assert selector.subpopulation_of(7) == 1
    with pytest.raises(
        ValueError, match=r"pop_size \(12\) must be divisible by n_subpopulations \(5\)"
    ):
        MultiFrequencySelection(12, 5)
    with pytest.raises(ValueError, match="call must be >= 1"):
        selector.evolving_subpopulations(0)
