"""Evolvable torch networks: encoders (MLP, CNN, LSTM, SimBa, multi-input), RL heads and their mutations.

Every module is an :class:`EvolvableModule`: ``config`` (JSON) and :func:`from_config` rebuild
the architecture, ``clone()`` deep-copies, ``mutation_methods()`` lists the mutations available
now and ``mutate(name, rng, **kwargs)`` applies one and returns its resolved parameters for
exact replay on another network of the same shape. Growing mutations are function-preserving.
"""

from agile_core.networks.activations import ACTIVATION_NAMES, MUTATION_ACTIVATIONS, make_activation
from agile_core.networks.actors import DeterministicActor, StochasticActor
from agile_core.networks.base import (
    MUTATION_KINDS,
    EvolvableModule,
    MutationError,
    MutationKind,
    from_config,
    mutation,
    registered_types,
)
from agile_core.networks.cnn import EvolvableCNN
from agile_core.networks.distributions import (
    ActionDistribution,
    BernoulliDistribution,
    CategoricalDistribution,
    DiagGaussianDistribution,
    MultiCategoricalDistribution,
)
from agile_core.networks.encoders import (
    Encoder,
    as_network_spec,
    build_encoder,
    check_arch,
    infer_arch,
    resolve_encoder_config,
)
from agile_core.networks.layers import ChannelLayerNorm, ConvBlock, DenseBlock
from agile_core.networks.lstm import EvolvableLSTM, HiddenState
from agile_core.networks.mlp import EvolvableMLP
from agile_core.networks.multi_input import EvolvableMultiInput
from agile_core.networks.network import EvolvableNetwork, build_head
from agile_core.networks.noisy import NoisyLinear, mean_weights
from agile_core.networks.preprocessing import (
    Observation,
    preprocess_observation,
    preprocess_population_observation,
    preprocess_tensor_observation,
)
from agile_core.networks.q_networks import ContinuousQNetwork, QNetwork, RainbowQNetwork
from agile_core.networks.simba import EvolvableSimBa, SimbaBlock
from agile_core.networks.value import ValueNetwork

__all__ = [
    "ACTIVATION_NAMES",
    "MUTATION_ACTIVATIONS",
    "MUTATION_KINDS",
    "ActionDistribution",
    "BernoulliDistribution",
    "CategoricalDistribution",
    "ChannelLayerNorm",
    "ContinuousQNetwork",
    "ConvBlock",
    "DenseBlock",
    "DeterministicActor",
    "DiagGaussianDistribution",
    "Encoder",
    "EvolvableCNN",
    "EvolvableLSTM",
    "EvolvableMLP",
    "EvolvableModule",
    "EvolvableMultiInput",
    "EvolvableNetwork",
    "EvolvableSimBa",
    "HiddenState",
    "MultiCategoricalDistribution",
    "MutationError",
    "MutationKind",
    "NoisyLinear",
    "Observation",
    "QNetwork",
    "RainbowQNetwork",
    "SimbaBlock",
    "StochasticActor",
    "ValueNetwork",
    "as_network_spec",
    "build_encoder",
    "build_head",
    "check_arch",
    "from_config",
    "infer_arch",
    "make_activation",
    "mean_weights",
    "mutation",
    "preprocess_observation",
    "preprocess_population_observation",
    "preprocess_tensor_observation",
    "registered_types",
    "resolve_encoder_config",
]
