"""Observation-space dispatch: choose and build the encoder for an observation space."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from gymnasium import spaces

from agile_core.networks.cnn import EvolvableCNN
from agile_core.networks.lstm import EvolvableLSTM
from agile_core.networks.mlp import EvolvableMLP
from agile_core.networks.multi_input import EvolvableMultiInput
from agile_core.networks.simba import EvolvableSimBa
from agile_core.networks.spaces import (
    COMPOSITE_SPACES,
    VECTOR_SPACES,
    feature_shape,
    flat_dim,
    is_image_space,
)
from agile_core.specs.network import (
    CnnConfig,
    LstmConfig,
    MlpConfig,
    MultiInputConfig,
    NetworkSpec,
    SimbaConfig,
)

Encoder = EvolvableMLP | EvolvableCNN | EvolvableLSTM | EvolvableMultiInput | EvolvableSimBa
"""Any encoder: maps an observation to a latent vector and can resize that latent vector."""

EncoderSpec = MlpConfig | CnnConfig | LstmConfig | MultiInputConfig | SimbaConfig

_DEFAULT_CONFIGS: dict[str, type[EncoderSpec]] = {
    "mlp": MlpConfig, "cnn": CnnConfig, "lstm": LstmConfig, "multiinput": MultiInputConfig, "simba": SimbaConfig,
}


def as_network_spec(net_spec: NetworkSpec | Mapping[str, Any] | None) -> NetworkSpec:
    """A validated :class:`NetworkSpec` from a spec, its dict, or None (all defaults)."""
    if isinstance(net_spec, NetworkSpec):
        return net_spec
    return NetworkSpec.model_validate(dict(net_spec or {}))


def infer_arch(observation_space: spaces.Space, recurrent: bool = False, simba: bool = False) -> str:
    """Encoder kind for a space: Dict/Tuple -> multiinput, 3-D Box -> cnn, recurrent -> lstm, else
    mlp (simba with `simba`: a SimBa encoder for vector spaces, which a recurrent network refuses)."""
    if recurrent and simba:
        raise ValueError("a recurrent network needs an 'lstm' encoder; network.simba: true asks for a SimBa "
                         "encoder, which has no recurrent version (set simba: false or recurrent: false)")
    if recurrent:
        if isinstance(observation_space, COMPOSITE_SPACES) or is_image_space(observation_space):
            raise ValueError(f"recurrent (lstm) encoders support vector observation spaces only, got {observation_space}")
        return "lstm"
    if isinstance(observation_space, COMPOSITE_SPACES):
        return "multiinput"
    if is_image_space(observation_space):
        return "cnn"
    if isinstance(observation_space, VECTOR_SPACES):
        return "simba" if simba else "mlp"
    raise ValueError(f"no encoder for observation space {observation_space}")


def _fits(observation_space: spaces.Space, arch: str) -> bool:
    if arch == "multiinput":
        return isinstance(observation_space, COMPOSITE_SPACES)
    if arch == "cnn":
        return isinstance(observation_space, spaces.Box) and len(observation_space.shape) in (2, 3)
    if arch in ("lstm", "simba"):
        return isinstance(observation_space, VECTOR_SPACES) and not is_image_space(observation_space)
    if arch == "mlp":
        return isinstance(observation_space, VECTOR_SPACES)
    return False


def check_arch(observation_space: spaces.Space, arch: str) -> None:
    """Raise a ValueError naming the space and the arch when `arch` cannot encode the space."""
    if not _fits(observation_space, arch):
        needs = {
            "mlp": "a Box, Discrete, MultiDiscrete or MultiBinary space",
            "simba": "a non-image Box, Discrete, MultiDiscrete or MultiBinary space",
            "cnn": "a 3-D (C, H, W) or 2-D (H, W) Box",
            "lstm": "a non-image Box, Discrete, MultiDiscrete or MultiBinary space",
            "multiinput": "a Dict or Tuple space",
        }.get(arch, "a known arch ('mlp', 'cnn', 'lstm', 'simba', 'multiinput')")
        raise ValueError(f"encoder arch '{arch}' does not fit observation space {observation_space}: "
                         f"'{arch}' needs {needs}")


def resolve_encoder_config(observation_space: spaces.Space, net_spec: NetworkSpec | Mapping[str, Any] | None,
                           recurrent: bool = False) -> EncoderSpec:
    """The encoder config to build: the given one (its `arch` wins), or the default for the space.

    An MLP or CNN config given without an explicit `arch` for a Dict/Tuple space configures the
    matching part of the multi-input encoder. ``network.simba: true`` without an encoder config
    means SimBa defaults for a vector space (image and Dict/Tuple spaces keep their CNN and
    multi-input encoders); a recurrent network with a SimBa encoder is a ValueError.
    """
    spec = as_network_spec(net_spec)
    config = spec.encoder_config
    if config is None:
        return _DEFAULT_CONFIGS[infer_arch(observation_space, recurrent, simba=spec.simba)]()
    explicit = "arch" in config.model_fields_set
    if not explicit and isinstance(observation_space, COMPOSITE_SPACES) and isinstance(config, MlpConfig):
        config = MultiInputConfig(mlp_config=config)
    elif not explicit and isinstance(observation_space, COMPOSITE_SPACES) and isinstance(config, CnnConfig):
        config = MultiInputConfig(cnn_config=config)
    if recurrent and config.arch != "lstm":
        hint = " (network.simba: true asks for a SimBa encoder, which has no recurrent version)" \
            if config.arch == "simba" else ""
        raise ValueError(f"a recurrent network needs an 'lstm' encoder, but encoder_config.arch is "
                         f"'{config.arch}' (observation space {observation_space}){hint}")
    check_arch(observation_space, config.arch)
    return config


def build_encoder(
    observation_space: spaces.Space,
    net_spec: NetworkSpec | Mapping[str, Any] | None = None,
    recurrent: bool = False,
    latent_dim: int | None = None,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> Encoder:
    """Build the encoder mapping observations of `observation_space` to `latent_dim` features.

    Box vectors (any shape, flattened) -> MLP; 3-D Box images -> CNN (2-D Box with an explicit
    ``arch: cnn``, as one channel); Dict/Tuple -> multi-input; Discrete -> MLP on the one-hot;
    MultiDiscrete/MultiBinary -> MLP on the float vector; `recurrent` -> LSTM; a SimBa config (or
    ``simba: true``) -> SimBa on the flattened vector. `latent_dim` defaults to the spec's.
    """
    spec = as_network_spec(net_spec)
    config = resolve_encoder_config(observation_space, spec, recurrent)
    latent = spec.latent_dim if latent_dim is None else int(latent_dim)
    encoder: Encoder
    if isinstance(config, MultiInputConfig):
        assert isinstance(observation_space, COMPOSITE_SPACES)
        encoder = EvolvableMultiInput.from_space(observation_space, latent, config)
    elif isinstance(config, CnnConfig):
        encoder = EvolvableCNN.from_spec(config, tuple(observation_space.shape or ()), latent)
    elif isinstance(config, SimbaConfig):
        encoder = EvolvableSimBa.from_spec(config, flat_dim(observation_space), latent,
                                           input_shape=feature_shape(observation_space))
    elif isinstance(config, LstmConfig):
        encoder = EvolvableLSTM.from_spec(config, flat_dim(observation_space), latent,
                                          input_shape=feature_shape(observation_space))
    else:
        encoder = EvolvableMLP.from_spec(config, flat_dim(observation_space), latent,
                                         input_shape=feature_shape(observation_space))
    if device is not None or dtype is not None:
        encoder.to(device=device, dtype=dtype)
    return encoder
