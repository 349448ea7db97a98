"""Learning test: CQN learns a better CartPole policy than the data it is given.

Mixed-quality data (a partly trained DQN with epsilon 0 to 1, mean episode return below 200) is
recorded in the test; the example manifest's population of 4 (tournament selection and
mutations on) trains on it offline for 8,000 steps per agent. Its best greedy evaluation must reach 1.5x the data's mean
return and at least 300. Plain behaviour cloning of the same data is printed beside it.
Measured over 5 seeds in ``benchmarks/offline.py`` (figures in docs/paradigms/offline.md).
"""

from __future__ import annotations

import pytest

from tests.offline.offline_learning import run_check
from tests.seeds import learning_seed


@pytest.mark.learning
def test_cqn_beats_its_mixed_quality_data(tmp_path) -> None:
    result = run_check(seed=learning_seed(), folder=tmp_path, max_steps=8_000)
    print(f"data: {result.data_episodes} episodes, mean return {result.data_mean:.1f}; "
          f"CQN best {result.cqn_best:.1f} in {result.cqn_seconds:.0f} s "
          f"(passed after {result.steps_to_pass} steps); behaviour cloning {result.bc_return:.1f}")
    assert result.data_mean < 200
    assert result.cqn_best >= max(300.0, 1.5 * result.data_mean)
