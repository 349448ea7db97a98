"""Run several same-architecture networks as one: weights stacked along a leading population axis.

``stack_modules(members)`` returns a module with the same structure and the same parameter names
as each member, but every parameter has shape ``[P, *member_shape]`` and every input carries a
leading population axis ``[P, ...]``. It runs the members' own ``forward`` code: only the leaf
layers that own weights (``nn.Linear``, ``nn.LayerNorm``, the hidden :class:`DenseBlock`) are
swapped for population versions built on batched matmuls, so one call computes what ``P``
separate calls would, for little more than the cost of one on a CPU (where small networks are
dominated by per-call overhead, not arithmetic).

Members stack when their architectures have the same *structure* (:func:`structure_key`: layer
types and counts, activations, norm eps and residual flags; widths may differ). MLP hidden layers
may differ in activation too (``structure_key(..., activations=False)``): a
:class:`StackedDenseBlock` applies each member's own activation to its rows, so a mutated
activation does not split a population; other stateless layers must be the same for every member. Members narrower
than the widest are zero-padded: each member's weights sit in the leading corner of the stacked
tensor, layer norms normalise over each member's own units only, and the padding stays exactly
zero through forward passes, gradients (masked, see :func:`padding_mask`) and Adam updates, so
every member computes what it computes alone (noisy layers: :mod:`~agile_core.networks.stacked_noisy`).
LSTM layers stack too, padded per gate (:mod:`~agile_core.networks.stacked_lstm`).
Networks with layers that have no population version here (convolutions, PReLU) raise
:class:`NotStackableError` and callers fall back to running the members one by one. :func:`bind_members` makes the members' parameters views of the stacked ones.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator, Sequence
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from agile_core.networks.base import EvolvableModule
from agile_core.networks.layers import DenseBlock
from agile_core.networks.lstm import LstmLayer
from agile_core.networks.noisy import NoisyLinear
from agile_core.networks.stack_padding import NotStackableError, corner, stack_padded
from agile_core.networks.stacked_lstm import StackedLstmLayer, StackedLstmWeights
from agile_core.networks.stacked_noisy import StackedNoisyLinear

__all__ = [
    "FlatParameters",
    "NotStackableError",
    "StackedDenseBlock",
    "StackedLayerNorm",
    "StackedLinear",
    "bind_members",
    "corner",
    "is_bound",
    "member_layout",
    "member_parameters",
    "member_range",
    "normalise_member_units",
    "padding_mask",
    "stack_modules",
    "structure_key",
]


SIZE_KEYS = frozenset({"num_inputs", "num_outputs", "latent_dim", "input_shape", "hidden_size", "hidden_state_size",
                       "num_layers", "norm_eps", "residual"})
"""Config entries :func:`structure_key` ignores: sizes, per-layer eps (node growth rescales it)
and the layer list itself, of which only the number of plain (non-residual) layers counts."""


def _without_sizes(config: object, ignored: frozenset[str] = SIZE_KEYS) -> object:
    if isinstance(config, dict):
        key = {name: _without_sizes(value, ignored) for name, value in config.items() if name not in ignored}
        if "residual" in config:
            key["plain_layers"] = sum(1 for flag in config["residual"] if not flag)
        return key
    if isinstance(config, list):
        return [_without_sizes(value, ignored) for value in config]
    return config


def structure_key(module: nn.Module, *, activations: bool = True) -> str:
    """A string equal for two networks exactly when they can be stacked together (with padding):
    their architectures differ at most in layer widths, latent size and inserted residual layers
    (sizes a network class lists in ``stacking_sizes`` must be equal too). Without `activations`,
    hidden activations are left out: networks equal in that key stack when their activations
    differ only in MLP hidden layers (:func:`stack_modules` raises otherwise)."""
    if isinstance(module, EvolvableModule):
        config = module.config
        fixed = {name: config.get(name) for name in getattr(module, "stacking_sizes", ())}
        ignored = SIZE_KEYS if activations else SIZE_KEYS | {"activation"}
        return (f"{type(module).__qualname__}:{json.dumps(_without_sizes(config, ignored), sort_keys=True, default=str)}"
                f"{json.dumps(fixed, sort_keys=True, default=str) if fixed else ''}")
    raise NotStackableError(f"{type(module).__name__} is not an EvolvableModule")


def _flatten_middle(x: torch.Tensor) -> tuple[torch.Tensor, tuple[int, ...]]:
    """``[P, *batch, k] -> [P, prod(batch), k]``, with the batch shape to restore."""
    return x.reshape(x.shape[0], -1, x.shape[-1]), tuple(x.shape[1:-1])


class StackedLinear(nn.Module):
    """``P`` linear layers: ``[P, ..., in] -> [P, ..., out]`` with one batched matmul.

    Weights keep the members' layout (``weight`` ``[P, out, in]``) and are read transposed by a
    single ``baddbmm`` (``bias`` ``[P, 1, out]``): for narrow outputs (a Q head's two actions)
    the batched matmul kernel is several times faster on a transposed right operand than on a
    contiguous one, and as fast at square sizes. :meth:`member_layout` maps the bias to the
    members' ``[out]``.
    """

    def __init__(self, layers: Sequence[nn.Linear]) -> None:
        super().__init__()
        self.weight = nn.Parameter(stack_padded([layer.weight for layer in layers]))
        self.bias = nn.Parameter(stack_padded([layer.bias.unsqueeze(0) for layer in layers])) \
            if layers[0].bias is not None else None

    @staticmethod
    def member_layout(name: str, tensor: torch.Tensor) -> torch.Tensor:
        """A view of a stacked ``weight``/``bias``-shaped tensor in the members' layout."""
        return tensor if name == "weight" else tensor.squeeze(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply member ``p``'s layer to ``x[p]``."""
        if x.dim() != 3:
            return self.forward(_flatten_middle(x)[0]).reshape(*x.shape[:-1], self.weight.shape[1])
        if self.bias is None:
            return torch.bmm(x, self.weight.transpose(1, 2))
        return torch.baddbmm(self.bias, x, self.weight.transpose(1, 2))


class StackedLayerNorm(nn.Module):
    """``P`` LayerNorms over the last dimension (per-member gain and bias ``[P, 1, n]``).

    Members of different widths or eps normalise over their own units with their own eps:
    ``unit_mask`` ``[P, 1, n]`` marks the units, ``unit_counts`` and ``unit_eps`` ``[P, 1, 1]`` give
    their number and the eps (all None when every member is ``n`` wide with the same eps).
    """

    unit_mask: torch.Tensor | None
    unit_counts: torch.Tensor | None
    unit_eps: torch.Tensor | None

    def __init__(self, norms: Sequence[nn.LayerNorm]) -> None:
        super().__init__()
        first = norms[0]
        if any(len(norm.normalized_shape) != 1 or not norm.elementwise_affine for norm in norms):
            raise NotStackableError("only affine LayerNorms over the last dimension stack")
        widths = [int(norm.normalized_shape[0]) for norm in norms]
        self.normalized_shape = (max(widths),)
        self.eps = float(first.eps)
        self.weight = nn.Parameter(stack_padded([norm.weight.unsqueeze(0) for norm in norms]))
        self.bias = nn.Parameter(stack_padded([norm.bias.unsqueeze(0) for norm in norms])) if first.bias is not None else None
        if len(set(widths)) == 1 and len({float(norm.eps) for norm in norms}) == 1:
            self.unit_mask = self.unit_counts = self.unit_eps = None
        else:
            like = first.weight
            units = torch.arange(max(widths), device=like.device)
            counts = torch.tensor(widths, device=like.device)
            eps = torch.tensor([float(norm.eps) for norm in norms], device=like.device, dtype=like.dtype)
            self.register_buffer("unit_mask", (units < counts[:, None]).to(like.dtype).unsqueeze(1), persistent=False)
            self.register_buffer("unit_counts", counts.to(like.dtype).reshape(-1, 1, 1), persistent=False)
            self.register_buffer("unit_eps", eps.reshape(-1, 1, 1), persistent=False)

    @staticmethod
    def member_layout(name: str, tensor: torch.Tensor) -> torch.Tensor:
        """A view of a stacked gain/bias-shaped tensor in the members' ``[n]`` layout."""
        return tensor.squeeze(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise each member's rows, then apply that member's gain and bias."""
        if x.dim() != 3:
            return self.forward(_flatten_middle(x)[0]).reshape(x.shape)
        if self.unit_mask is None:
            normalised = F.layer_norm(x, self.normalized_shape, eps=self.eps)
        else:  # each member's own units only (padding is zero in and out)
            assert self.unit_counts is not None and self.unit_eps is not None
            normalised = normalise_member_units(x, self.unit_mask, self.unit_counts, self.unit_eps)[0]
        if self.bias is None:
            return normalised * self.weight
        return torch.addcmul(self.bias, normalised, self.weight)


def normalise_member_units(x: torch.Tensor, mask: torch.Tensor, counts: torch.Tensor,
                           eps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Layer norm without affine of zero-padded members ``[P, rows, n]``, over each member's own
    units (`mask` ``[P, 1, n]``, `counts` ``[P, 1, 1]``) with its own `eps` ``[P, 1, 1]``:
    ``(normalised, mean, rstd)``, the last two ``[P, rows, 1]``; padding comes out zero (and, under
    autograd, gets no gradient)."""
    mean = (x * mask).sum(dim=-1, keepdim=True) / counts
    centered = (x - mean).mul_(mask)
    rstd = torch.rsqrt(torch.linalg.vecdot(centered, centered).unsqueeze(-1) / counts + eps)
    return centered * rstd, mean, rstd


ActivationRuns = tuple[tuple[slice, nn.Module], ...]
"""Runs of consecutive members sharing an activation: ``((members, activation), ...)``."""


def activation_runs(activations: Sequence[nn.Module]) -> ActivationRuns | None:
    """The members' activations as runs of equal ones (None when all are equal)."""
    runs: list[tuple[int, nn.Module]] = []
    for index, activation in enumerate(activations):
        if not runs or repr(runs[-1][1]) != repr(activation) or type(runs[-1][1]) is not type(activation):
            runs.append((index, activation))
    if len(runs) == 1:
        return None
    stops = [start for start, _ in runs[1:]] + [len(activations)]
    return tuple((slice(start, stop), activation) for (start, activation), stop in zip(runs, stops, strict=True))


def apply_by_member(runs: ActivationRuns, x: torch.Tensor) -> torch.Tensor:
    """Each run's activation applied to its members' rows of ``x`` ``[P, ...]``."""
    out = torch.empty_like(x)
    for members, activation in runs:
        out[members] = activation(x[members])
    return out


class StackedDenseBlock(nn.Module):
    """``P`` :class:`DenseBlock` hidden layers (optionally residual with a per-member gate); each
    member keeps its own activation (``member_activations``: None when they are all the same)."""

    shortcut: torch.Tensor

    def __init__(self, blocks: Sequence[DenseBlock]) -> None:
        super().__init__()
        first = blocks[0]
        self.main = StackedLinear([block.main for block in blocks])
        norms = [block.norm for block in blocks if block.norm is not None]
        self.norm = StackedLayerNorm(norms) if norms else None
        self.activation = _stateless(first.activation)
        self.set_member_activations(tuple(_stateless(block.activation) for block in blocks))
        self.residual = first.residual
        if self.residual:
            self.register_buffer("shortcut", stack_padded([block.shortcut.t() for block in blocks]))
            self.gate = nn.Parameter(stack_padded([block.gate.reshape(1, 1) for block in blocks]))

    def set_member_activations(self, activations: Sequence[nn.Module]) -> None:
        """Use ``activations[p]`` for member ``p`` (``activation`` itself when they are all the same)."""
        self.activation_runs: ActivationRuns | None = activation_runs(activations)
        self.member_activations: tuple[nn.Module, ...] | None = \
            None if self.activation_runs is None else tuple(activations)
        if self.activation_runs is None:
            self.activation = activations[0]

    @staticmethod
    def member_layout(name: str, tensor: torch.Tensor) -> torch.Tensor:
        """The gate ``[P, 1, 1]`` as the members' scalars ``[P]``."""
        return tensor.reshape(tensor.shape[0])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Member ``p``'s block applied to ``x[p]``."""
        if x.dim() != 3:
            return self.forward(_flatten_middle(x)[0]).reshape(*x.shape[:-1], -1)
        y = self.main(x)
        if self.norm is not None:
            y = self.norm(y)
        y = self.activation(y) if self.activation_runs is None else apply_by_member(self.activation_runs, y)
        if not self.residual:
            return y
        return torch.bmm(x, self.shortcut) + self.gate * y


def _stateless(module: nn.Module) -> nn.Module:
    """A parameter-free module is shared as is; one with weights has no population version."""
    if any(True for _ in module.parameters(recurse=True)) or any(True for _ in module.buffers(recurse=True)):
        raise NotStackableError(f"{type(module).__name__} has weights and no population version")
    return module


def _shared_stateless(modules: Sequence[nn.Module]) -> nn.Module:
    """The members' parameter-free module, shared: it must be the same for every member."""
    first = _stateless(modules[0])
    if any(type(module) is not type(first) or repr(module) != repr(first) for module in modules[1:]):
        raise NotStackableError(f"the members' {type(first).__name__} layers differ")
    return first


MemberPaths = dict[str, list[str | None]]
"""Stacked module path -> each member's path of the module it holds (None: a phantom layer)."""


def _stacked_child(children: Sequence[nn.Module], path: str, member_paths: Sequence[str],
                   paths: MemberPaths) -> nn.Module:
    first = children[0]
    paths[path] = list(member_paths)
    if type(first) is nn.Linear:
        return StackedLinear(children)  # type: ignore[arg-type]
    if type(first) is nn.LayerNorm:
        return StackedLayerNorm(children)  # type: ignore[arg-type]
    if type(first) is DenseBlock:
        return StackedDenseBlock(children)  # type: ignore[arg-type]
    if type(first) is NoisyLinear:
        return StackedNoisyLinear(children)  # type: ignore[arg-type]
    if type(first) is LstmLayer:
        return StackedLstmLayer(children)  # type: ignore[arg-type]
    if all(type(child) is nn.ModuleList for child in children) and all(
            type(block) is DenseBlock for child in children for block in cast(nn.ModuleList, child)):
        return _stacked_dense_layers([cast(nn.ModuleList, child) for child in children], path, member_paths, paths)
    if all(type(child) is nn.ModuleList for child in children) and all(
            type(layer) is LstmLayer for child in children for layer in cast(nn.ModuleList, child)):
        return _stacked_lstm_layers([cast(nn.ModuleList, child) for child in children], path, member_paths, paths)
    return _stacked_container(children, path, member_paths, paths)


def _stacked_dense_layers(lists: Sequence[nn.ModuleList], path: str, member_paths: Sequence[str],
                          paths: MemberPaths) -> nn.ModuleList:
    """Hidden dense layers aligned by their plain layers: after the k-th plain layer every member
    gets as many residual layers as the member with the most there, the missing ones as
    *phantoms* (identity residual blocks with a closed gate that no member owns)."""
    runs: list[list[list[DenseBlock]]] = []  # per member: [[plain, residual, ...], ...]
    for member_blocks in lists:
        member_runs: list[list[DenseBlock]] = []
        for module in member_blocks:
            block = cast(DenseBlock, module)
            if block.residual and member_runs:
                member_runs[-1].append(block)
            else:
                member_runs.append([block])
        runs.append(member_runs)
    if len({len(member_runs) for member_runs in runs}) != 1:
        raise NotStackableError("the members' plain hidden layers differ in number")
    layers = nn.ModuleList()
    for run in range(len(runs[0])):
        longest = max(len(member_runs[run]) for member_runs in runs)
        for position in range(longest):
            aligned: list[DenseBlock] = []
            owners: list[str | None] = []
            for member, (member_runs, blocks_of_member) in enumerate(zip(runs, lists, strict=True)):
                if position < len(member_runs[run]):
                    block = member_runs[run][position]
                    index = next(i for i, b in enumerate(blocks_of_member) if b is block)
                    aligned.append(block)
                    owners.append(f"{member_paths[member]}.{index}")
                else:
                    aligned.append(_phantom_after(member_runs[run][-1]))
                    owners.append(None)
            paths[f"{path}.{len(layers)}"] = owners
            layers.append(StackedDenseBlock(aligned))
    return layers


def _stacked_lstm_layers(lists: Sequence[nn.ModuleList], path: str, member_paths: Sequence[str],
                         paths: MemberPaths) -> nn.ModuleList:
    """LSTM layers aligned bottom up: a member with fewer layers gets *phantoms* on top (residual
    layers with a closed gate and zero weights, an exact identity that no member owns)."""
    layers = nn.ModuleList()
    for position in range(max(len(member_layers) for member_layers in lists)):
        aligned: list[LstmLayer] = []
        owners: list[str | None] = []
        for member_layers, member_path in zip(lists, member_paths, strict=True):
            if position < len(member_layers):
                aligned.append(cast(LstmLayer, member_layers[position]))
                owners.append(f"{member_path}.{position}")
            else:
                aligned.append(_phantom_lstm(cast(LstmLayer, member_layers[len(member_layers) - 1])))
                owners.append(None)
        paths[f"{path}.{position}"] = owners
        layers.append(StackedLstmLayer(aligned))
    return layers


def _phantom_lstm(top: LstmLayer) -> LstmLayer:
    """An identity residual LSTM layer (closed gate, zero weights) reading `top`'s outputs."""
    like = cast(torch.Tensor, top.lstm.weight_ih_l0)
    with torch.no_grad():
        phantom = LstmLayer(top.hidden_size, top.hidden_size, residual=True, device=like.device, dtype=like.dtype)
        for param in phantom.parameters():
            param.zero_()
    return phantom


def _phantom_after(block: DenseBlock) -> DenseBlock:
    """An identity residual layer (closed gate, zero weights) reading `block`'s outputs."""
    width = block.out_features
    like = block.main.weight
    with torch.no_grad():
        phantom = DenseBlock(width, width, block.activation_name, block.norm is not None, norm_eps=block.norm_eps,
                             residual=True, device=like.device, dtype=like.dtype)
        for param in phantom.parameters():
            param.zero_()
    return phantom


def _stacked_container(modules: Sequence[nn.Module], path: str = "", member_paths: Sequence[str] | None = None,
                       paths: MemberPaths | None = None) -> nn.Module:
    """A shallow copy of ``modules[0]`` whose children are stacked. Weights it owns directly must
    be ones its class lists in ``population_broadcast_parameters``: per-member vectors applied to
    every row (a Gaussian policy's log-std), stacked ``[P, 1, *shape]`` so they broadcast over the
    rows of ``[P, rows, ...]`` outputs."""
    member_paths = member_paths if member_paths is not None else [""] * len(modules)
    paths = paths if paths is not None else {}
    first = modules[0]
    direct = [name for name, param in first._parameters.items() if param is not None]
    if direct:
        broadcast = set(getattr(first, "population_broadcast_parameters", ()))
        if not first._modules:
            return _shared_stateless(modules)
        if not set(direct) <= broadcast:
            raise NotStackableError(f"{type(first).__name__} owns weights directly and has no population version")
    if not first._modules:
        return _shared_stateless(modules)
    container = copy.copy(first)
    if hasattr(type(first), "population_axis"):  # its forward reads a leading member axis when stacked
        container.__dict__["population_axis"] = True
    container._parameters = {name: nn.Parameter(stack_padded([cast(torch.Tensor, module._parameters[name])
                                                        for module in modules]).unsqueeze(1)) for name in direct}
    if direct:
        object.__setattr__(container, "member_layout", _broadcast_layout)
    container._buffers = dict(_shared_buffers(modules))
    container._non_persistent_buffers_set = set(first._non_persistent_buffers_set)
    container._modules = {}
    for name, child in first._modules.items():
        if child is None:
            container._modules[name] = None
            continue
        siblings = [module._modules[name] for module in modules]
        child_paths = [f"{member_path}.{name}" if member_path else name for member_path in member_paths]
        container._modules[name] = _stacked_child(siblings, f"{path}.{name}" if path else name,  # type: ignore[arg-type]
                                                  child_paths, paths)
    return container


def _broadcast_layout(name: str, tensor: torch.Tensor) -> torch.Tensor:
    """A container's broadcast weight ``[P, 1, *shape]`` as the members' ``[P, *shape]``."""
    return tensor.squeeze(1)


def _shared_buffers(modules: Sequence[nn.Module]) -> Iterator[tuple[str, torch.Tensor | None]]:
    """The buffers a container owns directly, which every member must hold equal (they are
    shared by the stacked module, e.g. an actor's action bounds)."""
    for name, buffer in modules[0]._buffers.items():
        if buffer is not None and any(
                not torch.equal(buffer, module._buffers[name]) for module in modules[1:]):  # type: ignore[arg-type]
            raise NotStackableError(f"the members' {type(modules[0]).__name__}.{name} buffers differ")
        yield name, buffer


def stack_modules(members: Sequence[nn.Module]) -> nn.Module:
    """One module computing all `members` at once on inputs with a leading population axis.

    Raises:
        NotStackableError: when the members' architectures differ or a layer has no population
            version; run the members one by one instead.
    """
    if not members:
        raise ValueError("stack_modules needs at least one member")
    keys = {structure_key(member, activations=False) for member in members}
    if len(keys) != 1:
        raise NotStackableError("the members' architectures differ in more than widths")
    devices = {p.device for member in members for p in member.parameters()}
    if len(devices) > 1:
        raise NotStackableError("the members live on different devices")
    paths: MemberPaths = {"": [""] * len(members)}
    stacked = _stacked_container(members, "", None, paths)
    object.__setattr__(stacked, "agile_member_paths", paths)  # how member_parameters finds each member's tensors
    for param, targets in member_parameters(stacked, members):
        for target in targets:
            if target is not None and (param.dim() != target.dim() + 1 or any(
                    big < small for big, small in zip(param.shape[1:], target.shape, strict=True))):
                raise NotStackableError("a stacked parameter does not line up with the members'")
    return stacked


def member_layout(stacked: nn.Module, name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """How to view a tensor shaped like stacked parameter `name` in the members' layout
    (``[P, *member_shape]``); identity for layers that store weights as the members do."""
    module_name, _, leaf = name.rpartition(".")
    module = stacked.get_submodule(module_name) if module_name else stacked
    layout = getattr(module, "member_layout", None)
    if layout is None:
        return lambda tensor: tensor
    return lambda tensor: layout(leaf, tensor)


class FlatParameters:
    """The parameters of a stacked module re-homed into one ``[P, D]`` tensor (and their
    gradients into another), so whole-population updates (Adam, norm clipping, target
    averaging) are a handful of tensor operations instead of one per parameter, with
    per-member scalars broadcast as ``[P, 1]``.

    Every parameter stays a view: ``param.data`` is ``data[:, a:b]`` reshaped and ``param.grad``
    is ``grad[:, a:b]`` reshaped (backward accumulates into it in place). Clear gradients with
    :meth:`zero_grad`, never by setting ``.grad = None``.
    """

    def __init__(self, stacked: nn.Module, with_grad: bool = True) -> None:
        named = list(stacked.named_parameters())
        self.params = [param for _, param in named]
        self.layouts = [member_layout(stacked, name) for name, _ in named]
        if not self.params:
            raise NotStackableError("the stacked module has no parameters")
        like = self.params[0]
        self.members = int(like.shape[0])
        self.spans: list[tuple[int, int]] = []
        start = 0
        for param in self.params:
            size = param[0].numel()
            self.spans.append((start, start + size))
            start += size
        self.data = torch.empty(self.members, start, device=like.device, dtype=like.dtype)
        self.grad = torch.zeros_like(self.data) if with_grad else None
        for param, (begin, end) in zip(self.params, self.spans, strict=True):
            self.data[:, begin:end].copy_(param.detach().reshape(self.members, -1))
            param.data = self.data[:, begin:end].view(param.shape)
            if self.grad is not None:
                param.grad = self.grad[:, begin:end].view(param.shape)

    def zero_grad(self) -> None:
        """Zero every gradient in place."""
        if self.grad is not None:
            self.grad.zero_()

    def slice(self, tensor: torch.Tensor, index: int) -> torch.Tensor:
        """The part of a ``[P, D]`` tensor that belongs to parameter `index`, as a view shaped
        like the members' parameter: ``[P, *member_shape]``."""
        begin, end = self.spans[index]
        return self.layouts[index](tensor[:, begin:end].view(self.params[index].shape))


def member_parameters(stacked: nn.Module,
                      members: Sequence[nn.Module]) -> Iterator[tuple[torch.Tensor, list[torch.Tensor | None]]]:
    """Pairs (stacked parameter viewed ``[P, *member_shape]`` (padded to the widest member), the
    members' parameters it holds, each in ``view[p][corner(shape)]``; None where the member has a
    phantom layer), in the stacked module's parameter order."""
    paths = _member_paths(stacked)
    for name, param in stacked.named_parameters():
        owners = _owners(paths, name, len(members))
        targets: list[torch.Tensor | None] = [None if owner is None else member.get_parameter(owner)
                                              for member, owner in zip(members, owners, strict=True)]
        yield member_layout(stacked, name)(param), targets


def _member_paths(stacked: nn.Module) -> MemberPaths:
    """The member paths of every stacked module inside `stacked` (e.g. an actor and a critic
    stacked separately and held together), with their prefixes."""
    def join(prefix: str, path: str) -> str:
        return f"{prefix}.{path}" if prefix and path else prefix or path

    paths: MemberPaths = {}
    for prefix, module in stacked.named_modules():
        for path, owners in getattr(module, "agile_member_paths", {}).items():
            paths[join(prefix, path)] = [None if owner is None else join(prefix, owner) for owner in owners]
    return paths


def _owners(paths: MemberPaths, name: str, members: int) -> list[str | None]:
    """Each member's name for stacked parameter `name`: the nearest mapped enclosing module's
    member path plus the rest of the name (the same name when nothing is mapped)."""
    head, rest = name, ""
    while head:
        head, _, last = head.rpartition(".")
        rest = f"{last}.{rest}" if rest else last
        if head in paths:
            return [None if owner is None else (f"{owner}.{rest}" if owner else rest) for owner in paths[head]]
    return [name] * members


def bind_members(stacked: nn.Module, members: Sequence[nn.Module]) -> None:
    """Make every member parameter a view of its place in the stacked parameters (call after
    :class:`FlatParameters` has re-homed them): members and the stacked module then share their
    weights, so an update of either is seen by both, with nothing to copy back."""
    for param, targets in member_parameters(stacked, members):
        for index, target in enumerate(targets):
            if target is not None:
                target.data = param.detach()[index][corner(target.shape)]


def is_bound(stacked_param: torch.Tensor, target: torch.Tensor, index: int) -> bool:
    """Whether member parameter `target` is still the view :func:`bind_members` made of row
    `index` of `stacked_param` (viewed in the members' layout)."""
    return target.data_ptr() == stacked_param[index].data_ptr()


def padding_mask(stacked: nn.Module, members: Sequence[nn.Module], flat: FlatParameters) -> torch.Tensor | None:
    """A ``[P, D]`` 0/1 mask of `flat` (the stacked module's parameters) that is 1 on the entries
    holding a member's own weights and 0 on padding; None when no member is padded."""
    mask = torch.zeros_like(flat.data)
    for index, (_, targets) in enumerate(member_parameters(stacked, members)):
        view = flat.slice(mask, index)
        for member, target in enumerate(targets):
            if target is not None:
                view[member][corner(target.shape)] = 1.0
    return None if bool(mask.all()) else mask


def member_range(stacked: nn.Module, start: int, stop: int) -> nn.Module:
    """Members ``start:stop`` of a stacked module as a module of their own (inputs
    ``[stop - start, ...]``) whose parameters are views of the stacked ones: it follows their
    updates, and its gradients accumulate into those members' rows of the stacked gradients."""
    def view(tensor: torch.Tensor | None) -> torch.Tensor | None:
        if tensor is None:
            return None
        part = tensor.detach()[start:stop]
        if tensor.requires_grad:
            part.requires_grad_(True)
            if tensor.grad is not None:
                part.grad = tensor.grad[start:stop]
        return part

    def copy_tree(module: nn.Module) -> nn.Module:
        per_member = isinstance(module, StackedLinear | StackedLayerNorm | StackedDenseBlock | StackedNoisyLinear
                                | StackedLstmLayer | StackedLstmWeights)
        if not per_member and not module._modules:
            return module  # stateless
        clone = copy.copy(module)
        clone.__dict__ = dict(module.__dict__)
        if per_member:
            clone._parameters = {name: view(param) for name, param in module._parameters.items()}  # type: ignore[misc]
            clone._buffers = {name: view(buffer) for name, buffer in module._buffers.items()}
        clone._modules = {name: None if child is None else copy_tree(child) for name, child in module._modules.items()}
        if isinstance(module, StackedDenseBlock) and module.member_activations is not None:
            cast(StackedDenseBlock, clone).set_member_activations(module.member_activations[start:stop])
        fused = module.__dict__.get("agile_fused")
        if fused is not None:
            clone.__dict__["agile_fused"] = fused.members(start, stop)
        heads = module.__dict__.get("agile_fused_heads")
        if heads is not None:
            clone.__dict__["agile_fused_heads"] = {name: chain.members(start, stop) for name, chain in heads.items()}
        tree = module.__dict__.get("agile_fused_tree")
        if tree is not None:
            clone.__dict__["agile_fused_tree"] = tree.members(start, stop)
        return clone

    return copy_tree(stacked)
