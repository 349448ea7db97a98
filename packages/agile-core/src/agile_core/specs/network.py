"""Network section of a manifest: evolvable encoder and head architectures with mutation bounds."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, model_validator

from agile_core.specs._base import Spec, field_error

ActivationName = Literal[
    "ReLU", "Tanh", "GELU", "ELU", "LeakyReLU", "Sigmoid", "Softplus", "Softmax", "PReLU", "Identity"
]
"""Activation functions an evolvable network may use (torch.nn class names)."""

PositiveInt = Annotated[int, Field(ge=1)]


class MlpConfig(Spec):
    """A multi-layer perceptron: used for vector observations and for every network head."""

    arch: Literal["mlp"] = "mlp"
    """Encoder kind; inferred from the observation space when omitted."""
    hidden_size: list[PositiveInt] = Field(default_factory=lambda: [64], min_length=1)
    """Width of each hidden layer, input side first."""
    activation: ActivationName = "ReLU"
    """Activation after each hidden layer."""
    output_activation: ActivationName | None = None
    """Activation applied to the output layer (none when null)."""
    layer_norm: bool = True
    """Apply LayerNorm after each hidden layer (before the activation)."""
    init_layers: bool = False
    """Initialise every linear layer orthogonally (gain sqrt 2, zero bias) instead of with
    PyTorch's default uniform initialisation."""
    output_vanish: bool = False
    """Scale the output layer's initial weights and bias by 0.1, so the network starts close to
    a neutral (near-zero) output."""
    min_hidden_layers: PositiveInt = 1
    """Fewest hidden layers architecture mutation may leave."""
    max_hidden_layers: PositiveInt = 6
    """Most hidden layers architecture mutation may create."""
    min_mlp_nodes: PositiveInt = 8
    """Narrowest hidden layer node mutation may leave."""
    max_mlp_nodes: PositiveInt = 256
    """Widest hidden layer node mutation may create."""

    @model_validator(mode="after")
    def _within_bounds(self) -> MlpConfig:
        _check_bounds(self.min_hidden_layers, self.max_hidden_layers, "hidden_layers")
        _check_bounds(self.min_mlp_nodes, self.max_mlp_nodes, "mlp_nodes")
        _check_count("hidden_size", len(self.hidden_size), self.min_hidden_layers, self.max_hidden_layers)
        _check_sizes("hidden_size", self.hidden_size, self.min_mlp_nodes, self.max_mlp_nodes, "mlp_nodes")
        return self


class CnnConfig(Spec):
    """A convolutional encoder for image observations (channels-first, HxW)."""

    arch: Literal["cnn"] = "cnn"
    """Encoder kind; inferred from the observation space when omitted."""
    channel_size: list[PositiveInt] = Field(default_factory=lambda: [16, 32], min_length=1)
    """Output channels of each convolution."""
    kernel_size: list[PositiveInt] = Field(default_factory=lambda: [8, 4], min_length=1)
    """Kernel size of each convolution (square)."""
    stride_size: list[PositiveInt] = Field(default_factory=lambda: [4, 2], min_length=1)
    """Stride of each convolution."""
    activation: ActivationName = "ReLU"
    """Activation after each convolution."""
    layer_norm: bool = False
    """Apply a channel-wise LayerNorm (GroupNorm with one group) after each convolution."""
    init_layers: bool = False
    """Initialise every convolution and linear layer orthogonally (gain sqrt 2, zero bias)
    instead of with PyTorch's default uniform initialisation."""
    min_hidden_layers: PositiveInt = 1
    """Fewest convolutions architecture mutation may leave."""
    max_hidden_layers: PositiveInt = 6
    """Most convolutions architecture mutation may create."""
    min_channel_size: PositiveInt = 8
    """Fewest channels a convolution may be shrunk to."""
    max_channel_size: PositiveInt = 256
    """Most channels a convolution may be grown to."""

    @model_validator(mode="after")
    def _within_bounds(self) -> CnnConfig:
        n = len(self.channel_size)
        if len(self.kernel_size) != n or len(self.stride_size) != n:
            raise field_error(
                "kernel_size",
                f"channel_size, kernel_size and stride_size must have the same length "
                f"(got {n}, {len(self.kernel_size)}, {len(self.stride_size)})",
            )
        _check_bounds(self.min_hidden_layers, self.max_hidden_layers, "hidden_layers")
        _check_bounds(self.min_channel_size, self.max_channel_size, "channel_size")
        _check_count("channel_size", n, self.min_hidden_layers, self.max_hidden_layers)
        _check_sizes("channel_size", self.channel_size, self.min_channel_size, self.max_channel_size, "channel_size")
        return self


