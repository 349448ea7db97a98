"""JSON Schema of the manifest, built from every installed paradigm's specs (for editors)."""

from __future__ import annotations

from typing import Annotated, Any, Union

from pydantic import AliasChoices, BaseModel, Field, create_model

from agile_core.registry import paradigms
from agile_core.specs._base import Spec
from agile_core.specs.mutation import MutationSpec
from agile_core.specs.network import NetworkSpec
from agile_core.specs.selection import SelectionStrategySpec
from agile_core.specs.training import ReplayBufferSpec, TrainingSpec


def manifest_json_schema() -> dict[str, Any]:
    """The manifest's JSON Schema; `algorithm` is a union over installed algorithms keyed by `name`."""
    found = list(paradigms().values())
    algorithms = tuple(spec for paradigm in found for spec in paradigm.algorithms)
    envs = tuple(dict.fromkeys(paradigm.env_spec for paradigm in found))
    networks = tuple(dict.fromkeys([NetworkSpec, *(p.network_spec for p in found)]))
    algorithm_type: Any = (
        Annotated[Union[algorithms], Field(discriminator="name")] if len(algorithms) > 1  # noqa: UP007
        else (algorithms[0] if algorithms else dict[str, Any])
    )
    env_type: Any = Union[envs] if envs else dict[str, Any]  # noqa: UP007
    selection_doc = "Selection strategy: tournament (default) or multi_frequency (MF-PBT)."
    network_type: Any = Union[networks] | None  # noqa: UP007
    model = create_model(
        "TrainingManifest",
        __base__=Spec,
        __doc__="An agile training manifest.",
        algorithm=(algorithm_type, Field(description="Algorithm name and hyperparameters.")),
        environment=(env_type, Field(description="Environment section of the algorithm's paradigm.")),
        training=(TrainingSpec | None, Field(None, description="Training loop and population.")),
        network=(network_type, Field(None, description="Network architecture.")),
        mutation=(MutationSpec | None, Field(None, description="Mutation operators and ranges.")),
        selection_strategy=(SelectionStrategySpec | None, Field(None, description=selection_doc)),
        tournament_selection=(SelectionStrategySpec | None, Field(None, description=selection_doc)),
        replay_buffer=(ReplayBufferSpec | None, Field(None, description="Off-policy replay buffer.")),
    )
    schema = model.model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    _add_alias_properties(schema, [TrainingSpec, ReplayBufferSpec])
    return schema


def _add_alias_properties(schema: dict[str, Any], models: list[type[BaseModel]]) -> None:
    """Expose every alternative alias (e.g. `population_size`) as a property too."""
    definitions = schema.get("$defs", {})
    for model in models:
        entry = definitions.get(model.__name__)
        if entry is None:
            continue
        properties = entry.get("properties", {})
        for name, info in model.model_fields.items():
            alias = info.validation_alias
            if not isinstance(alias, AliasChoices):
                continue
            primary = next((c for c in alias.choices if c in properties), name)
            for choice in alias.choices:
                if isinstance(choice, str) and choice not in properties and primary in properties:
                    properties[choice] = {**properties[primary], "description": f"Alias of `{primary}`."}
