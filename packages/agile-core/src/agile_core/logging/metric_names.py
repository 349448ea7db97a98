"""Stable metric names shared by every training paradigm.

Every training loop in agile (off-policy, on-policy, multi-agent, offline and
LLM fine-tuning) logs through :class:`agile_core.logging.MetricsLogger` using the
names below, so that dashboards, CSV analyses and benchmark scripts work the
same way whatever the algorithm.  Names are grouped by prefix: ``train/`` for
learning signals, ``eval/`` for evaluation, ``hpo/`` for the evolutionary
hyperparameter optimisation, ``perf/`` for throughput and ``run/`` for run
metadata.  ``<id>`` is an agent id (``agent_<id>``, e.g. ``agent_3``) and
``<name>`` is a hyperparameter or loss name made of letters, digits, ``_``,
``.`` and ``-``.

========================================  ======  ==========================================================
Name                                      Kind    Meaning
========================================  ======  ==========================================================
``train/episodic_return``                 scalar  Undiscounted return of training episodes that finished since the last log call (mean). LLM: mean reward per batch.
``train/episode_length``                  scalar  Length in steps of those episodes (mean). LLM: mean completion length in tokens.
``train/loss``                            scalar  Total loss of the most recent learning update.
``train/<loss_name>``                     scalar  A component of the loss or another learning statistic, e.g. ``train/actor_loss``, ``train/critic_loss``, ``train/value_loss``, ``train/entropy``, ``train/kl``.
``eval/mean_return``                      scalar  Mean return over the evaluation episodes of this evaluation round, averaged over the population.
``eval/best_fitness``                     scalar  Best fitness seen so far in the run (running maximum over generations).
``hpo/generation``                        scalar  Index of the current generation of the evolutionary loop.
``hpo/fitness/agent_<id>``                scalar  Fitness of agent ``<id>`` in the current generation.
``hpo/mean_fitness``                      scalar  Mean fitness of the population in the current generation.
``hpo/best_fitness``                      scalar  Best fitness of the population in the current generation.
``hpo/mutation``                          text    One event per mutation: ``agent_<id>: <description>``, e.g. ``agent_3: lr 1.0e-03 -> 1.2e-03``.
``hpo/hyperparameters/<name>/agent_<id>`` scalar  Current value of hyperparameter ``<name>`` for agent ``<id>``.
``hpo/lineage``                           text    One event per child: ``agent_<parent> -> agent_<child>``, optionally followed by ``: <note>``.
``perf/steps_per_second``                 scalar  Environment (or token) steps per second of wall time, population total.
``perf/global_steps``                     scalar  Total environment steps taken so far by the whole population.
``run/config``                            text    The run configuration written by ``log_hyperparameters`` (secrets removed).
========================================  ======  ==========================================================

The same table is available as data in :data:`METRICS` (and rendered as
Markdown by :func:`metrics_markdown`) for the generated documentation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "EVAL_BEST_FITNESS",
    "EVAL_MEAN_RETURN",
    "HPO_BEST_FITNESS",
    "HPO_FITNESS_PREFIX",
    "HPO_GENERATION",
    "HPO_HYPERPARAMETERS_PREFIX",
    "HPO_LINEAGE",
    "HPO_MEAN_FITNESS",
    "HPO_MUTATION",
    "METRICS",
    "PERF_GLOBAL_STEPS",
    "PERF_STEPS_PER_SECOND",
    "RUN_CONFIG",
    "TRAIN_EPISODE_LENGTH",
    "TRAIN_EPISODIC_RETURN",
    "TRAIN_LOSS",
    "MetricSpec",
    "agent_key",
    "hpo_fitness",
    "hpo_hyperparameter",
    "is_documented",
    "lineage_text",
    "metrics_markdown",
    "mutation_text",
    "train_loss",
]

TRAIN_EPISODIC_RETURN = "train/episodic_return"
TRAIN_EPISODE_LENGTH = "train/episode_length"
TRAIN_LOSS = "train/loss"
EVAL_MEAN_RETURN = "eval/mean_return"
EVAL_BEST_FITNESS = "eval/best_fitness"
HPO_GENERATION = "hpo/generation"
HPO_FITNESS_PREFIX = "hpo/fitness"
HPO_MEAN_FITNESS = "hpo/mean_fitness"
HPO_BEST_FITNESS = "hpo/best_fitness"
HPO_MUTATION = "hpo/mutation"
HPO_HYPERPARAMETERS_PREFIX = "hpo/hyperparameters"
HPO_LINEAGE = "hpo/lineage"
PERF_STEPS_PER_SECOND = "perf/steps_per_second"
PERF_GLOBAL_STEPS = "perf/global_steps"
RUN_CONFIG = "run/config"

_COMPONENT = re.compile(r"^[A-Za-z0-9_.\-]+$")


def _component(value: object, what: str) -> str:
    text = str(value)
    if not _COMPONENT.match(text):
        raise ValueError(
            f"invalid {what} {text!r}: use letters, digits, '_', '.' or '-' (no '/' or spaces)"
        )
    return text


def agent_key(agent_id: int | str) -> str:
    """Return the path component naming an agent, e.g. ``agent_3``."""
    return f"agent_{_component(agent_id, 'agent id')}"


def train_loss(loss_name: str) -> str:
    """Return the name of a loss component, e.g. ``train_loss("critic_loss")`` → ``train/critic_loss``."""
    return f"train/{_component(loss_name, 'loss name')}"


def hpo_fitness(agent_id: int | str) -> str:
    """Return the per-agent fitness name ``hpo/fitness/agent_<id>``."""
    return f"{HPO_FITNESS_PREFIX}/{agent_key(agent_id)}"


def hpo_hyperparameter(name: str, agent_id: int | str) -> str:
    """Return the per-agent hyperparameter name ``hpo/hyperparameters/<name>/agent_<id>``."""
    return f"{HPO_HYPERPARAMETERS_PREFIX}/{_component(name, 'hyperparameter name')}/{agent_key(agent_id)}"


def mutation_text(agent_id: int | str, description: str) -> str:
    """Return the ``hpo/mutation`` event text ``agent_<id>: <description>``."""
    return f"{agent_key(agent_id)}: {description}"


def lineage_text(parent_id: int | str, child_id: int | str, note: str = "") -> str:
    """Return the ``hpo/lineage`` event text ``agent_<parent> -> agent_<child>[: note]``."""
    text = f"{agent_key(parent_id)} -> {agent_key(child_id)}"
    return f"{text}: {note}" if note else text


@dataclass(frozen=True)
class MetricSpec:
    """One documented metric: its name (or name template), kind and meaning."""

    name: str
    kind: Literal["scalar", "text"]
    description: str

    @property
    def is_template(self) -> bool:
        """Whether the name contains ``<placeholders>``."""
        return "<" in self.name

    def matches(self, name: str) -> bool:
        """Whether a concrete metric name is an instance of this spec."""
        if not self.is_template:
            return name == self.name
        parts = re.split(r"(<[a-z_]+>)", self.name)
        pattern = "".join(
            _COMPONENT.pattern[1:-1] if p.startswith("<") else re.escape(p) for p in parts
        )
        return re.fullmatch(pattern, name) is not None


METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        TRAIN_EPISODIC_RETURN,
        "scalar",
        "Undiscounted return of training episodes that finished since the last log call (mean). LLM: mean reward per batch.",
    ),
    MetricSpec(
        TRAIN_EPISODE_LENGTH,
        "scalar",
        "Length in steps of those episodes (mean). LLM: mean completion length in tokens.",
    ),
    MetricSpec(TRAIN_LOSS, "scalar", "Total loss of the most recent learning update."),
    MetricSpec(
        "train/<loss_name>",
        "scalar",
        "A component of the loss or another learning statistic, e.g. train/actor_loss, train/critic_loss, train/value_loss, train/entropy, train/kl.",
    ),
    MetricSpec(
        EVAL_MEAN_RETURN,
        "scalar",
        "Mean return over the evaluation episodes of this evaluation round, averaged over the population.",
    ),
    MetricSpec(
        EVAL_BEST_FITNESS,
        "scalar",
        "Best fitness seen so far in the run (running maximum over generations).",
    ),
    MetricSpec(
        HPO_GENERATION, "scalar", "Index of the current generation of the evolutionary loop."
    ),
    MetricSpec(
        f"{HPO_FITNESS_PREFIX}/agent_<id>",
        "scalar",
        "Fitness of agent <id> in the current generation.",
    ),
    MetricSpec(
        HPO_MEAN_FITNESS, "scalar", "Mean fitness of the population in the current generation."
    ),
    MetricSpec(
        HPO_BEST_FITNESS, "scalar", "Best fitness of the population in the current generation."
    ),
    MetricSpec(
        HPO_MUTATION,
        "text",
        "One event per mutation: 'agent_<id>: <description>', e.g. 'agent_3: lr 1.0e-03 -> 1.2e-03'.",
    ),
    MetricSpec(
        f"{HPO_HYPERPARAMETERS_PREFIX}/<name>/agent_<id>",
        "scalar",
        "Current value of hyperparameter <name> for agent <id>.",
    ),
    MetricSpec(
        HPO_LINEAGE,
        "text",
        "One event per child: 'agent_<parent> -> agent_<child>', optionally followed by ': <note>'.",
    ),
    MetricSpec(
        PERF_STEPS_PER_SECOND,
        "scalar",
        "Environment (or token) steps per second of wall time, population total.",
    ),
    MetricSpec(
        PERF_GLOBAL_STEPS, "scalar", "Total environment steps taken so far by the whole population."
    ),
    MetricSpec(
        RUN_CONFIG,
        "text",
        "The run configuration written by log_hyperparameters (secrets removed).",
    ),
)


def is_documented(name: str) -> bool:
    """Whether ``name`` is one of the documented metric names (or an instance of a template)."""
    return any(spec.matches(name) for spec in METRICS)


def metrics_markdown() -> str:
    """Render :data:`METRICS` as a Markdown table for the documentation."""
    lines = ["| Name | Kind | Meaning |", "| --- | --- | --- |"]
    lines += [f"| `{s.name}` | {s.kind} | {s.description} |" for s in METRICS]
    return "\n".join(lines) + "\n"
