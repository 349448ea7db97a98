"""Selection-strategy section of a manifest: tournament selection or multi-frequency PBT."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag

from agile_core.specs._base import Spec

NonNegInt = Annotated[int, Field(ge=0)]


class TournamentSelectionSpec(Spec):
    """Tournament selection: keep the elite, fill the other slots with tournament winners."""

    strategy: Literal["tournament"] = "tournament"
    """Selection kind."""
    tournament_size: Annotated[int, Field(ge=2)] = 2
    """Agents drawn into each tournament (at least 2, at most the population size)."""
    elitism: bool = True
    """Keep the best agent unchanged into the next generation."""


class MultiFrequencySelectionSpec(Spec):
    """Multiple-frequencies population-based training (MF-PBT, Doulazmi et al. 2025).

    The population is split into subpopulations that evolve at different frequencies. Counts left
    null are resolved against `training.pop_size` (S agents per subpopulation): winners round(S/4),
    survivors 0, open-for-migration round(S/4), losers the rest.
    """

    strategy: Literal["multi_frequency"] = "multi_frequency"
    """Selection kind."""
    n_subpopulations: Annotated[int, Field(ge=1)] = 2
    """Number of subpopulations (pop_size must be divisible by it)."""
    n_winners: NonNegInt | None = None
    """Best agents of a subpopulation, whose clones replace the losers."""
    n_survivors: NonNegInt | None = None
    """Agents kept unchanged, neither cloned nor replaced."""
    n_open_for_migration: NonNegInt | None = None
    """Agents that fitter agents of other subpopulations may replace."""
    n_losers: NonNegInt | None = None
    """Worst agents, replaced by mutated clones of the winners."""
    evolution_frequency_ratios: list[Annotated[int, Field(ge=1)]] | None = None
    """Subpopulation i evolves every ratios[i] evolution steps ([1, 5, 10, 15, ...] when null)."""

    def resolve(self, pop_size: int) -> MultiFrequencySelectionSpec:
        """Return a copy with every count and ratio filled in and checked against `pop_size`."""
        from agile_core.hpo.multi_frequency import resolve_multi_frequency_layout

        layout = resolve_multi_frequency_layout(
            pop_size=pop_size,
            n_subpopulations=self.n_subpopulations,
            n_winners=self.n_winners,
            n_survivors=self.n_survivors,
            n_open_for_migration=self.n_open_for_migration,
            n_losers=self.n_losers,
            ratios=self.evolution_frequency_ratios,
        )
        return self.model_copy(update=_layout_fields(layout))


def _layout_fields(layout: dict[str, Any]) -> dict[str, Any]:
    names = ("n_winners", "n_survivors", "n_open_for_migration", "n_losers")
    fields = {name: layout[name] for name in names}
    fields["evolution_frequency_ratios"] = list(layout["ratios"])
    return fields


def _strategy_of(value: Any) -> str:
    if isinstance(value, dict):
        return str(value.get("strategy", "tournament"))
    return str(getattr(value, "strategy", "tournament"))


SelectionStrategySpec = Annotated[
    Annotated[TournamentSelectionSpec, Tag("tournament")]
    | Annotated[MultiFrequencySelectionSpec, Tag("multi_frequency")],
    Discriminator(_strategy_of, custom_error_type="invalid_strategy",
                  custom_error_message="strategy must be 'tournament' or 'multi_frequency'"),
]
"""A selection strategy, chosen by its `strategy` field (tournament when omitted)."""
