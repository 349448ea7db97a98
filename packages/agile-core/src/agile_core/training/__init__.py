"""Paradigm-free pieces every single-agent training loop shares.

* :mod:`.envs`: vector-env helpers (wrapping a plain env, autoreset-mode check, channel swap).
* :mod:`.episodes`: per-sub-env episode bookkeeping with Gymnasium next-step autoreset flags.
* :mod:`.evaluation`: greedy evaluation of a policy in a vector env.
* :mod:`.schedule`: the exponential epsilon schedule of the off-policy loops.
* :mod:`.evolution`: evaluate, select, mutate and the target check, once per generation.
* :mod:`.reporting`: metrics logger, progress bar and generation table behind one object.
"""

from agile_core.training.envs import as_vector_env, check_next_step_autoreset, swap_image_channels
from agile_core.training.episodes import EpisodeTracker
from agile_core.training.evaluation import evaluate_policy
from agile_core.training.evolution import (
    evaluate_population,
    evolve_population,
    resolve_selection_strategy,
    target_reached,
)
from agile_core.training.reporting import TrainingReporter
from agile_core.training.schedule import EpsilonSchedule, LearnCredit

__all__ = [
    "EpisodeTracker",
    "EpsilonSchedule",
    "LearnCredit",
    "TrainingReporter",
    "as_vector_env",
    "check_next_step_autoreset",
    "evaluate_policy",
    "evaluate_population",
    "evolve_population",
    "resolve_selection_strategy",
    "swap_image_channels",
    "target_reached",
]
