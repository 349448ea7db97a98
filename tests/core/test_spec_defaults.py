"""Every default has one home: each registered algorithm's constructor defaults are its spec's."""

from __future__ import annotations

import importlib
import inspect

import pytest
from pydantic import BaseModel

from agile_core import registry


def implemented() -> list[str]:
    """Registered algorithms implemented by a class of the same name (spec variants such as
    RecurrentPPO set other defaults for the same class through the manifest)."""
    return [name for name in registry.algorithm_names()
            if registry.algorithm_spec(name).algorithm_class.endswith(f":{name}")]


@pytest.mark.parametrize("name", implemented())
def test_constructor_defaults_are_the_registered_spec_defaults(name: str) -> None:
    spec = registry.algorithm_spec(name)
    module, class_name = spec.algorithm_class.split(":")
    cls = getattr(importlib.import_module(module), class_name)
    parameters: dict[str, inspect.Parameter] = {}
    for klass in reversed(cls.__mro__):  # keywords a subclass passes on reach its base's constructor
        init = vars(klass).get("__init__")
        if init is not None:
            parameters.update(inspect.signature(init).parameters)
    for field, default in spec.defaults().items():
        assert field in parameters, f"{name}: {field} is not a constructor argument"
        if isinstance(default, BaseModel):  # a nested section: None in the signature means the spec's default
            assert parameters[field].default is None, f"{name}.{field}: a section's constructor default is None"
            continue
        assert parameters[field].default == default, f"{name}.{field}: spec {default!r}, code {parameters[field].default!r}"


def test_every_shipped_algorithm_is_checked() -> None:
    assert {"DQN", "RainbowDQN", "DDPG", "TD3", "PPO"} <= set(implemented())
