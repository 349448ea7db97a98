"""Stacked MLPs run as a flat list of batched ops, with a hand-written backward pass.

A stacked network (:func:`~agile_core.networks.stacked.stack_modules`) already computes ``P``
members in one call per layer, but each call still goes through ``nn.Module`` dispatch and the
autograd engine; at RL sizes on a CPU that bookkeeping costs about as much as the arithmetic.
:class:`FusedMLPChain` runs a chain of stacked :class:`~agile_core.networks.mlp.EvolvableMLP`
modules as a plain loop over ``baddbmm``, layer norm and activation kernels, and differentiates it
by hand with the same ATen backward kernels autograd would call.

To the code above it, a fused chain is one autograd function (:meth:`FusedMLPChain.__call__`):
:func:`fuse_stacked_mlps` makes every stacked MLP of a stacked network run through one, so an
algorithm's loss is ordinary autograd code over stacked networks, and only this module knows the
chain is hand-differentiated. Its backward pass accumulates the parameter gradients straight into
the stacked parameters' ``.grad`` (views of one flat buffer, see
:class:`~agile_core.networks.stacked.FlatParameters`), and returns the input gradient to autograd.
A noisy output layer (:class:`~agile_core.networks.stacked_noisy.StackedNoisyLinear`) runs in
the chain too: with its noise on, the layer's weight is ``mu + sigma * (eps_out eps_in^T)`` for that
call, and backward adds the mean's gradient times the noise to sigma's. Chains with a layer this
module does not know (an activation outside :data:`ACTIVATIONS`) raise :class:`~agile_core.networks.stacked.NotStackableError`, and those MLPs stay ordinary
stacked modules under autograd.

Private kernels: the row normalisation uses ``torch.native_group_norm`` (tested with torch
2.9-2.14); where a torch lacks it the same numbers come from public tensor operations. A chain of
one member normalises with ``torch.native_layer_norm`` and its own gain and bias instead (one
kernel forward, one backward, where several members' gains need separate steps).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import nn

from agile_core.networks.mlp import EvolvableMLP
from agile_core.networks.noisy import noise_on
from agile_core.networks.stacked import (
    NotStackableError,
    StackedDenseBlock,
    StackedLayerNorm,
    StackedLinear,
    activation_runs,
    normalise_member_units,
)
from agile_core.networks.stacked_noisy import StackedNoisyLinear

__all__ = ["ACTIVATIONS", "FusedHeads", "FusedMLPChain", "Tape", "fuse_stacked_mlps"]

aten = torch.ops.aten
_LAYER_NORM_BACKWARD = aten.native_layer_norm_backward.default
_GROUP_NORM = getattr(torch, "native_group_norm", None)
Backward = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
"""``(grad_output, input, output) -> grad_input`` of an activation."""


@dataclass(frozen=True)
class _Activation:
    forward: Callable[[torch.Tensor], torch.Tensor]
    backward: Backward | None  # None: identity


def _activation(module: nn.Module) -> _Activation:
    """Forward and backward kernels of an activation module (those autograd itself uses)."""
    kind = type(module)
    if kind is nn.Identity:
        return _Activation(lambda x: x, None)
    if kind is nn.ReLU:
        return _Activation(torch.relu, lambda g, x, y: aten.threshold_backward.default(g, y, 0))
    if kind is nn.Tanh:
        return _Activation(torch.tanh, lambda g, x, y: aten.tanh_backward.default(g, y))
    if kind is nn.Sigmoid:
        return _Activation(torch.sigmoid, lambda g, x, y: aten.sigmoid_backward.default(g, y))
    if kind is nn.GELU and isinstance(module, nn.GELU):
        approximate = str(module.approximate)
        return _Activation(lambda x: aten.gelu.default(x, approximate=approximate),
                           lambda g, x, y: aten.gelu_backward.default(g, x, approximate=approximate))
    if kind is nn.ELU and isinstance(module, nn.ELU):
        alpha = float(module.alpha)
        return _Activation(lambda x: aten.elu.default(x, alpha),
                           lambda g, x, y: aten.elu_backward.default(g, alpha, 1, 1, False, x))
    if kind is nn.LeakyReLU and isinstance(module, nn.LeakyReLU):
        slope = float(module.negative_slope)
        return _Activation(lambda x: aten.leaky_relu.default(x, slope),
                           lambda g, x, y: aten.leaky_relu_backward.default(g, x, slope, False))
    raise NotStackableError(f"{kind.__name__} has no fused version")


ACTIVATIONS = ("Identity", "ReLU", "Tanh", "Sigmoid", "GELU", "ELU", "LeakyReLU")
"""Activation modules a fused chain can run."""


@dataclass(frozen=True)
class _Layer:
    """Linear -> optional LayerNorm -> activation, optionally as a gated residual block.

    Holds the stacked parameters themselves (not their modules), so the hot loops skip
    ``nn.Module`` attribute lookups; the parameters are updated in place by the optimizer."""

    weight: torch.Tensor  # [P, out, in], read transposed (see StackedLinear); a noisy layer's mean
    bias: torch.Tensor | None  # [P, 1, out]; a noisy layer's mean [P, out]
    norm_shape: list[int] | None  # None: no LayerNorm
    norm_eps: float
    norm_weight: torch.Tensor | None  # [P, 1, out]
    norm_bias: torch.Tensor | None
    unit_mask: torch.Tensor | None  # padded members: [P, 1, out] marking each member's own units
    unit_counts: torch.Tensor | None  # and [P, 1, 1] counting them
    unit_eps: torch.Tensor | None  # and [P, 1, 1] each member's eps
    activation: _Activation
    shortcut: torch.Tensor | None  # residual blocks: [P, in, out]; None otherwise
    gate: torch.Tensor | None  # [P, 1, 1]
    shortcut_mask: torch.Tensor | None = None  # a shortcut that only copies units: [P, 1, out] (see _copying_mask)
    noisy: StackedNoisyLinear | None = None  # a noisy layer (its mode says whether the noise applies)
    weight_sigma: torch.Tensor | None = None  # and its [P, out, in] and [P, out] noise scales,
    bias_sigma: torch.Tensor | None = None
    eps_in: torch.Tensor | None = None  # its noise factors [P, in] and [P, out] (the stacked buffers,
    eps_out: torch.Tensor | None = None  # which the members redraw in place)
    member_activations: tuple[nn.Module, ...] | None = None  # each member's activation, when they differ,
    activation_runs: tuple[tuple[slice, _Activation], ...] | None = None  # and their runs' kernels
    # Derived once (views follow the in-place optimizer updates and noise draws): the weight read
    # transposed, the bias as [P, 1, out], whether the weight gradient is taken as (x^T g)^T, and a
    # noisy layer's bias scale as [P, 1, out] and noise factors as [P, out, 1], [P, 1, in], [P, 1, out].
    weight_t: torch.Tensor = field(init=False, repr=False)
    bias_rows: torch.Tensor | None = field(init=False, repr=False)
    narrow_input: bool = field(init=False, repr=False)
    bias_sigma_rows: torch.Tensor | None = field(init=False, repr=False)
    noise_factors: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = field(init=False, repr=False)
    # A one-member layer norm with its gain and bias as [out] (None otherwise): torch's own layer
    # norm kernels then apply the affine and differentiate it in the same call.
    lone_affine: tuple[torch.Tensor, torch.Tensor | None] | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        weight = self.weight.detach()
        object.__setattr__(self, "weight_t", weight.transpose(1, 2))
        object.__setattr__(self, "bias_rows", _as_rows(self.bias))
        object.__setattr__(self, "narrow_input", weight.shape[2] < weight.shape[1])
        object.__setattr__(self, "bias_sigma_rows", _as_rows(self.bias_sigma))
        eps_in, eps_out = self.eps_in, self.eps_out
        object.__setattr__(self, "noise_factors", None if eps_in is None or eps_out is None else
                           (eps_out.unsqueeze(2), eps_in.unsqueeze(1), eps_out.unsqueeze(1)))
        gain, shift = self.norm_weight, self.norm_bias
        lone_affine = None
        if self.norm_shape is not None and gain is not None and self.unit_mask is None and weight.shape[0] == 1:
            lone_affine = (gain.detach().reshape(-1), None if shift is None else shift.detach().reshape(-1))
        object.__setattr__(self, "lone_affine", lone_affine)

    def select(self, members: slice) -> _Layer:
        """This layer for a contiguous range of members: views of its tensors. A trained tensor's
        view carries the matching rows of the full tensor's ``.grad`` (when allocated), so
        gradients computed for the range land in the full parameters' gradients."""
        def view(tensor: torch.Tensor | None) -> torch.Tensor | None:
            if tensor is None:
                return None
            part = tensor.detach()[members]
            if tensor.grad is not None:
                part.grad = tensor.grad[members]
            return part

        views: dict[str, Any] = {name: view(getattr(self, name)) for name in _TENSOR_FIELDS}
        if self.member_activations is not None:
            views.update(_activation_fields(self.member_activations[members]))
        return replace(self, **views)

    @classmethod
    def of(cls, linear: StackedLinear, norm: StackedLayerNorm | None, activation: nn.Module,
           block: StackedDenseBlock | None) -> _Layer:
        """The layer of a stacked linear (+ norm) + activation (+ residual `block`)."""
        residual = block if block is not None and block.residual else None
        per_member = None if block is None else block.member_activations
        activations = {} if per_member is None else _activation_fields(per_member)
        kernels = activations.pop("activation", None) or _activation(activation)
        return cls(
            **activations,
            weight=linear.weight, bias=linear.bias,
            norm_shape=None if norm is None else list(norm.normalized_shape),
            norm_eps=0.0 if norm is None else norm.eps,
            norm_weight=None if norm is None else norm.weight, norm_bias=None if norm is None else norm.bias,
            unit_mask=None if norm is None else norm.unit_mask, unit_counts=None if norm is None else norm.unit_counts,
            unit_eps=None if norm is None else norm.unit_eps,
            activation=kernels,
            shortcut=None if residual is None else residual.shortcut, gate=None if residual is None else residual.gate,
            shortcut_mask=None if residual is None else _copying_mask(residual.shortcut))

    @classmethod
    def of_noisy(cls, layer: StackedNoisyLinear, activation: nn.Module) -> _Layer:
        """The layer of a stacked noisy linear + activation."""
        return cls(weight=layer.weight_mu, bias=layer.bias_mu, norm_shape=None, norm_eps=0.0, norm_weight=None,
                   norm_bias=None, unit_mask=None, unit_counts=None, unit_eps=None, activation=_activation(activation),
                   shortcut=None, gate=None, noisy=layer, weight_sigma=layer.weight_sigma, bias_sigma=layer.bias_sigma,
                   eps_in=layer.eps_in, eps_out=layer.eps_out)

    def noise(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """``(eps_out eps_in^T [P, out, in], eps_out [P, 1, out])`` of a noisy layer whose noise is on
        now (None otherwise), copied from the stacked noise buffers at this layer's members."""
        if self.noisy is None or self.noise_factors is None or not noise_on(self.noisy):
            return None
        out_column, in_row, out_row = self.noise_factors
        return out_column * in_row, out_row.clone()


def _as_rows(bias: torch.Tensor | None) -> torch.Tensor | None:
    """A bias ``[P, out]`` (or ``[P, 1, out]`` already) as ``[P, 1, out]``, detached."""
    if bias is None:
        return None
    bias = bias.detach()
    return bias if bias.dim() == 3 else bias.unsqueeze(1)


def _activation_fields(members: tuple[nn.Module, ...]) -> dict[str, Any]:
    """The activation fields of a layer whose members use the activations `members` in turn:
    the kernels of their runs (:func:`~agile_core.networks.stacked.activation_runs`), or one
    shared activation when they are all the same."""
    runs = activation_runs(members)
    return {"activation": _activation(members[0]), "member_activations": None if runs is None else members,
            "activation_runs": None if runs is None else
            tuple((run, _activation(module)) for run, module in runs)}


_TENSOR_FIELDS = ("weight", "bias", "norm_weight", "norm_bias", "unit_mask", "unit_counts", "unit_eps", "shortcut",
                  "gate", "shortcut_mask", "weight_sigma", "bias_sigma", "eps_in", "eps_out")


def _copying_mask(shortcut: torch.Tensor) -> torch.Tensor | None:
    """``[P, 1, out]`` when every member's shortcut ``[in, out]`` only copies input unit ``j`` to
    output unit ``j`` (a padded partial identity, as new layers start): then ``x @ shortcut`` is
    ``x``'s first ``out`` units times this mask, an elementwise product instead of a matmul. None
    for any other shortcut (one a removed unit has shifted)."""
    members, inputs, outputs = shortcut.shape
    width = min(inputs, outputs)
    diagonal = shortcut.diagonal(dim1=1, dim2=2)  # [P, width]
    if not bool(((diagonal == 0) | (diagonal == 1)).all()):
        return None
    if not torch.equal(shortcut[:, :width, :width], torch.diag_embed(diagonal)) or bool(shortcut[:, width:].any()) \
            or bool(shortcut[:, :, width:].any()):
        return None
    mask = shortcut.new_zeros(members, 1, outputs)
    mask[:, 0, :width] = diagonal
    return mask


def _fit_units(x: torch.Tensor, width: int) -> torch.Tensor:
    """``x``'s first `width` units (zero-padded when it has fewer)."""
    if x.shape[-1] >= width:
        return x[..., :width]
    return torch.nn.functional.pad(x, (0, width - x.shape[-1]))


@dataclass
class _Saved:
    """What one layer's backward pass reads."""

    inputs: torch.Tensor
    pre_norm: torch.Tensor
    normalised: torch.Tensor | None
    mean: torch.Tensor | None
    rstd: torch.Tensor | None
    pre_activation: torch.Tensor
    output: torch.Tensor
    weight: torch.Tensor | None = None  # a noisy layer's weight of this pass (None: the layer's own)
    noise: tuple[torch.Tensor, torch.Tensor] | None = None  # and its noise (Layer.noise)


Tape = list[_Saved]
"""Activations recorded by :meth:`FusedMLPChain.forward` for :meth:`FusedMLPChain.backward`."""


def _layers_of(mlp: nn.Module) -> list[_Layer]:
    if not isinstance(mlp, EvolvableMLP):
        raise NotStackableError(f"{type(mlp).__name__} is not a stacked EvolvableMLP")
    layers: list[_Layer] = []
    for block in mlp.layers:
        if not isinstance(block, StackedDenseBlock):
            raise NotStackableError(f"{type(block).__name__} is not a stacked dense block")
        layers.append(_Layer.of(block.main, block.norm, block.activation, block))
    output = mlp.output_layer
    if isinstance(output, StackedNoisyLinear):
        layers.append(_Layer.of_noisy(output, mlp.output_act))
    elif isinstance(output, StackedLinear):
        layers.append(_Layer.of(output, None, mlp.output_act, None))
    else:
        raise NotStackableError(f"{type(output).__name__} output layers have no fused version")
    return layers


class FusedMLPChain:
    """``mlps[-1](...mlps[1](mlps[0](x)))`` for stacked MLPs, with a hand-written backward pass.

    Args:
        mlps: Stacked :class:`EvolvableMLP` modules (children of a module built by
            ``stack_modules``), applied in order. Their parameters are used in place, so the
            chain follows optimizer updates without rebuilding.
    """

    def __init__(self, mlps: Sequence[nn.Module]) -> None:
        if not mlps:
            raise ValueError("a fused chain needs at least one MLP")
        first = mlps[0]
        self.input_shape = tuple(getattr(first, "input_shape", ()))
        self.num_inputs = int(getattr(first, "num_inputs", 0))
        self.layers = [layer for mlp in mlps for layer in _layers_of(mlp)]
        self._ranges: dict[tuple[int, int], FusedMLPChain] = {}
        self._root = self  # whose parameters say whether the chain trains (a member range's parent)
        # A leaf that requires grad, so autograd runs the chain's backward even for inputs that do not.
        self._anchor = torch.zeros((), requires_grad=True)

    def members(self, start: int, stop: int) -> FusedMLPChain:
        """This chain run for members ``start:stop`` only (inputs ``[stop - start, rows, ...]``):
        its layers are views of this chain's parameters, so it follows their updates, and its
        backward pass accumulates into those members' rows of the full gradients. Cached."""
        key = (start, stop)
        chain = self._ranges.get(key)
        if chain is None:
            chain = copy.copy(self)
            chain.layers = [layer.select(slice(start, stop)) for layer in self.layers]
            chain._ranges = {}
            self._ranges[key] = chain
        return chain

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """Outputs ``[P, rows, out]`` of inputs ``[P, rows, *input_shape]`` as one autograd
        function: when gradients are enabled and the chain is trained, backward accumulates the
        parameter gradients into their ``.grad`` and passes the input gradient on."""
        if x.dim() != 3 and len(self.input_shape) == 1:
            return _on_flat_rows(self, x)
        trains = self._root.layers[0].weight.requires_grad
        if not torch.is_grad_enabled() or not (trains or x.requires_grad):
            return self.run(x)
        return _FusedChainFunction.apply(x, self, trains, self._anchor)

    def forward(self, x: torch.Tensor, tape: Tape | None = None) -> torch.Tensor:
        """Outputs ``[P, rows, out]`` of inputs ``[P, rows, *input_shape]`` (no autograd graph);
        pass a `tape` to record what :meth:`backward` needs."""
        with torch.no_grad():
            return self.run(x, tape)

    def run(self, x: torch.Tensor, tape: Tape | None = None) -> torch.Tensor:
        """:meth:`forward` where gradients are off already (inside an autograd function, or
        under ``torch.no_grad``)."""
        if len(self.input_shape) != 1:
            x = x.reshape(x.shape[0], x.shape[1], self.num_inputs)
        for layer in self.layers:
            x = _layer_forward(layer, x, tape)
        return x

    def backward(self, tape: Tape, grad_output: torch.Tensor, input_grad: bool = False,
                 params: bool = True) -> torch.Tensor | None:
        """Accumulate into the parameters' ``.grad`` (unless not `params`) the gradient of
        ``sum(grad_output * out)``, where ``out`` is the taped forward pass's output; with
        `input_grad`, also return the gradient with respect to the chain's input."""
        if len(tape) != len(self.layers):
            raise ValueError("the tape does not come from a forward pass of this chain")
        with torch.no_grad():
            return self.backprop(tape, grad_output, input_grad, params)

    def backprop(self, tape: Tape, grad_output: torch.Tensor, input_grad: bool, params: bool) -> torch.Tensor | None:
        """:meth:`backward` where gradients are off already (inside an autograd function's backward)."""
        grad = grad_output
        layers = self.layers
        for index in range(len(layers) - 1, -1, -1):
            grad = _layer_backward(layers[index], tape[index], grad, input_grad or index > 0, params)
        return grad if input_grad else None


def _layer_forward(layer: _Layer, x: torch.Tensor, tape: Tape | None) -> torch.Tensor:
    """One layer of a chain on ``[P, rows, in]`` (gradients off), recording its activations on `tape`."""
    noise = None if layer.noisy is None else layer.noise()
    if noise is None:
        weight, weight_t, bias = None, layer.weight_t, layer.bias_rows
    else:
        assert layer.weight_sigma is not None and layer.bias_sigma_rows is not None and layer.bias_rows is not None
        weight = torch.addcmul(layer.weight, layer.weight_sigma, noise[0])
        weight_t = weight.transpose(1, 2)
        bias = torch.addcmul(layer.bias_rows, layer.bias_sigma_rows, noise[1])
    h = torch.bmm(x, weight_t) if bias is None else torch.baddbmm(bias, x, weight_t)
    normalised = mean = rstd = None
    a = h
    if layer.lone_affine is not None:
        assert layer.norm_shape is not None
        a, mean, rstd = torch.native_layer_norm(h, layer.norm_shape, *layer.lone_affine, layer.norm_eps)
    elif layer.norm_shape is not None:
        if layer.unit_mask is None:
            normalised, mean, rstd = _normalise_rows(h, layer.norm_eps)
        else:
            assert layer.unit_counts is not None and layer.unit_eps is not None
            normalised, mean, rstd = normalise_member_units(h, layer.unit_mask, layer.unit_counts, layer.unit_eps)
        assert layer.norm_weight is not None
        a = normalised * layer.norm_weight if layer.norm_bias is None else \
            torch.addcmul(layer.norm_bias, normalised, layer.norm_weight)
    if layer.activation_runs is None:
        y = layer.activation.forward(a)
    else:
        y = torch.empty_like(a)
        for members, kernels in layer.activation_runs:
            y[members] = kernels.forward(a[members])
    if tape is not None:
        tape.append(_Saved(x, h, normalised, mean, rstd, a, y, weight, noise))
    if layer.shortcut is None or layer.gate is None:
        return y
    if layer.shortcut_mask is not None:
        return torch.addcmul(_fit_units(x, y.shape[-1]) * layer.shortcut_mask, layer.gate, y)
    return torch.bmm(x, layer.shortcut) + layer.gate * y


def _layer_backward(layer: _Layer, saved: _Saved, grad: torch.Tensor, need_input_grad: bool,
                    params: bool = True) -> torch.Tensor:
    """One layer's backward pass (gradients off): accumulate its parameter gradients (when
    `params`) and return the gradient of its input (its output's, when not `need_input_grad`)."""
    shortcut_grad = None
    if layer.shortcut is not None and layer.gate is not None:  # out = x @ shortcut + gate * y
        if params:
            _accumulate_grad(layer.gate, (grad * saved.output).sum(dim=(1, 2), keepdim=True))
        if need_input_grad and layer.shortcut_mask is not None:  # the copy's transpose: mask, then fit to `in`
            shortcut_grad = _fit_units(grad * layer.shortcut_mask, layer.shortcut.shape[1])
        elif need_input_grad:
            shortcut_grad = torch.bmm(grad, layer.shortcut.transpose(1, 2))
        grad = grad * layer.gate
    if layer.activation_runs is not None:
        grad = _activation_backward_by_member(layer.activation_runs, grad, saved.pre_activation, saved.output)
    elif layer.activation.backward is not None:
        grad = layer.activation.backward(grad, saved.pre_activation, saved.output)
    if layer.lone_affine is not None:
        assert layer.norm_shape is not None
        gain, shift = layer.lone_affine
        grad, gain_grad, shift_grad = _LAYER_NORM_BACKWARD(grad, saved.pre_norm, layer.norm_shape, saved.mean,
                                                           saved.rstd, gain, shift,
                                                           [True, params, params and shift is not None])
        if params:
            assert layer.norm_weight is not None
            _accumulate_grad(layer.norm_weight, gain_grad.view(layer.norm_weight.shape))
            if layer.norm_bias is not None:
                _accumulate_grad(layer.norm_bias, shift_grad.view(layer.norm_bias.shape))
    elif layer.norm_shape is not None:
        norm_weight, normalised = layer.norm_weight, saved.normalised
        assert norm_weight is not None and normalised is not None and saved.rstd is not None
        if params:
            _accumulate_grad(norm_weight, (grad * normalised).sum(dim=1, keepdim=True))
            if layer.norm_bias is not None:
                _accumulate_grad(layer.norm_bias, grad.sum(dim=1, keepdim=True))
        if layer.unit_mask is None:
            grad = _LAYER_NORM_BACKWARD(grad * norm_weight, saved.pre_norm, layer.norm_shape, saved.mean,
                                        saved.rstd, None, None, _INPUT_ONLY)[0]
        else:
            assert layer.unit_counts is not None
            grad = _masked_rows_backward(grad * norm_weight, normalised, saved.rstd, layer.unit_mask,
                                         layer.unit_counts)
    if params:
        # The weight gradient [out, in] as whichever product has the wider output: the batched
        # matmul kernel is slow when its output is narrow (an input layer's few features).
        x = saved.inputs
        if layer.narrow_input:
            weight_grad = torch.bmm(x.transpose(1, 2), grad).transpose(1, 2)
        else:
            weight_grad = torch.bmm(grad.transpose(1, 2), x)
        _accumulate_grad(layer.weight, weight_grad)
        if saved.noise is not None and layer.weight_sigma is not None:
            _accumulate_grad(layer.weight_sigma, weight_grad * saved.noise[0])
        if layer.bias is not None:
            bias_grad = grad.sum(dim=1, keepdim=True)  # [P, 1, out]
            if saved.noise is not None and layer.bias_sigma is not None:
                _accumulate_grad(layer.bias_sigma, (bias_grad * saved.noise[1]).squeeze(1))
            _accumulate_grad(layer.bias, bias_grad if layer.bias.dim() == 3 else bias_grad.squeeze(1))
    if not need_input_grad:
        return grad
    input_grad = torch.bmm(grad, layer.weight if saved.weight is None else saved.weight)
    return input_grad if shortcut_grad is None else input_grad + shortcut_grad


_INPUT_ONLY = [True, False, False]
"""``native_layer_norm_backward``'s output mask: the input gradient only."""


def _activation_backward_by_member(runs: tuple[tuple[slice, _Activation], ...], grad: torch.Tensor,
                                   pre_activation: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
    """The input gradient of activations that differ by member, run by run."""
    result = torch.empty_like(grad)
    for members, kernels in runs:
        part = grad[members]
        result[members] = part if kernels.backward is None else \
            kernels.backward(part, pre_activation[members], output[members])
    return result


def _normalise_rows(h: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """LayerNorm without affine over the last dimension of ``[P, rows, n]`` (contiguous), with its
    mean and rstd (``P * rows`` values each, in row order: what ``native_layer_norm_backward``
    reads). Computed as a group norm with one group per row, whose CPU kernel is about twice as
    fast as layer norm's at these sizes."""
    members, rows, width = h.shape
    if _GROUP_NORM is None:
        mean = h.mean(dim=-1, keepdim=True)
        rstd = torch.rsqrt(h.var(dim=-1, unbiased=False, keepdim=True) + eps)
        return (h - mean) * rstd, mean, rstd
    count = members * rows
    normalised, mean, rstd = _GROUP_NORM(h.view(1, count, width), None, None, 1, count, width, count, eps)
    return normalised.view(members, rows, width), mean, rstd


def _masked_rows_backward(grad: torch.Tensor, normalised: torch.Tensor, rstd: torch.Tensor, mask: torch.Tensor,
                          counts: torch.Tensor) -> torch.Tensor:
    """The input gradient of :func:`~agile_core.networks.stacked.normalise_member_units` given the
    gradient of its output: ``rstd * (g - mean(g) - y * mean(g * y))`` over each member's own
    units, zero on padding (where `grad` must be zero already, as a zero-padded gain makes it)."""
    mean_grad = grad.sum(dim=-1, keepdim=True) / counts
    mean_projection = torch.linalg.vecdot(grad, normalised).unsqueeze(-1) / counts
    return torch.addcmul(grad - mean_grad, normalised, mean_projection, value=-1).mul_(rstd).mul_(mask)


def _accumulate_grad(param: torch.Tensor, grad: torch.Tensor) -> None:
    """``param.grad += grad`` in place (as autograd accumulates), creating it when missing."""
    if param.grad is None:
        param.grad = grad.clone(memory_format=torch.contiguous_format)
    else:
        param.grad.add_(grad)


class _FusedChainFunction(torch.autograd.Function):
    """A fused chain as one node of an autograd graph (see :meth:`FusedMLPChain.__call__`)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, chain: FusedMLPChain, trains: bool, anchor: torch.Tensor) -> torch.Tensor:
        tape: Tape = []
        out = chain.run(x, tape)
        ctx.chain, ctx.tape, ctx.trains, ctx.input_shape = chain, tape, trains, x.shape
        return out

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[torch.Tensor | None, None, None, None]:
        input_grad = ctx.chain.backprop(ctx.tape, grad_output, bool(ctx.needs_input_grad[0]), ctx.trains)
        ctx.tape = None
        return (None if input_grad is None else input_grad.reshape(ctx.input_shape)), None, None, None


class FusedHeads:
    """A stacked encoder chain and several head chains reading its output, as one autograd
    function returning every head's output: ``heads[i](encoder(x))`` for each ``i``. The encoder
    runs once; backward sums the heads' gradients on the latent before the encoder's own pass.

    Args:
        encoder: The encoder's chain.
        heads: One chain per head, in output order.
    """

    def __init__(self, encoder: FusedMLPChain, heads: Sequence[FusedMLPChain]) -> None:
        self.encoder, self.heads = encoder, list(heads)
        self._ranges: dict[tuple[int, int], FusedHeads] = {}

    def members(self, start: int, stop: int) -> FusedHeads:
        """These heads run for members ``start:stop`` only (see :meth:`FusedMLPChain.members`). Cached."""
        key = (start, stop)
        heads = self._ranges.get(key)
        if heads is None:
            heads = FusedHeads(self.encoder.members(start, stop), [head.members(start, stop) for head in self.heads])
            self._ranges[key] = heads
        return heads

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Each head's outputs ``[P, rows, out]`` of inputs ``[P, rows, *input_shape]``."""
        encoder = self.encoder
        if x.dim() != 3 and len(encoder.input_shape) == 1:
            return _on_flat_rows(self, x)
        trains = encoder._root.layers[0].weight.requires_grad
        if not torch.is_grad_enabled() or not (trains or x.requires_grad):
            latent = encoder.run(x)
            return tuple(head.run(latent) for head in self.heads)
        return _FusedHeadsFunction.apply(x, self, trains, encoder._anchor)


class _FusedHeadsFunction(torch.autograd.Function):
    """:class:`FusedHeads` as one node of an autograd graph."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, tree: FusedHeads, trains: bool,
                anchor: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ctx.set_materialize_grads(False)  # a head whose output is unused gets no backward pass
        encoder_tape: Tape = []
        latent = tree.encoder.run(x, encoder_tape)
        tapes: list[Tape] = [[] for _ in tree.heads]
        outs = tuple(head.run(latent, tape) for head, tape in zip(tree.heads, tapes, strict=True))
        ctx.tree, ctx.encoder_tape, ctx.tapes, ctx.trains, ctx.input_shape = tree, encoder_tape, tapes, trains, x.shape
        return outs

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple[torch.Tensor | None, None, None, None]:
        tree: FusedHeads = ctx.tree
        latent_grad = None
        for head, tape, grad in zip(tree.heads, ctx.tapes, grads, strict=True):
            if grad is None:
                continue
            part = head.backprop(tape, grad, True, ctx.trains)
            assert part is not None
            latent_grad = part if latent_grad is None else latent_grad + part
        ctx.tapes = None
        input_grad = None
        if latent_grad is not None:
            input_grad = tree.encoder.backprop(ctx.encoder_tape, latent_grad, bool(ctx.needs_input_grad[0]),
                                               ctx.trains)
        ctx.encoder_tape = None
        return (None if input_grad is None else input_grad.reshape(ctx.input_shape)), None, None, None


def _on_flat_rows(fn: Callable[[torch.Tensor], Any], x: torch.Tensor) -> Any:
    """`fn` (a chain or heads) of inputs ``[P, *batch, in]`` run as ``[P, rows, in]``, its output
    tensors given back their batch shape."""
    out = fn(x.reshape(x.shape[0], -1, x.shape[-1]))
    if isinstance(out, tuple):
        return tuple(part.reshape(*x.shape[:-1], part.shape[-1]) for part in out)
    return out.reshape(*x.shape[:-1], out.shape[-1])


def fuse_stacked_mlps(stacked: nn.Module) -> int:
    """Make every stacked :class:`EvolvableMLP` inside `stacked` run as a :class:`FusedMLPChain`
    (those with a layer the chain does not know stay as they are), and every feed-forward
    stacked network's MLP encoder and each head run as one chain in ``head_of_latent``; return
    how many MLPs were fused."""
    from agile_core.networks.network import EvolvableNetwork

    fused = 0
    for module in stacked.modules():
        if isinstance(module, EvolvableNetwork) and not module.recurrent and isinstance(module.encoder, EvolvableMLP):
            heads = {}
            for name in module.head_names:
                try:
                    heads[name] = FusedMLPChain([module.encoder, getattr(module, name)])
                except NotStackableError:
                    continue
            object.__setattr__(module, "agile_fused_heads", heads)
            if len(module.head_names) > 1 and len(heads) == len(module.head_names):
                object.__setattr__(module, "agile_fused_tree", FusedHeads(
                    FusedMLPChain([module.encoder]), [FusedMLPChain([getattr(module, name)])
                                                      for name in module.head_names]))
    for module in stacked.modules():
        if isinstance(module, EvolvableMLP) and "agile_fused" not in module.__dict__:
            try:
                chain = FusedMLPChain([module])
            except NotStackableError:
                continue
            object.__setattr__(module, "agile_fused", chain)
            fused += 1
    return fused