class LstmConfig(Spec):
    """A recurrent (LSTM) encoder, used by recurrent policies."""

    arch: Literal["lstm"] = "lstm"
    """Encoder kind; inferred when the algorithm is recurrent."""
    hidden_state_size: PositiveInt = 64
    """Size of the LSTM hidden and cell state."""
    num_layers: PositiveInt = 1
    """Stacked LSTM layers."""
    min_hidden_state_size: PositiveInt = 8
    """Smallest hidden state mutation may leave."""
    max_hidden_state_size: PositiveInt = 256
    """Largest hidden state mutation may create."""
    min_num_layers: PositiveInt = 1
    """Fewest stacked layers mutation may leave."""
    max_num_layers: PositiveInt = 3
    """Most stacked layers mutation may create."""

    @model_validator(mode="after")
    def _within_bounds(self) -> LstmConfig:
        _check_bounds(self.min_hidden_state_size, self.max_hidden_state_size, "hidden_state_size")
        _check_bounds(self.min_num_layers, self.max_num_layers, "num_layers")
        _check_sizes("hidden_state_size", [self.hidden_state_size], self.min_hidden_state_size,
                     self.max_hidden_state_size, "hidden_state_size", scalar=True)
        if not self.min_num_layers <= self.num_layers <= self.max_num_layers:
            raise field_error(
                "num_layers",
                f"{self.num_layers} is outside [min_num_layers={self.min_num_layers}, "
                f"max_num_layers={self.max_num_layers}]",
            )
        return self


class SimbaConfig(Spec):
    """A SimBa encoder (Lee et al., 2024) for vector observations: a linear projection to
    `hidden_size` units, `num_blocks` pre-LayerNorm residual blocks
    (``x + Linear(act(Linear(LayerNorm(x))))``, the inner layer `scale_factor` times wider) and a
    final LayerNorm before the output layer."""

    arch: Literal["simba"] = "simba"
    """Encoder kind; also chosen by `network.simba: true`."""
    hidden_size: PositiveInt = 64
    """Width of the residual stream (one integer; a one-element list is accepted too)."""
    num_blocks: PositiveInt = 2
    """Residual blocks in the encoder."""
    activation: ActivationName = "ReLU"
    """Activation inside each residual block."""
    output_activation: ActivationName | None = None
    """Activation applied to the output layer (none when null)."""
    scale_factor: PositiveInt = 4
    """Width of each block's inner layer, as a multiple of `hidden_size`."""
    min_blocks: PositiveInt = 1
    """Fewest residual blocks architecture mutation may leave."""
    max_blocks: PositiveInt = 4
    """Most residual blocks architecture mutation may create."""
    min_mlp_nodes: PositiveInt = 8
    """Narrowest residual stream node mutation may leave."""
    max_mlp_nodes: PositiveInt = 256
    """Widest residual stream node mutation may create."""

    @model_validator(mode="before")
    @classmethod
    def _one_width(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("hidden_size"), list) and len(data["hidden_size"]) == 1:
            return {**data, "hidden_size": data["hidden_size"][0]}
        return data

    @model_validator(mode="after")
    def _within_bounds(self) -> SimbaConfig:
        _check_bounds(self.min_blocks, self.max_blocks, "blocks")
        _check_bounds(self.min_mlp_nodes, self.max_mlp_nodes, "mlp_nodes")
        if not self.min_blocks <= self.num_blocks <= self.max_blocks:
            raise field_error("num_blocks", f"{self.num_blocks} is outside [min_blocks={self.min_blocks}, "
                                            f"max_blocks={self.max_blocks}]")
        _check_sizes("hidden_size", [self.hidden_size], self.min_mlp_nodes, self.max_mlp_nodes, "mlp_nodes",
                     scalar=True)
        return self


class MultiInputConfig(Spec):
    """An encoder for Dict and Tuple observation spaces: a CNN per image, an MLP over the vectors."""

    arch: Literal["multiinput"] = "multiinput"
    """Encoder kind; inferred for Dict and Tuple observation spaces."""
    latent_dim: PositiveInt = 16
    """Features each sub-encoder (one CNN per image input, one MLP for the vector inputs) produces."""
    mlp_config: MlpConfig = Field(default_factory=MlpConfig)
    """Architecture of the MLP that encodes the concatenated vector (and one-hot discrete) inputs."""
    cnn_config: CnnConfig = Field(default_factory=CnnConfig)
    """Architecture of the CNN that encodes each image input."""


_ENCODER_KEYS: dict[str, str] = {
    "hidden_size": "mlp",
    "min_mlp_nodes": "mlp",
    "max_mlp_nodes": "mlp",
    "channel_size": "cnn",
    "kernel_size": "cnn",
    "stride_size": "cnn",
    "hidden_state_size": "lstm",
    "num_layers": "lstm",
    "mlp_config": "multiinput",
    "cnn_config": "multiinput",
    "num_blocks": "simba",
    "scale_factor": "simba",
    "min_blocks": "simba",
    "max_blocks": "simba",
}


def _encoder_kind(value: Any) -> str:
    """Discriminate encoder configs by `arch`, else by their distinctive keys (default mlp)."""
    if isinstance(value, dict):
        if "arch" in value:
            return str(value["arch"])
        if any(key in value for key, kind in _ENCODER_KEYS.items() if kind == "simba"):
            return "simba"
        for key in value:
            if key in _ENCODER_KEYS:
                return _ENCODER_KEYS[key]
        return "mlp"
    return str(getattr(value, "arch", "mlp"))


