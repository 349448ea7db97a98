"""The manifest reference (Markdown), generated from the specs' field docstrings.

`docs/manifest-reference.md` is this output; a test fails when it is stale. Regenerate with
`uv run python -m agile_core.reference > docs/manifest-reference.md`.
"""

from __future__ import annotations

import inspect
import types
import typing
from typing import Any

from pydantic import AliasChoices, BaseModel
from pydantic_core import PydanticUndefined

from agile_core.registry import Paradigm, paradigms
from agile_core.specs.env import GymEnvSpec, WrapperSpec
from agile_core.specs.mutation import MutationProbabilities, MutationSpec, RLHyperparameter
from agile_core.specs.network import (
    CnnConfig,
    LstmConfig,
    MlpConfig,
    MultiInputConfig,
    NetworkSpec,
    SimbaConfig,
)
from agile_core.specs.selection import MultiFrequencySelectionSpec, TournamentSelectionSpec
from agile_core.specs.training import NStepBufferArgs, PerBufferArgs, ReplayBufferSpec, TrainingSpec

SECTIONS: list[tuple[str, list[type[BaseModel]]]] = [
    ("training", [TrainingSpec]),
    ("replay_buffer", [ReplayBufferSpec, NStepBufferArgs, PerBufferArgs]),
    ("mutation", [MutationSpec, MutationProbabilities, RLHyperparameter]),
    ("tournament_selection / selection_strategy", [TournamentSelectionSpec, MultiFrequencySelectionSpec]),
    ("network", [NetworkSpec, MlpConfig, CnnConfig, LstmConfig, SimbaConfig, MultiInputConfig]),
    ("environment (Gymnasium)", [GymEnvSpec, WrapperSpec]),
]
"""Sections every paradigm shares; a paradigm that registers its own `network_spec` gets its
`network` tables from :func:`paradigm_network_specs` instead (core knows no paradigm's specs)."""


def paradigm_network_specs() -> list[tuple[list[Paradigm], list[type[BaseModel]]]]:
    """The `network` specs installed paradigms register in place of core's `NetworkSpec`: for each
    distinct spec, the paradigms that register it and the models to document (the spec, then the
    models its fields nest that no earlier table documents)."""
    documented = {model for _, group in SECTIONS for model in group}
    grouped: dict[type[BaseModel], list[Paradigm]] = {}
    for paradigm in sorted(paradigms().values(), key=lambda p: p.name):
        if paradigm.network_spec not in documented:
            grouped.setdefault(paradigm.network_spec, []).append(paradigm)
    found = []
    for spec, users in grouped.items():
        models = [spec, *(model for model in _with_nested_models(spec)[1:] if model not in documented)]
        documented.update(models)
        found.append((users, models))
    return found


def _with_nested_models(model: type[BaseModel], seen: list[type[BaseModel]] | None = None) -> list[type[BaseModel]]:
    """`model`, then every model its fields' annotations name, depth first, each once."""
    seen = [] if seen is None else seen
    seen.append(model)
    for info in model.model_fields.values():
        for nested in _models_in(info.annotation):
            if nested not in seen:
                _with_nested_models(nested, seen)
    return seen


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if typing.get_origin(annotation) is None and isinstance(annotation, type):
        return [annotation] if issubclass(annotation, BaseModel) else []
    return [model for arg in typing.get_args(annotation) for model in _models_in(arg)]


def _paradigm_network_parts() -> list[str]:
    parts = []
    for users, models in paradigm_network_specs():
        names = [f"`{p.name}`" for p in users]
        listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
        packages = ", ".join(dict.fromkeys(f"`{p.distribution}`" for p in users))
        who = (f"Paradigm {listed} (package {packages}) validates" if len(users) == 1
               else f"Paradigms {listed} (package {packages}) validate")
        parts.append(f"{who} `network` with `{models[0].__name__}` instead of `NetworkSpec`.\n")
        parts.extend(model_table(model) for model in models)
    return parts


def _default(info: Any) -> str:
    if info.default is not PydanticUndefined:
        value = info.default
    elif info.default_factory is not None:
        value = info.default_factory()
        if isinstance(value, BaseModel):
            return f"`{type(value).__name__}()`"
    else:
        return "required"
    if isinstance(value, float) and (abs(value) < 1e-3 or abs(value) >= 1e5) and value != 0:
        return f"`{value:.3g}`"
    return f"`{value!r}`" if value is not None else "`null`"


def _type_name(annotation: Any) -> str:
    """A readable type: `int`, `float | null`, `list[int]`, `'a' | 'b'`, `MlpConfig`."""
    return _render(annotation).replace("|", "\\|")


def _render(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is type(None):
        return "null"
    if origin is typing.Annotated:
        return _render(args[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(dict.fromkeys(_render(arg) for arg in args))
    if origin is typing.Literal:
        return " | ".join(repr(arg) for arg in args)
    if origin in (list, dict, tuple):
        return f"{origin.__name__}[{', '.join(_render(arg) for arg in args)}]"
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def model_table(model: type[BaseModel]) -> str:
    """One Markdown table: field, type, default, description (aliases noted)."""
    doc = inspect.cleandoc(model.__doc__ or "")
    rows = [f"### `{model.__name__}`", "", doc, "", "| field | type | default | description |", "|---|---|---|---|"]
    for name, info in model.model_fields.items():
        alias = info.validation_alias
        names = f"`{name}`"
        if isinstance(alias, AliasChoices):
            others = [c for c in alias.choices if isinstance(c, str) and c != name]
            names += "".join(f" (alias `{o}`)" for o in others)
        description = " ".join((info.description or "").split())
        rows.append(f"| {names} | {_type_name(info.annotation)} | {_default(info)} | {description} |")
    return "\n".join(rows) + "\n"


def manifest_reference_markdown() -> str:
    """The whole manifest reference: sections, then the algorithms of every installed paradigm."""
    parts = [
        "# Manifest reference",
        "",
        "Generated from the specs' field docstrings by `python -m agile_core.reference`; do not edit.",
        "A manifest has two required sections, `algorithm` and `environment`, and optional",
        "`training`, `network`, `mutation`, `tournament_selection` (or `selection_strategy`) and",
        "`replay_buffer`. Unknown keys are errors at every level.",
        "",
    ]
    for title, models in SECTIONS:
        parts.append(f"## `{title}`\n")
        if title == "network":
            parts.append("Validated by `NetworkSpec` unless the algorithm's paradigm registers its own "
                         "network spec (after the `NetworkSpec` tables).\n")
        parts.extend(model_table(model) for model in models)
        if title == "network":
            parts.extend(_paradigm_network_parts())
    parts.append("## `algorithm`\n")
    for paradigm in sorted(paradigms().values(), key=lambda p: p.name):
        parts.append(f"Paradigm `{paradigm.name}` (package `{paradigm.distribution}`).\n")
        parts.extend(model_table(spec) for spec in paradigm.algorithms)
    return "\n".join(parts)


if __name__ == "__main__":
    print(manifest_reference_markdown(), end="")
