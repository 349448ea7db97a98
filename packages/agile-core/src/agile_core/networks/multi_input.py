"""EvolvableMultiInput: an encoder for gymnasium Dict and Tuple observation spaces."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from gymnasium import spaces
from torch import nn

from agile_core.networks.activations import check_activation, make_activation
from agile_core.networks.base import EvolvableModule, from_config
from agile_core.networks.cnn import EvolvableCNN
from agile_core.networks.mlp import EvolvableMLP
from agile_core.networks.resize import kept, overlap, resize_linear
from agile_core.networks.spaces import (
    COMPOSITE_SPACES,
    VECTOR_SPACES,
    feature_shape,
    flat_dim,
    is_image_space,
)
from agile_core.specs.network import MultiInputConfig


class EvolvableMultiInput(EvolvableModule):
    """One CNN per image input, one MLP over the concatenated (flattened) vector inputs, then a
    Linear combining all their features into `num_outputs`.

    `inputs` describes the observation parts in order: ``{"key", "kind": "image"|"vector",
    "shape"}`` (shape after preprocessing, so Discrete parts are one-hot). Forward takes a dict
    (Dict spaces) or a tuple (Tuple spaces) of preprocessed tensors. Mutations are delegated:
    ``"cnn.<m>"`` applies `m` to every CNN in lockstep (they share one architecture) and
    ``"mlp.<m>"`` to the MLP; the sub-encoders' output sizes never change, so the combiner is
    untouched and each sub-encoder's own growth guarantees make the whole function-preserving.
    """

    def __init__(
        self,
        inputs: Sequence[Mapping[str, Any]],
        num_outputs: int,
        cnns: Sequence[EvolvableCNN],
        mlp: EvolvableMLP | None,
        *,
        space_kind: str = "dict",
        latent_dim: int = 16,
        output_activation: str | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if space_kind not in ("dict", "tuple"):
            raise ValueError(f"space_kind must be 'dict' or 'tuple', got {space_kind!r}")
        check_activation(output_activation, allow_none=True)
        self.inputs = [{"key": spec["key"], "kind": str(spec["kind"]), "shape": [int(d) for d in spec["shape"]]}
                       for spec in inputs]
        images = sum(spec["kind"] == "image" for spec in self.inputs)
        vectors = sum(spec["kind"] == "vector" for spec in self.inputs)
        if images != len(cnns) or (vectors > 0) != (mlp is not None) or not self.inputs:
            raise ValueError("need one CNN per image input and an MLP exactly when there are vector inputs")
        self.space_kind = space_kind
        self.latent_dim = int(latent_dim)
        self.num_outputs = int(num_outputs)
        self.output_activation = output_activation
        self.cnns = nn.ModuleList(cnns)
        self.mlp = mlp
        features = sum(cnn.num_outputs for cnn in cnns) + (mlp.num_outputs if mlp is not None else 0)
        self.combiner = nn.Linear(features, self.num_outputs, device=device, dtype=dtype)
        self.output_act = make_activation(output_activation, device=device, dtype=dtype)
        if device is not None or dtype is not None:
            self.to(device=device, dtype=dtype)

    @classmethod
    def from_space(
        cls,
        space: spaces.Dict | spaces.Tuple,
        num_outputs: int,
        config: MultiInputConfig | Mapping[str, Any] | None = None,
        *,
        output_activation: str | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> EvolvableMultiInput:
        """Build for a Dict or Tuple space from a :class:`MultiInputConfig` (or its dict)."""
        if not isinstance(space, COMPOSITE_SPACES):
            raise ValueError(f"EvolvableMultiInput needs a Dict or Tuple observation space, got {space}")
        cfg = config if isinstance(config, MultiInputConfig) else MultiInputConfig.model_validate(dict(config or {}))
        items = list(space.spaces.items()) if isinstance(space, spaces.Dict) else list(enumerate(space.spaces))
        inputs: list[dict[str, Any]] = []
        cnns: list[EvolvableCNN] = []
        vector_size = 0
        for key, sub in items:
            if is_image_space(sub):
                shape = tuple(sub.shape or ())
                inputs.append({"key": key, "kind": "image", "shape": list(shape)})
                cnns.append(EvolvableCNN.from_spec(cfg.cnn_config, shape, cfg.latent_dim,
                                                   output_activation=cfg.cnn_config.activation))
            elif isinstance(sub, VECTOR_SPACES):
                inputs.append({"key": key, "kind": "vector", "shape": list(feature_shape(sub))})
                vector_size += flat_dim(sub)
            else:
                raise ValueError(f"observation part {key!r} has unsupported space {sub} (nested Dict/Tuple or "
                                 f"other); parts must be Box, Discrete, MultiDiscrete or MultiBinary")
        mlp = None
        if vector_size:
            mlp_cfg = cfg.mlp_config
            mlp = EvolvableMLP.from_spec(mlp_cfg, vector_size, cfg.latent_dim,
                                         output_activation=mlp_cfg.output_activation or mlp_cfg.activation)
        kind = "dict" if isinstance(space, spaces.Dict) else "tuple"
        return cls(inputs, num_outputs, cnns, mlp, space_kind=kind, latent_dim=cfg.latent_dim,
                   output_activation=output_activation, device=device, dtype=dtype)

    def _config_body(self) -> dict[str, Any]:
        return {
            "inputs": [dict(spec, shape=list(spec["shape"])) for spec in self.inputs],
            "num_outputs": self.num_outputs,
            "cnns": [cnn.config for cnn in self.cnns],
            "mlp": None if self.mlp is None else self.mlp.config,
            "space_kind": self.space_kind,
            "latent_dim": self.latent_dim,
            "output_activation": self.output_activation,
        }

    @classmethod
    def _build_from_config(cls, body: dict[str, Any]) -> EvolvableMultiInput:
        cnns = [from_config(cfg) for cfg in body.pop("cnns")]
        mlp_cfg = body.pop("mlp")
        mlp = None if mlp_cfg is None else from_config(mlp_cfg)
        if not all(isinstance(cnn, EvolvableCNN) for cnn in cnns) or not (mlp is None or isinstance(mlp, EvolvableMLP)):
            raise ValueError("EvolvableMultiInput config holds sub-encoders of the wrong type")
        images = [cnn for cnn in cnns if isinstance(cnn, EvolvableCNN)]
        vectors = mlp if isinstance(mlp, EvolvableMLP) else None
        return cls(body.pop("inputs"), body.pop("num_outputs"), images, vectors, **body)

    def _delegates(self) -> dict[str, list[EvolvableModule]]:
        parts: dict[str, list[EvolvableModule]] = {}
        if len(self.cnns):
            parts["cnn"] = [cnn for cnn in self.cnns if isinstance(cnn, EvolvableModule)]
        if self.mlp is not None:
            parts["mlp"] = [self.mlp]
        return parts

    def forward(self, obs: Mapping[Any, torch.Tensor] | Sequence[torch.Tensor]) -> torch.Tensor:
        """Encode a dict (or tuple) of preprocessed tensors into ``[..., num_outputs]``."""
        features: list[torch.Tensor] = []
        vectors: list[torch.Tensor] = []
        cnn_index = 0
        for spec in self.inputs:
            x = obs[spec["key"]]
            if spec["kind"] == "image":
                features.append(self.cnns[cnn_index](x))
                cnn_index += 1
            else:
                vectors.append(x.reshape(*x.shape[: x.dim() - len(spec["shape"])], -1))
        if self.mlp is not None:
            features.append(self.mlp(torch.cat(vectors, dim=-1)))
        return self.output_act(self.combiner(torch.cat(features, dim=-1)))

    def set_num_outputs(self, num_outputs: int, generator: torch.Generator | None = None) -> None:
        """Resize the combining layer, keeping the leading outputs."""
        self.combiner = resize_linear(self.combiner, kept(self.combiner.in_features),
                                      overlap(self.num_outputs, num_outputs), generator=generator)
        self.num_outputs = int(num_outputs)
