"""Base of every algorithm section; paradigm packages subclass it once per algorithm."""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, Self, get_args, get_origin

from pydantic import Field, ValidationError

from agile_core.specs._base import Spec
from agile_core.specs.mutation import MutationSpec, RLHyperparameter

MAX_UPDATE_EPOCHS = 1000
"""Most passes over one batch of experience an algorithm may make (far above any published
setting; a typo such as 1e6 would otherwise run for days)."""

UpdateEpochs = Annotated[int, Field(ge=1, le=MAX_UPDATE_EPOCHS)]
"""The type of an `update_epochs` field: 1 to `MAX_UPDATE_EPOCHS`."""


class Mutable:
    """Annotation marker of a hyperparameter each member holds as its own attribute, which RL
    hyperparameter mutation may change during a run: ``lr: Annotated[float, Field(gt=0), MUTABLE]``.
    Marked hyperparameters are saved with the agent and reported per generation."""

    def __repr__(self) -> str:
        return "MUTABLE"


MUTABLE = Mutable()
"""The :class:`Mutable` marker."""


class AlgorithmSpec(Spec):
    """Hyperparameters of one algorithm, dispatched by its exact, case-sensitive `name`.

    Subclasses declare `name: Literal["ALGO"]` and one field per hyperparameter (with a docstring),
    and set `algorithm_class` to the dotted path of the class that implements it.
    """

    name: str = Field(min_length=1)
    """Registered algorithm name (case-sensitive), e.g. `DQN`."""
    cudagraphs: bool = False
    """Accepted for manifests written for the reference trainer (its CUDA-graph capture switch);
    agile does not capture CUDA graphs, so `true` is ignored with a warning."""

    algorithm_class: ClassVar[str] = ""
    """`module:Class` of the implementation, imported only when training starts."""
    mutable_by_default: ClassVar[tuple[str, ...]] = ("lr", "batch_size", "learn_step")
    """Hyperparameters that mutate when the manifest gives no `rl_hp_selection`."""
    default_evo_steps: ClassVar[int] = 10_000
    """Evolution interval used when `training.evo_steps` is null."""
    default_ranges: ClassVar[dict[str, tuple[float, float]]] = {}
    """Per-hyperparameter default mutation ranges overriding the generic [v/10, v*10] rule."""
    switches: ClassVar[frozenset[str]] = frozenset({"name", "cudagraphs"})
    """Fields that are not hyperparameters of the algorithm's constructor."""
    mutation_operators: ClassVar[frozenset[str] | None] = None
    """Mutation operators (`no_mut`, `arch_mut`, `params_mut`, `act_mut`, `rl_hp_mut`) this
    algorithm's members can apply; None: all. The manifest's weights of the others resolve to 0,
    and setting them draws a warning."""

    @classmethod
    def registered_name(cls) -> str:
        """The literal name this spec is registered under."""
        args = get_args(cls.model_fields["name"].annotation)
        return str(args[0]) if args else cls.__name__.removesuffix("Spec")

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """Every hyperparameter's default (without `name`): the one home of an algorithm's
        defaults, which its constructor's keyword defaults are read from."""
        return {field_name: info.get_default(call_default_factory=True)
                for field_name, info in cls.model_fields.items() if field_name not in cls.switches}

    @classmethod
    def mutable_hyperparameters(cls) -> tuple[str, ...]:
        """The hyperparameters marked :data:`MUTABLE`, in declaration order."""
        return tuple(name for name, info in cls.model_fields.items()
                     if any(isinstance(item, Mutable) for item in info.metadata))

    @classmethod
    def numeric_hyperparameters(cls) -> dict[str, type]:
        """Every int or float hyperparameter (bool excluded), with its numeric type."""
        found: dict[str, type] = {}
        for field_name, info in cls.model_fields.items():
            kind = _numeric_kind(info.annotation)
            if kind is not None:
                found[field_name] = kind
        return found

    def section_issues(self, sections: Mapping[str, Any]) -> list[tuple[tuple[str, ...], str, Any]]:
        """Rules between this algorithm and the manifest's other validated sections (`environment`,
        `network`, `replay_buffer`, `training`, ... as specs; absent ones missing): one
        ``(path, message, value)`` per problem. Subclasses extend it with their own rules."""
        issues: list[tuple[tuple[str, ...], str, Any]] = []
        encoder = getattr(sections.get("network"), "encoder_config", None)
        if getattr(encoder, "arch", None) == "lstm" and not getattr(self, "recurrent", False):
            message = ("an LSTM encoder needs a recurrent policy: set algorithm.recurrent: true"
                       if "recurrent" in type(self).model_fields else
                       f"{self.registered_name()} has no recurrent policy; use an mlp, cnn or multiinput encoder")
            issues.append((("network", "encoder_config", "arch"), message, "lstm"))
        return issues

    def section_warnings(self, sections: Mapping[str, Any]) -> list[tuple[tuple[str, ...], str, Any]]:
        """Like :meth:`section_issues`, for settings that are valid but cannot do what they say
        (e.g. a warm-up longer than the budget): reported as warnings. By default, the mutation
        settings of operators outside :attr:`mutation_operators`."""
        operators = type(self).mutation_operators
        mutation = sections.get("mutation")
        if operators is None or not isinstance(mutation, MutationSpec):
            return []
        algorithm = self.registered_name()
        applied = ", ".join(sorted(operators - {"no_mut"})) or "nothing"
        warnings = []
        for path, value, operator in mutation.unusable_fields(operators):
            if path[-1] == operator:
                message = f"{algorithm} cannot apply {operator} (it mutates {applied} only); ignored, resolved to 0"
            else:
                message = f"only used by {operator}, which {algorithm} cannot apply; ignored"
                if path[0] == "probabilities":
                    message += ", resolved to 0"
            warnings.append((("mutation", *path), message, value))
        return warnings

    @classmethod
    def from_arguments(cls, values: Mapping[str, Any]) -> Self:
        """The spec of an algorithm constructor's arguments, checked by the rules manifests meet:
        a ValueError naming the first value it rejects. Names the spec lacks are ignored."""
        data = {name: values[name] for name in cls.model_fields if name not in cls.switches and name in values}
        for name, kind in cls.numeric_hyperparameters().items():
            if kind is int and isinstance(data.get(name), bool):
                raise ValueError(f"{name}: input should be an integer, not a boolean (got {data[name]!r})")
        try:
            return cls.model_validate(data)
        except ValidationError as error:
            first = error.errors()[0]
            located = first.get("ctx", {}).get("field")  # a cross-field check names its field
            where = located or ".".join(str(part) for part in first["loc"])
            value = data.get(located) if located else first.get("input")
            raise ValueError(f"{where}: {first['msg'].lower()} (got {value!r})") from None

    def hyperparameters(self) -> dict[str, Any]:
        """The hyperparameters as plain values (without `name` and the other `switches`)."""
        return self.model_dump(exclude=set(self.switches))

    def field_warnings(self) -> list[tuple[tuple[str | int, ...], str, Any]]:
        """`cudagraphs: true` does nothing here."""
        warnings = super().field_warnings()
        if self.cudagraphs:
            warnings.append((("cudagraphs",), "agile does not capture CUDA graphs; ignored", True))
        return warnings

    def default_rl_hp_selection(self) -> dict[str, RLHyperparameter]:
        """Mutation ranges used when the manifest gives none: [v/10, v*10] (floats, factors
        1.2/0.8) and [max(1, v//4), v*4] (integers, factors 1.5/0.75) around the current value."""
        numeric = self.numeric_hyperparameters()
        ranges: dict[str, RLHyperparameter] = {}
        for hp in self.mutable_by_default:
            if hp not in numeric:
                continue
            value = getattr(self, hp)
            if hp in self.default_ranges:
                low, high = self.default_ranges[hp]
            elif numeric[hp] is int:
                low, high = max(1, int(value) // 4), int(value) * 4
            else:
                low, high = float(value) / 10, float(value) * 10
            ranges[hp] = RLHyperparameter(min=low, max=high)
        return ranges


def _numeric_kind(annotation: Any) -> type | None:
    """Return int or float when the annotation is (optionally Annotated/Optional) int or float."""
    origin = get_origin(annotation)
    if origin is typing.Annotated:
        return _numeric_kind(get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        kinds = {_numeric_kind(arg) for arg in get_args(annotation) if arg is not type(None)}
        kinds.discard(None)
        if kinds == {int}:
            return int
        return float if kinds and kinds <= {int, float} else None
    if origin is Literal:
        return None
    if annotation is bool:
        return None
    if annotation in (int, float):
        return annotation
    return None