EncoderConfig = Annotated[
    Annotated[MlpConfig, Tag("mlp")]
    | Annotated[CnnConfig, Tag("cnn")]
    | Annotated[LstmConfig, Tag("lstm")]
    | Annotated[SimbaConfig, Tag("simba")]
    | Annotated[MultiInputConfig, Tag("multiinput")],
    Discriminator(_encoder_kind, custom_error_type="invalid_arch",
                  custom_error_message="arch must be one of 'mlp', 'cnn', 'lstm', 'simba', 'multiinput'"),
]
"""Any encoder configuration, chosen by `arch` (or by its keys when `arch` is omitted)."""


class NetworkSpec(Spec):
    """Architecture of an RL agent's networks: an encoder, a latent vector, and a head."""

    latent_dim: PositiveInt = 32
    """Size of the encoder's output (the latent vector every head reads)."""
    min_latent_dim: PositiveInt = 8
    """Smallest latent size mutation may leave."""
    max_latent_dim: PositiveInt = 128
    """Largest latent size mutation may create."""
    encoder_config: EncoderConfig | None = None
    """Encoder architecture; when null (or when `arch` is omitted) it is inferred from the
    observation space: Dict/Tuple -> multiinput, 3-D Box -> cnn, recurrent -> lstm, else mlp."""
    head_config: MlpConfig | None = None
    """Architecture of the MLP head(s) on top of the latent vector (policy, value, Q)."""
    simba: bool = False
    """Encode vector observations with a SimBa encoder (the same as `encoder_config.arch: simba`;
    image and Dict/Tuple observations keep their CNN and multi-input encoders)."""
    random_seed: int | None = None
    """Accepted for manifests written for the reference trainer; agile seeds the networks'
    initial weights from `training.seed`, so a value here is ignored with a warning."""

    @model_validator(mode="before")
    @classmethod
    def _arch_shorthand(cls, data: Any) -> Any:
        """`network.arch` is shorthand for `network.encoder_config.arch`; `simba: true` selects
        the SimBa encoder for an `encoder_config` that names no `arch`."""
        if not isinstance(data, dict) or ("arch" not in data and data.get("simba") is not True):
            return data
        data = dict(data)
        encoder = data.get("encoder_config")
        if "arch" in data:
            arch = data.pop("arch")
            if isinstance(encoder, dict) and "arch" in encoder and encoder["arch"] != arch:
                raise field_error("arch", f"network.arch ({arch!s}) and encoder_config.arch ({encoder['arch']!s}) "
                                          "disagree; give one of them")
            if encoder is None or isinstance(encoder, dict):
                encoder = data["encoder_config"] = {**(encoder or {}), "arch": arch}
        if data.get("simba") is True and isinstance(encoder, dict):
            arch = encoder.get("arch", "simba")
            if arch != "simba":
                raise field_error("simba", f"simba: true asks for a SimBa encoder, but encoder_config.arch is "
                                           f"{arch!s}; remove one of them")
            data["encoder_config"] = {**encoder, "arch": "simba"}
        return data

    @model_validator(mode="after")
    def _latent_within_bounds(self) -> NetworkSpec:
        _check_bounds(self.min_latent_dim, self.max_latent_dim, "latent_dim")
        if not self.min_latent_dim <= self.latent_dim <= self.max_latent_dim:
            raise field_error(
                "latent_dim",
                f"{self.latent_dim} is outside [min_latent_dim={self.min_latent_dim}, "
                f"max_latent_dim={self.max_latent_dim}]",
            )
        if isinstance(self.encoder_config, SimbaConfig) and not self.simba:
            object.__setattr__(self, "simba", True)
        return self

    def field_warnings(self) -> list[tuple[tuple[str | int, ...], str, Any]]:
        """`random_seed` is not acted on."""
        warnings = super().field_warnings()
        if self.random_seed is not None:
            warnings.append((("random_seed",), "agile seeds the networks' initial weights from training.seed; "
                                               "ignored", self.random_seed))
        return warnings


def _check_bounds(low: int, high: int, name: str) -> None:
    if low > high:
        raise field_error(f"min_{name}", f"min_{name} ({low}) must not exceed max_{name} ({high})")


def _check_count(field: str, count: int, low: int, high: int) -> None:
    if not low <= count <= high:
        raise field_error(
            field, f"{count} layers given, outside [min_hidden_layers={low}, max_hidden_layers={high}]"
        )


def _check_sizes(field: str, sizes: list[int], low: int, high: int, bound: str, scalar: bool = False) -> None:
    for position, size in enumerate(sizes):
        if not low <= size <= high:
            where = field if scalar else f"{field}[{position}]"
            raise field_error(where, f"{size} is outside [min_{bound}={low}, max_{bound}={high}]")
