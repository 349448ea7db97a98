"""NoisyLinear: a linear layer with learnable factorised Gaussian parameter noise (NoisyNets)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from agile_core.networks.resize import IndexMap, new_units, remap, uniform, uninitialised

_MEAN_WEIGHTS: ContextVar[bool] = ContextVar("agile_noisy_mean_weights", default=False)


@contextmanager
def mean_weights() -> Iterator[None]:
    """Within this block noisy layers use their mean weights, as in evaluation mode, without
    switching any module's mode (greedy acting does this every step: a mode switch walks the
    whole module tree twice)."""
    token = _MEAN_WEIGHTS.set(True)
    try:
        yield
    finally:
        _MEAN_WEIGHTS.reset(token)


def noise_on(layer: nn.Module) -> bool:
    """Whether noisy `layer` applies its noise now: in training mode, outside :func:`mean_weights`."""
    return layer.training and not _MEAN_WEIGHTS.get()


def draw_factorised_noise(layers: Sequence[NoisyLinear],
                          source: torch.Generator | np.random.Generator | None = None) -> None:
    """Redraw the noise of `layers` from one draw of standard normal samples, split in turn: for
    each layer ``f(eps_in)`` then ``f(eps_out)`` with ``f(x) = sign(x) sqrt(|x|)`` (Fortunato et
    al., 2018). `source` is a numpy generator (an agent's ``rng``: the cheapest per step), a torch
    generator, or None for torch's global one; nothing is drawn for meta tensors."""
    live = [layer for layer in layers if layer.weight_mu.device.type != "meta"]
    if not live:
        return
    buffers = [buffer for layer in live for buffer in (layer.eps_in, layer.eps_out)]
    sizes = [buffer.shape[0] for buffer in buffers]
    if isinstance(source, np.random.Generator):
        samples = source.standard_normal(sum(sizes))
        scaled = torch.from_numpy(np.copysign(np.sqrt(np.abs(samples)), samples))
    else:
        samples_t = torch.randn(sum(sizes), generator=source, dtype=torch.float64)
        scaled = samples_t.abs().sqrt_().copysign_(samples_t)
    torch._foreach_copy_(buffers, list(scaled.to(buffers[0].device).split(sizes)))


class NoisyLinear(nn.Module):
    """``y = (mu_w + sigma_w * eps_w) x + mu_b + sigma_b * eps_b`` with ``eps_w = f(eps_out) f(eps_in)^T``.

    Noise is applied in training mode only; evaluation mode (or :func:`mean_weights`) uses the mean weights. The factor
    vectors are persistent buffers so a clone or a state-dict copy reproduces the same noise.
    """

    eps_in: torch.Tensor
    eps_out: torch.Tensor

    def __init__(
        self,
        in_features: int,
        out_features: int,
        std_init: float = 0.5,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.std_init = float(std_init)
        kwargs = {"device": device, "dtype": dtype}
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features, **kwargs))  # type: ignore[arg-type]
        self.weight_sigma = nn.Parameter(torch.empty(out_features, in_features, **kwargs))  # type: ignore[arg-type]
        self.bias_mu = nn.Parameter(torch.empty(out_features, **kwargs))  # type: ignore[arg-type]
        self.bias_sigma = nn.Parameter(torch.empty(out_features, **kwargs))  # type: ignore[arg-type]
        self.register_buffer("eps_in", torch.zeros(in_features, **kwargs))  # type: ignore[arg-type]
        self.register_buffer("eps_out", torch.zeros(out_features, **kwargs))  # type: ignore[arg-type]
        self.reset_parameters()
        self.reset_noise()

    @property
    def weight(self) -> torch.Tensor:
        """The mean weight (what evaluation mode uses)."""
        return self.weight_mu

    def _sigma_value(self) -> float:
        return self.std_init / math.sqrt(max(self.in_features, 1))

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """Means ~ U(-1/sqrt(in), 1/sqrt(in)); sigmas = std_init / sqrt(in)."""
        bound = 1.0 / math.sqrt(max(self.in_features, 1))
        with torch.no_grad():
            self.weight_mu.copy_(uniform(self.weight_mu.shape, bound, self.weight_mu, generator))
            self.bias_mu.copy_(uniform(self.bias_mu.shape, bound, self.bias_mu, generator))
            self.weight_sigma.fill_(self._sigma_value())
            self.bias_sigma.fill_(self._sigma_value())

    def reset_noise(self, generator: torch.Generator | None = None) -> None:
        """Draw fresh factorised noise."""
        if self.weight_mu.device.type == "meta":
            return
        draw_factorised_noise([self], generator)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Noisy affine map in training mode, mean affine map in evaluation mode."""
        if not noise_on(self):
            return F.linear(x, self.weight_mu, self.bias_mu)
        weight = self.weight_mu + self.weight_sigma * torch.outer(self.eps_out, self.eps_in)
        bias = self.bias_mu + self.bias_sigma * self.eps_out
        return F.linear(x, weight, bias)

    def resized(self, in_map: IndexMap, out_map: IndexMap, generator: torch.Generator | None = None) -> NoisyLinear:
        """A copy resized by index maps: new inputs get zero mean and zero sigma (no contribution),
        new outputs default initial values; the surviving noise factors are kept."""
        like = self.weight_mu
        new = uninitialised(NoisyLinear, len(in_map), len(out_map), self.std_init, device=like.device, dtype=like.dtype)
        new.train(self.training)
        fresh = uninitialised(NoisyLinear, len(in_map), len(out_map), self.std_init, device=like.device, dtype=like.dtype)
        if new_units(in_map) or new_units(out_map):
            fresh.reset_parameters(generator)
            fresh.reset_noise(generator)
        with torch.no_grad():
            new.weight_mu.copy_(remap(remap(self.weight_mu, 1, in_map), 0, out_map, fresh.weight_mu))
            new.weight_sigma.copy_(remap(remap(self.weight_sigma, 1, in_map), 0, out_map, fresh.weight_sigma))
            new.bias_mu.copy_(remap(self.bias_mu, 0, out_map, fresh.bias_mu))
            new.bias_sigma.copy_(remap(self.bias_sigma, 0, out_map, fresh.bias_sigma))
        new.eps_in = remap(self.eps_in, 0, in_map, fresh.eps_in)
        new.eps_out = remap(self.eps_out, 0, out_map, fresh.eps_out)
        return new

    def extra_repr(self) -> str:
        """Sizes and initial noise scale."""
        return f"in_features={self.in_features}, out_features={self.out_features}, std_init={self.std_init}"
