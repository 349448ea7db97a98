"""The worked example of docs/writing-an-algorithm.md (tests/core/example_algorithm/) is a complete
algorithm: registered at run time, it trains through `LocalTrainer` with evolution on and learns
CartPole; its group step is its members' own steps; the doc's code is its code."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium import spaces

from agile_core.algorithms.group import MemberGroup, PopulationBatch
from agile_core.errors import ManifestError, ManifestWarning
from agile_core.registry import algorithm_names, paradigm_of, register_paradigm, unregister_paradigm
from agile_core.specs.manifest import TrainingManifest
from agile_core.trainer import LocalTrainer
from tests.core.example_algorithm.algorithm import ExpectedSarsa
from tests.core.example_algorithm.plugin import PARADIGM
from tests.core.example_algorithm.spec import ExpectedSarsaSpec
from tests.core.example_algorithm.train import MANIFEST, train

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = Path(__file__).resolve().parent / "example_algorithm"
DOC = ROOT / "docs" / "writing-an-algorithm.md"

RANDOM_CARTPOLE = 22.0
"""Mean return of a uniformly random policy on CartPole-v1 (about 22)."""
LEARNT = 100.0
"""Best fitness every seed reaches: seeds 0-9 reached 134 to 500 with this budget."""


@pytest.fixture
def registered():
    """The example's paradigm, registered for one test only."""
    register_paradigm(PARADIGM)
    try:
        yield PARADIGM
    finally:
        unregister_paradigm(PARADIGM.name)


@pytest.mark.parametrize("seed", range(5))
def test_the_example_learns_cartpole_with_evolution_on(seed: int) -> None:
    population, _ = train(seed)
    best = max(max(agent.fitness) for agent in population)
    assert best >= LEARNT > 4 * RANDOM_CARTPOLE, (seed, [agent.fitness for agent in population])
    assert all(isinstance(agent, ExpectedSarsa) and agent.learn_counter > 0 for agent in population)
    assert max(agent.index for agent in population) >= 2  # selection replaced members by (mutated) clones
    assert "ExpectedSARSA" not in algorithm_names()  # registered for the run only


def test_the_manifest_evolves(registered) -> None:
    trainer = LocalTrainer.from_manifest(MANIFEST)
    assert trainer.evolving
    selection, mutation = trainer.make_selection_and_mutation()
    assert selection is not None and mutation is not None


def test_the_paradigm_is_registered_only_while_asked() -> None:
    assert "ExpectedSARSA" not in algorithm_names()
    register_paradigm(PARADIGM)
    try:
        assert "ExpectedSARSA" in algorithm_names()
        assert paradigm_of("ExpectedSARSA") is PARADIGM
    finally:
        unregister_paradigm(PARADIGM.name)
    assert "ExpectedSARSA" not in algorithm_names()


def test_the_spec_rules_apply_to_manifests(registered) -> None:
    too_large = {**MANIFEST, "algorithm": {**MANIFEST["algorithm"], "batch_size": 30_000}}
    with pytest.raises(ManifestError) as refused:
        TrainingManifest.get_validated(too_large)
    assert [issue.path for issue in refused.value.issues] == [("algorithm", "batch_size")]
    never_learns = {**MANIFEST, "algorithm": {**MANIFEST["algorithm"], "learn_step": 9_000}}
    with pytest.warns(ManifestWarning, match="learn_step"):
        manifest = TrainingManifest.get_validated(never_learns)
    assert [note.path for note in manifest.warnings] == [("algorithm", "learn_step")]


def test_constructor_defaults_are_the_spec_defaults() -> None:
    parameters = inspect.signature(ExpectedSarsa.__init__).parameters
    assert {name: parameters[name].default for name in ExpectedSarsaSpec.defaults()} == ExpectedSarsaSpec.defaults()
    assert ExpectedSarsa.hyperparameter_names == ("lr", "batch_size", "learn_step", "gamma", "policy_epsilon")
    with pytest.raises(ValueError, match="gamma"):
        ExpectedSarsa(spaces.Box(-1, 1, (4,)), spaces.Discrete(2), gamma=1.5)


def test_a_group_learns_what_each_member_learns_alone() -> None:
    observation_space, action_space = spaces.Box(-1.0, 1.0, (4,), np.float32), spaces.Discrete(3)
    net = {"latent_dim": 16, "encoder_config": {"hidden_size": [16]}, "head_config": {"hidden_size": [16]}}
    members = [ExpectedSarsa(observation_space, action_space, index=0, net_config=net, seed=1, gamma=0.9,
                             policy_epsilon=0.0),
               ExpectedSarsa(observation_space, action_space, index=1, net_config=net, seed=2, lr=3e-3,
                             policy_epsilon=0.3)]
    alone = [member.clone() for member in members]
    rng, rows = np.random.default_rng(0), 32
    batches = [(rng.normal(size=(rows, 4)).astype(np.float32), rng.integers(3, size=rows),
                rng.normal(size=rows).astype(np.float32), rng.normal(size=(rows, 4)).astype(np.float32),
                (rng.random(rows) < 0.1).astype(np.float32)) for _ in members]
    for agent, batch in zip(alone, batches, strict=True):
        agent.learn(batch)
    flat = [torch.as_tensor(np.concatenate(parts)) for parts in zip(*batches, strict=True)]
    batch = PopulationBatch.of_rows(flat, len(members), torch.full((len(members), rows), 1.0 / rows))
    losses = ExpectedSarsa.learn_population(MemberGroup(members), batch, [True, True])
    assert len(losses) == 2 and all(loss is not None for loss in losses)
    for member, twin in zip(members, alone, strict=True):
        for mine, theirs in zip(member.q_net.parameters(), twin.q_net.parameters(), strict=True):
            torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-6)
        assert member.learn_counter == twin.learn_counter == 1


def _doc_code() -> list[str]:
    return re.findall(r"```py(?:thon)?\n(.*?)```", DOC.read_text(), flags=re.S)


def test_the_doc_shows_the_example_code() -> None:
    """Every Python block of the doc is the example's code, verbatim, with its package renamed:
    the doc cannot drift from the code this file trains."""
    sources = {path.name: path.read_text().replace("tests.core.example_algorithm", "my_sarsa")
               for path in sorted(EXAMPLE.glob("*.py"))}
    quoted = _doc_code()
    assert len(quoted) >= 7
    for block in quoted:
        assert any(block in source for source in sources.values()), f"not in tests/core/example_algorithm:\n{block}"
    assert sources["spec.py"] in quoted  # shown whole, so tests/core/test_docs_snippets.py runs it
    assert sources["plugin.py"] in quoted and sources["train.py"] in quoted
    algorithm = sources["algorithm.py"]
    shown = [block for block in quoted if block in algorithm]
    missing = [line for line in algorithm[algorithm.index("from collections.abc"):].splitlines()
               if line.strip() and not any(line in block for block in shown)]
    assert missing == [], "algorithm.py is shown whole after its module docstring"
