"""Training-loop section of a manifest and the replay buffer section."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AliasChoices, Field, model_validator

from agile_core.specs._base import PrintableStr, Spec, field_error

MAX_SEED = 2**32 - 1
"""Largest seed: every generator (numpy, torch, Gymnasium) takes seeds in [0, 2**32)."""
MAX_POPULATION = 4096
"""Largest population: a sanity bound, far above what one machine trains."""
PositiveInt = Annotated[int, Field(ge=1)]
Probability = Annotated[float, Field(ge=0.0, le=1.0)]


class NStepBufferArgs(Spec):
    """Settings of the n-step replay buffer."""

    n_step: PositiveInt = 3
    """Number of environment steps summed into each discounted return."""


class PerBufferArgs(Spec):
    """Settings of the prioritized experience replay (PER) buffer."""

    alpha: Annotated[float, Field(ge=0.0, le=1.0)] = 0.6
    """Priority exponent: 0 samples uniformly, 1 fully proportionally to |TD error|."""


class ReplayBufferSpec(Spec):
    """Off-policy experience storage: size, n-step returns, prioritized replay."""

    max_size: PositiveInt = Field(
        default=100_000, validation_alias=AliasChoices("max_size", "memory_size")
    )
    """Transitions kept before the oldest are overwritten (alias: `memory_size`)."""
    standard_buffer: bool = True
    """Use a uniform replay buffer (the default kind)."""
    n_step_buffer: bool = False
    """Store n-step discounted returns (see `n_step_buffer_args`)."""
    n_step_buffer_args: NStepBufferArgs = Field(default_factory=NStepBufferArgs)
    """Arguments of the n-step buffer."""
    per_buffer: bool = False
    """Sample transitions in proportion to their priority (prioritized experience replay)."""
    per_buffer_args: PerBufferArgs = Field(default_factory=PerBufferArgs)
    """Arguments of the prioritized buffer."""
    n_step: PositiveInt | None = None
    """Shortcut for `n_step_buffer_args.n_step`; setting it turns `n_step_buffer` on."""

    @model_validator(mode="after")
    def _apply_n_step_shortcut(self) -> ReplayBufferSpec:
        if self.n_step is not None and self.n_step_buffer_args.n_step != self.n_step:
            object.__setattr__(self, "n_step_buffer_args", NStepBufferArgs(n_step=self.n_step))
            object.__setattr__(self, "n_step_buffer", True)
        return self

    def init_buffer(self, algo_spec: Any, device: Any = "cpu", **spaces: Any) -> Any:
        """Build the main buffer for `algo_spec` through its paradigm (PER when `per_buffer`);
        pass `observation_space=` and `action_space=` (the buffer is preallocated from them)."""
        from agile_core.registry import paradigm_of

        factory = paradigm_of(algo_spec.name).make_replay_buffer
        return _sized(factory, self, algo_spec, device, n_step=False, **spaces)

    def init_n_step_buffer(self, algo_spec: Any, device: Any = "cpu", **spaces: Any) -> Any:
        """Build the n-step buffer paired with a PER buffer; None unless both are switched on."""
        if not (self.per_buffer and self.n_step_buffer):
            return None
        from agile_core.registry import paradigm_of

        factory = paradigm_of(algo_spec.name).make_replay_buffer
        return _sized(factory, self, algo_spec, device, n_step=True, **spaces)


def _sized(factory: Any, spec: ReplayBufferSpec, *args: Any, **kwargs: Any) -> Any:
    """`factory(spec, ...)`, with a buffer too large for this machine reported against `max_size`."""
    from agile_core.buffers.memory import BufferTooLargeError
    from agile_core.errors import ManifestError, ManifestIssue

    try:
        return factory(spec, *args, **kwargs)
    except BufferTooLargeError as exc:
        raise ManifestError([ManifestIssue(("replay_buffer", "max_size"), str(exc), spec.max_size)]) from None


class TrainingSpec(Spec):
    """The population training loop: budget, evolution schedule, evaluation, checkpoints."""

    max_steps: PositiveInt = 1_000_000
    """Environment steps each agent takes (summed over its vector sub-environments)."""
    evo_steps: PositiveInt | None = None
    """Steps each agent takes between evolutions (paradigm default when null: 10,000 for RL)."""
    pop_size: Annotated[int, Field(ge=1, le=MAX_POPULATION)] = Field(
        default=1, validation_alias=AliasChoices("pop_size", "population_size"))
    """Number of agents in the population (alias: `population_size`)."""
    eval_steps: PositiveInt | None = None
    """Step limit of each evaluation episode (until the episode ends when null; an episode that
    has not ended after 27,000 steps then stops the run with an error naming this field)."""
    eval_loop: PositiveInt = 1
    """Evaluation episodes averaged into each fitness score."""
    replay_buffer: ReplayBufferSpec | None = None
    """Replay buffer; the manifest's top-level `replay_buffer` section is preferred."""
    hpo: bool = True
    """Evolve the population (mutation and selection) between training phases."""
    target_score: float | None = None
    """Stop early once every agent's recent fitness reaches this score."""
    learning_delay: Annotated[int, Field(ge=0)] = 0
    """Environment steps per agent before learning starts (buffer warm-up)."""
    eps_start: Probability | None = None
    """Initial epsilon of epsilon-greedy exploration (DQN-style algorithms; default 1.0)."""
    eps_end: Probability | None = None
    """Final epsilon (DQN-style algorithms; default 0.01)."""
    eps_decay: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    """Multiplicative epsilon decay per vector step (DQN-style algorithms; default 0.999)."""
    checkpoint_steps: PositiveInt | None = None
    """Save a population checkpoint every this many steps per agent (off when null; `agile train`
    also saves one when the run ends)."""
    checkpoint_path: PrintableStr | None = None
    """Directory for checkpoints (the run directory's `checkpoints/` when null)."""
    overwrite_checkpoints: bool = False
    """Keep only the latest checkpoint instead of one per checkpoint step."""
    evaluation_interval: PositiveInt = 10
    """Training iterations between evaluations (LLM and bandit loops)."""
    num_epochs: PositiveInt | None = None
    """Passes over the dataset (dataset-driven loops); takes precedence over `max_steps`."""
    episode_steps: PositiveInt = 500
    """Steps per training episode (bandits only)."""
    sum_scores: bool = True
    """Sum the sub-agents' scores into one fitness (multi-agent only)."""
    reporting_interval: PositiveInt = 1024
    """Steps between progress reports and metric flushes."""
    experience_sharing: bool = False
    """Share experience between the agents of the population (single replay buffer)."""
    seed: Annotated[int, Field(ge=0, le=MAX_SEED)] | None = None
    """Seed for environments, networks and sampling; runs with the same seed repeat (agile addition)."""
    batch_population: bool = True
    """Step the whole population in one vector env and run agents that share an architecture as
    one stacked network computation (every algorithm with a population-shaped learning step: the
    off-policy, on-policy, offline, bandit and multi-agent ones; LLM members train one by one).
    Each agent keeps its own hyperparameters exactly; set false to train agent by agent (agile
    addition)."""

    @model_validator(mode="after")
    def _check_schedule(self) -> TrainingSpec:
        if self.evo_steps is not None and self.evo_steps > self.max_steps:
            raise field_error(
                "evo_steps",
                f"must not exceed max_steps ({self.max_steps}): the population would never evolve",
            )
        if self.eps_start is not None and self.eps_end is not None and self.eps_end > self.eps_start:
            raise field_error("eps_end", f"must not exceed eps_start ({self.eps_start})")
        return self


COMMON_TRAINING_FIELDS = frozenset({
    "max_steps", "evo_steps", "pop_size", "eval_steps", "eval_loop", "hpo", "target_score", "checkpoint_steps",
    "checkpoint_path", "overwrite_checkpoints", "seed", "batch_population",
})
"""`training` fields every paradigm's loop reads; the others belong to the paradigms that declare
them (``Paradigm.training_fields``)."""
