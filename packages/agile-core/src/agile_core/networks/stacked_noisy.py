"""The population version of :class:`~agile_core.networks.noisy.NoisyLinear` for stacked networks.

``P`` noisy layers run as one: per-member mean and sigma parameters (``weight_mu``/``weight_sigma``
``[P, out, in]``, ``bias_mu``/``bias_sigma`` ``[P, out]``, the members' own layout with a leading
member axis, zero-padded to the widest member) and per-member noise factors ``eps_in`` ``[P, in]``
and ``eps_out`` ``[P, out]``. The members' noise buffers become views of the stacked ones, so a
member redrawing its noise (``NoisyLinear.reset_noise`` with its own generator) writes straight
into the stacked layer: every member's noise is drawn exactly as it is drawn when it is alone.
Padding keeps zero means and sigmas (the padding mask of the optimizer keeps them there), so the
noise on padded units never reaches an output.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from agile_core.networks.noisy import NoisyLinear, noise_on
from agile_core.networks.stack_padding import stack_padded

__all__ = ["StackedNoisyLinear"]


class StackedNoisyLinear(nn.Module):
    """``P`` :class:`NoisyLinear` layers: ``[P, ..., in] -> [P, ..., out]`` with one batched matmul.

    Training mode adds each member's factorised noise ``sigma * (eps_out eps_in^T)``; evaluation
    mode uses the means, as the members do. Building it binds the members' ``eps_in``/``eps_out``
    buffers to views of this layer's (members keep drawing their own noise).
    """

    eps_in: torch.Tensor
    eps_out: torch.Tensor

    def __init__(self, layers: Sequence[NoisyLinear]) -> None:
        super().__init__()
        self.training = layers[0].training
        self.weight_mu = nn.Parameter(stack_padded([layer.weight_mu for layer in layers]))
        self.weight_sigma = nn.Parameter(stack_padded([layer.weight_sigma for layer in layers]))
        self.bias_mu = nn.Parameter(stack_padded([layer.bias_mu for layer in layers]))
        self.bias_sigma = nn.Parameter(stack_padded([layer.bias_sigma for layer in layers]))
        self.register_buffer("eps_in", stack_padded([layer.eps_in for layer in layers]))
        self.register_buffer("eps_out", stack_padded([layer.eps_out for layer in layers]))
        for index, layer in enumerate(layers):  # members draw into their rows of the stacked noise
            layer.eps_in = self.eps_in[index, :layer.in_features]
            layer.eps_out = self.eps_out[index, :layer.out_features]

    @staticmethod
    def member_layout(name: str, tensor: torch.Tensor) -> torch.Tensor:
        """Parameters are stored in the members' layout: identity."""
        return tensor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply member ``p``'s noisy (training) or mean (evaluation) layer to ``x[p]``."""
        if x.dim() != 3:
            flat = x.reshape(x.shape[0], -1, x.shape[-1])
            return self.forward(flat).reshape(*x.shape[:-1], self.weight_mu.shape[1])
        if not noise_on(self):
            return torch.baddbmm(self.bias_mu.unsqueeze(1), x, self.weight_mu.transpose(1, 2))
        weight = self.weight_mu + self.weight_sigma * (self.eps_out.unsqueeze(2) * self.eps_in.unsqueeze(1))
        bias = self.bias_mu + self.bias_sigma * self.eps_out
        return torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))
