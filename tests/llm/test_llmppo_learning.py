"""Learning test (seeded, CPU, tiny model built here): an LLMPPO population of 2 (LoRA actor, LoRA
critic with value head) with tournament selection and learning-rate mutation on GRPO's number task."""

from __future__ import annotations

from pathlib import Path

import pytest

from agile_llm.llm_ppo import LLMPPO
from tests.llm.test_reinforce_learning import SEED, learning_run

pytestmark = pytest.mark.learning


def test_llmppo_population_raises_held_out_reward(tmp_path: Path) -> None:
    means, pop = learning_run(LLMPPO, tmp_path, SEED, lr=1e-2, critic_lr=1e-2, batch_size=4, group_size=8,
                              update_epochs=2)
    print(f"LLMPPO mean held-out reward per evaluation (seed {SEED}): {[round(m, 3) for m in means]}")
    assert means[-1] - means[0] >= 0.3
    assert any(agent.lineage.parent_id is not None for agent in pop)  # selection cloned members
