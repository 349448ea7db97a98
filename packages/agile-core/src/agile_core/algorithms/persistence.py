"""Saving and restoring agents: safetensors for tensors, JSON for everything else, no pickle.

An agent checkpoint holds the constructor arguments (spaces and networks described in JSON),
each network's mutated architecture and weights, optimizer states, hyperparameters, fitness,
lineage, counters and the state of the agent's own random generators.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from gymnasium import spaces
from pydantic import BaseModel

from agile_core.algorithms.saved_state import (
    check_agent_fields,
    check_weights_fit,
    decode_scores,
    encode_scores,
)
from agile_core.algorithms.spaces import space_from_dict, space_to_dict
from agile_core.checkpoint import (
    CheckpointError,
    capture_generator_state,
    generator_from_state,
    read_checkpoint,
    write_checkpoint,
)
from agile_core.hpo.hyperparameters import HyperparameterConfig
from agile_core.hpo.lineage import Lineage
from agile_core.networks.base import EvolvableModule, from_config

if TYPE_CHECKING:
    from agile_core.algorithms.base import EvolvableAlgorithm

AGENT_KIND = "agent"


# ---------------------------------------------------------------------- constructor arguments
def encode_argument(value: Any) -> Any:
    """JSON form of a constructor argument (spaces, networks, specs, configs, plain values)."""
    if isinstance(value, spaces.Space):
        return {"__space__": space_to_dict(value)}
    if isinstance(value, EvolvableModule):
        return {"__network__": value.config}
    if isinstance(value, HyperparameterConfig):
        return {"__hp_config__": value.to_dict()}
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, torch.device):
        return str(value)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Mapping):
        return {str(k): encode_argument(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [encode_argument(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return {"__unsupported__": type(value).__name__}


def decode_argument(value: Any, device: torch.device | str = "cpu") -> Any:
    """Inverse of `encode_argument` (networks are rebuilt; their weights load separately)."""
    if isinstance(value, dict):
        if "__space__" in value:
            return space_from_dict(value["__space__"])
        if "__network__" in value:
            return from_config(value["__network__"], device=device)
        if "__hp_config__" in value:
            return HyperparameterConfig.from_dict(value["__hp_config__"])
        if "__unsupported__" in value:
            return None
        return {k: decode_argument(v, device) for k, v in value.items()}
    if isinstance(value, list):
        return [decode_argument(v, device) for v in value]
    return value


# ---------------------------------------------------------------------- agent state
def agent_state(agent: EvolvableAlgorithm) -> tuple[dict[str, Any], dict[str, Any]]:
    """(JSON metadata, tensor part) describing `agent` completely."""
    generators = {name: capture_generator_state(value) for name, value in vars(agent).items()
                  if isinstance(value, np.random.Generator)}
    meta = {
        "kind": AGENT_KIND,
        "algorithm": f"{type(agent).__module__}:{type(agent).__qualname__}",
        "init_args": encode_argument(agent._init_args),
        "network_configs": {name: _architecture(getattr(agent, name)) for name in agent.network_names},
        "hyperparameters": encode_argument(agent.hyperparameters()),
        "hp_config": agent.hp_config.to_dict(),
        "index": agent.index,
        "fitness": encode_scores(agent.fitness),
        "scores": encode_scores(agent.scores),
        "steps": int(agent.steps),
        "learn_counter": int(agent.learn_counter),
        "lineage": agent.lineage.to_dict(),
        "mut": agent.mut,
        "generators": generators,
        "extra": agent.extra_state(),
    }
    tensors = {
        "networks": {name: getattr(agent, name).state_dict() for name in agent.network_names},
        "optimizers": {slot.attr: getattr(agent, slot.attr).state_dict() for slot in agent._optimizers},
        "extra": agent.extra_tensors(),
    }
    return meta, tensors


def _architecture(network: Any) -> dict[str, Any] | None:
    """An evolvable network's config; None for a fixed (e.g. pretrained) module."""
    return network.config if isinstance(network, EvolvableModule) else None


def restore_agent(agent: EvolvableAlgorithm, meta: Mapping[str, Any], tensors: Mapping[str, Any],
                  weights_only: bool = False) -> None:
    """Load architecture and weights (and, unless `weights_only`, everything else) into `agent`."""
    _check_agent_meta(meta, agent)
    check_agent_fields(meta)
    for name, config in meta["network_configs"].items():
        if name not in agent.network_names:
            raise CheckpointError(None, f"the checkpoint has a network {name!r} that {type(agent).__name__} lacks")
        network = getattr(agent, name)
        if config is not None and network.config != config:
            network = from_config(config, device=agent.device)
            setattr(agent, name, network)
        check_weights_fit(network, tensors["networks"][name], name)
        network.load_state_dict(tensors["networks"][name])
        network.to(agent.device)
    agent.rebuild_optimizers(keep_state=False)
    agent.after_architecture_change()
    if weights_only:
        return
    for name, value in checked_hyperparameters(agent, decode_argument(meta["hyperparameters"])).items():
        agent.set_hyperparameter(name, value)
    for slot in agent._optimizers:
        getattr(agent, slot.attr).load_state_dict(tensors["optimizers"][slot.attr])
    agent.hp_config = HyperparameterConfig.from_dict(meta["hp_config"])
    agent.index = int(meta["index"])
    agent.fitness = decode_scores(meta["fitness"])
    agent.scores = decode_scores(meta["scores"])
    agent.steps = int(meta["steps"])
    agent.learn_counter = int(meta["learn_counter"])
    agent.lineage = Lineage.from_dict(meta["lineage"])
    agent.mut = str(meta["mut"])
    for name, state in meta["generators"].items():
        setattr(agent, name, generator_from_state(state))
    agent.load_extra_state(meta["extra"], tensors.get("extra") or {})


def checked_hyperparameters(agent: EvolvableAlgorithm, values: Mapping[str, Any]) -> Mapping[str, Any]:
    """`values` when each is one of the agent's hyperparameters and its registered spec's rules
    accept it (ValueError naming the first that is not)."""
    known = agent.hyperparameters()
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ValueError(f"hyperparameters: {type(agent).__name__} has no hyperparameter {unknown[0]!r}")
    spec = type(agent).spec_class
    if spec is not None:
        try:
            spec.from_arguments(values)
        except ValueError as exc:
            raise ValueError(f"hyperparameters.{exc}") from None
    return values


def _check_agent_meta(meta: Mapping[str, Any], agent: EvolvableAlgorithm) -> None:
    if meta.get("kind") != AGENT_KIND:
        raise CheckpointError(None, f"not an agent checkpoint (kind={meta.get('kind')!r})")
    expected = f"{type(agent).__module__}:{type(agent).__qualname__}"
    if meta.get("algorithm") != expected:
        raise CheckpointError(None, f"holds a {meta.get('algorithm')} agent, not {expected}")


def algorithm_class(path: str, base: type) -> type:
    """Resolve a saved `module:Class`, allowing only `base` itself, its subclasses or registered algorithms."""
    if path == f"{base.__module__}:{base.__qualname__}":
        return base
    allowed = {spec.algorithm_class for spec in _registered_specs()}
    if path not in allowed and not any(path == f"{c.__module__}:{c.__qualname__}" for c in _subclasses(base)):
        raise CheckpointError(None, f"refusing to import {path!r}: not a registered agile algorithm")
    module_name, _, qualname = path.partition(":")
    target: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        target = getattr(target, part)
    if not (isinstance(target, type) and issubclass(target, base)):
        raise CheckpointError(None, f"{path} is not a {base.__name__}")
    return target


def _registered_specs() -> list[Any]:
    from agile_core.registry import paradigms

    return [spec for paradigm in paradigms().values() for spec in paradigm.algorithms]


def _subclasses(cls: type) -> list[type]:
    found: list[type] = []
    subclasses: list[type] = cls.__subclasses__()
    for sub in subclasses:
        found.append(sub)
        found.extend(_subclasses(sub))
    return found


def save_agent(agent: EvolvableAlgorithm, path: str | Path) -> Path:
    """Write one agent as a checkpoint directory (atomically)."""
    meta, tensors = agent_state(agent)
    return write_checkpoint(path, {"agent": tensors}, metadata=meta, step=int(agent.steps))


def read_agent(path: str | Path, device: torch.device | str = "cpu") -> tuple[dict[str, Any], dict[str, Any]]:
    """(metadata, tensors) of an agent checkpoint; CheckpointError for anything else."""
    with read_checkpoint(path, map_location=device) as checkpoint:
        meta = checkpoint.metadata
        if meta.get("kind") != AGENT_KIND or "agent" not in checkpoint.part_names:
            raise CheckpointError(str(path), "not an agent checkpoint")
        return meta, checkpoint.part("agent")
