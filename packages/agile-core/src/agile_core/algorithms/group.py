"""Population groups: members of one algorithm learning as one ``[P, ...]`` computation.

Every algorithm writes its learning step once, over a leading member axis (see
:meth:`~agile_core.algorithms.base.EvolvableAlgorithm.learn_population`): batches shaped
``[P, batch, ...]`` with per-row loss weights (padding and idle members weigh 0), hyperparameters
as per-member columns, and networks that take ``[P, rows, ...]`` inputs. A :class:`MemberGroup`
supplies exactly that for any members of one algorithm whose networks stack:

* ``nets[name]``: each of the algorithm's *stacks* (:meth:`population_stacks`: by default every
  registered network on its own; twin critics may share one stack of ``K * P`` rows, row
  ``k * P + p`` being member ``p``'s ``k``-th network) as one stacked module
  (:func:`~agile_core.networks.stacked.stack_modules`) whose MLPs run fused;
* ``optimizers[attr]``: one :class:`~agile_core.networks.stacked_adam.StackedAdam` per optimizer
  the algorithm registered, each member keeping its own learning rate and Adam state;
* :meth:`column`: a hyperparameter of every member as a ``[P, 1]`` tensor;
* :meth:`step` and :meth:`soft_update`: the optimizer step and target averaging, for the active
  members only.

The members' parameters and Adam states *are* views of the group's stacked tensors
(:func:`~agile_core.networks.stacked.bind_members`), so nothing is ever copied back: an agent
read during or after a group's life (acting, checkpoints, cloning) sees the group's latest
weights. A single agent learns through a group of one (:meth:`EvolvableAlgorithm.solo_group`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from agile_core.distributed.data_parallel import average_gradients
from agile_core.networks.fused import fuse_stacked_mlps
from agile_core.networks.stacked import (
    FlatParameters,
    NotStackableError,
    bind_members,
    is_bound,
    member_layout,
    member_range,
    stack_modules,
    structure_key,
)
from agile_core.networks.stacked_adam import StackedAdam, clip_flat_grad_norm

if TYPE_CHECKING:
    from agile_core.algorithms.base import EvolvableAlgorithm

__all__ = ["MemberGroup", "PopulationBatch", "StaleGroupError", "forward_with_free_rows", "group_key", "make_member_groups",
           "member_rows", "repeat_members", "with_member_axis"]


class StaleGroupError(RuntimeError):
    """A member's networks or optimizer changed (mutation, restore, another group) after its group
    was built; build a new group."""


@dataclass
class PopulationBatch:
    """Transitions laid out ``[P, rows, ...]``: ``weights[p]`` is ``1 / batch_size`` on member ``p``'s
    own rows and 0 on padding (a weighted row sum is each member's mean over its own batch)."""

    obs: Any
    action: torch.Tensor
    reward: torch.Tensor
    next_obs: Any
    done: torch.Tensor
    weights: torch.Tensor

    @classmethod
    def of_one(cls, experiences: Sequence[Any], device: torch.device | str) -> PopulationBatch:
        """One agent's flat batch ``(obs, action, reward, next_obs, terminated, ...)`` as ``P = 1``."""
        obs, action, reward, next_obs, done = tuple(experiences)[:5]
        reward = torch.as_tensor(reward, device=device, dtype=torch.float32).reshape(1, -1)
        rows = reward.shape[1]
        return cls(obs=_leading(obs, device), action=torch.as_tensor(action, device=device).unsqueeze(0),
                   reward=reward, next_obs=_leading(next_obs, device),
                   done=torch.as_tensor(done, device=device, dtype=torch.float32).reshape(1, rows),
                   weights=torch.full((1, rows), 1.0 / rows, device=device))

    @classmethod
    def of_rows(cls, flat: Sequence[Any], members: int, weights: torch.Tensor) -> Any:
        """A gathered flat batch ``(obs, action, reward, next_obs, done, ...)`` of member-major rows
        ``[P * rows, ...]`` laid out ``[P, rows, ...]`` with loss `weights` ``[P, rows]``."""
        obs, action, reward, next_obs, done = (member_rows(item, members) for item in tuple(flat)[:5])
        return cls(obs=obs, action=action, reward=reward.to(torch.float32), next_obs=next_obs,
                   done=done.to(torch.float32), weights=weights)


def _leading(field: Any, device: torch.device | str) -> Any:
    """A flat batch field (array, tensor, dict or tuple of them) with a leading member axis of 1."""
    if isinstance(field, Mapping):
        return {key: _leading(value, device) for key, value in field.items()}
    if isinstance(field, tuple):
        return tuple(_leading(value, device) for value in field)
    return torch.as_tensor(np.asarray(field) if not isinstance(field, torch.Tensor) else field,
                           device=device).unsqueeze(0)


def with_member_axis(inputs: Any) -> Any:
    """Inputs (a tensor, or a dict or tuple of them) with a leading member axis of 1."""
    return _map(lambda tensor: tensor.unsqueeze(0), inputs)


def member_rows(obs: Any, members: int) -> Any:
    """Member-major rows ``[P * rows, ...]`` (array, tensor, dict or tuple of them) as ``[P, rows, ...]``."""
    def split(field: Any) -> Any:
        if isinstance(field, Mapping):
            return {key: split(value) for key, value in field.items()}
        if isinstance(field, tuple):
            return tuple(split(value) for value in field)
        array = field if isinstance(field, torch.Tensor) else np.asarray(field)
        return array.reshape(members, -1, *array.shape[1:])
    return split(obs)


def repeat_members(inputs: Any, repeat: int) -> Any:
    """Inputs ``[P, ...]`` (a tensor, or dicts and tuples of them) as ``[repeat * P, ...]``: every
    member's rows once for each of the ``K = repeat`` networks it has in a stack."""
    if repeat == 1:
        return inputs
    return _map(lambda tensor: torch.cat([tensor] * repeat), inputs)


def forward_with_free_rows(network: Callable[[Any], Any], inputs: Any, free_inputs: Any) -> tuple[Any, Any]:
    """``(network(inputs), network(free_inputs) without gradient)``: the rows a loss
    differentiates and the rows it only reads (e.g. a learner's batch and the next observations
    it bootstraps from)."""
    with torch.no_grad():
        free = network(free_inputs)
    return network(inputs), free


def group_by_architecture(population: Sequence[Any], key: Callable[[Any], str],
                          order: Callable[[Any], Any] | None = None) -> list[tuple[list[int], list[Any]]]:
    """``[(slots, agents)]``: the agents split by ``key(agent)`` (groups in order of their first
    slot). Within a group, agents are in slot order, or sorted by ``order(agent)`` (stable) when given."""
    by_key: dict[str, list[int]] = {}
    for slot, agent in enumerate(population):
        by_key.setdefault(key(agent), []).append(slot)
    groups = list(by_key.values())
    if order is not None:
        groups = [sorted(slots, key=lambda slot: order(population[slot])) for slots in groups]
    return [(slots, [population[slot] for slot in slots]) for slots in groups]


def make_member_groups(population: Sequence[EvolvableAlgorithm],
                       order: Callable[[Any], Any] | None = None) -> list[tuple[list[int], MemberGroup]]:
    """``[(slots, group)]``: the population split into groups by :func:`group_key` (in order of
    their first slot; within a group slot order, or sorted by ``order(agent)``, stable). Members
    whose networks differ in activation outside MLP hidden layers are split by their full key;
    agents whose networks still do not stack (convolutions, LSTMs of other sizes...) get groups of one."""
    groups: list[tuple[list[int], MemberGroup]] = []
    for slots, members in group_by_architecture(population, _key_or_self, order=order):
        try:
            groups.append((slots, MemberGroup(members)))
            continue
        except NotStackableError:
            pass
        by_full_key: dict[str, list[int]] = {}
        for index, member in enumerate(members):
            by_full_key.setdefault(_key_or_self(member, activations=True), []).append(index)
        for indices in by_full_key.values():
            part = [members[index] for index in indices]
            try:
                groups.append(([slots[index] for index in indices], MemberGroup(part)))
            except NotStackableError:
                groups.extend(([slots[index]], MemberGroup([members[index]])) for index in indices)
    return groups


def _key_or_self(agent: EvolvableAlgorithm, activations: bool = False) -> str:
    try:
        return group_key(agent, activations=activations)
    except NotStackableError:  # a network with no structure key: alone
        return f"alone:{id(agent)}"


def group_key(agent: EvolvableAlgorithm, *, activations: bool = False) -> str:
    """Equal for two agents when they can learn in one group: same algorithm settings
    (:meth:`population_key`) and stackable networks (with `activations`, also the same activations
    everywhere; without, MLP hidden layers may differ, see :func:`structure_key`)."""
    stacks = agent.population_stacks()
    return "|".join([agent.population_key(),
                     *(structure_key(getattr(agent, name), activations=activations)
                       for names in stacks.values() for name in names)])


@dataclass
class _Binding:
    """What a member held when the group was built: to tell whether the group is still its own."""

    member: Any
    attr: str
    module: Any
    param: torch.Tensor
    stacked: torch.Tensor
    row: int


class MemberGroup:
    """Members of one algorithm, stacked (see the module docstring).

    Args:
        members: Agents of exactly one algorithm class with equal :func:`group_key`.
        fused: Run stacked MLPs as fused chains (the default); False keeps plain stacked modules.

    Raises:
        NotStackableError: when the members cannot learn together (different classes or
            settings, a network or optimizer with no population version); they then need
            groups of their own.
    """

    def __init__(self, members: Sequence[EvolvableAlgorithm], fused: bool = True) -> None:
        if not members:
            raise ValueError("a MemberGroup needs at least one member")
        first = members[0]
        algorithm = type(first)
        if any(type(member) is not algorithm for member in members):
            raise NotStackableError("a group holds agents of one algorithm class")
        if len({member.population_key() for member in members}) != 1:
            raise NotStackableError(f"the {algorithm.__name__} members differ in settings a group must share")
        first.check_population_support(own_learn_allowed=True)
        self.members: list[Any] = list(members)  # one algorithm's agents, read through its own attributes
        self.algorithm: type[Any] = algorithm
        self.device = first.device
        self.size = len(members)
        self.stacks = dict(first.population_stacks())
        self.nets: dict[str, nn.Module] = {}
        self.optimizers: dict[str, StackedAdam] = {}
        self.frozen: dict[str, FlatParameters] = {}
        self._optimizer_stacks: dict[str, list[str]] = {}
        self._bindings: list[_Binding] = []
        self._unit_modules: dict[str, nn.Module] = {}
        self._columns: dict[tuple[str, int], tuple[tuple[Any, ...], torch.Tensor]] = {}
        self._optimizer_objects = [(member, slot.attr, getattr(member, slot.attr))
                                   for slot in first._optimizers for member in members]
        self.stacked = True
        if self.size == 1 and self._runs_best_alone():
            self._unit()
            return
        try:
            self._stack(fused)
        except NotStackableError:
            if self.size > 1:
                raise
            self._unit()

    def _runs_best_alone(self) -> bool:
        """Whether a network of the only member holds a module that runs faster unstacked
        (``stack_alone = False``, e.g. an LSTM through ``nn.LSTM``'s own kernel)."""
        member = self.members[0]
        return any(getattr(module, "stack_alone", True) is False for names in self.stacks.values()
                   for name in names for module in getattr(member, name).modules())

    def _unit(self) -> None:
        """A group of one whose networks do not stack (convolutions...) or run best alone (LSTMs): the
        member's own networks, each wrapped to take and give a leading member axis of 1, and its
        own optimizers."""
        self.stacked = False
        member = self.members[0]
        self.nets = {stack: _UnitStack([getattr(member, name) for name in names]) for stack, names in self.stacks.items()}
        self._unit_modules = {name: getattr(member, name) for names in self.stacks.values() for name in names}

    def _stack(self, fused: bool) -> None:
        members, first = self.members, self.members[0]
        stack_of = {name: stack for stack, names in self.stacks.items() for name in names}
        self._modules: dict[str, list[nn.Module]] = {}
        for stack, names in self.stacks.items():
            modules = [getattr(member, name) for name in names for member in members]
            self.nets[stack] = stack_modules(modules)
            self._modules[stack] = modules
        for slot in first._optimizers:
            stacks = list(dict.fromkeys(stack_of[name] for name in slot.networks))
            repeats = {len(self.stacks[stack]) for stack in stacks}
            if len(repeats) != 1 or any(set(self.stacks[stack]) - set(slot.networks) for stack in stacks):
                raise NotStackableError(f"optimizer {slot.attr} does not cover whole stacks of equal size")
            repeat = repeats.pop()
            learner, member_nets = self._learner(stacks)
            optimizers = [getattr(member, slot.attr) for _ in range(repeat) for member in members]
            self.optimizers[slot.attr] = StackedAdam(learner, member_nets, optimizers)
            self._optimizer_stacks[slot.attr] = stacks
        trained = {stack for stacks in self._optimizer_stacks.values() for stack in stacks}
        for stack, net in self.nets.items():
            if stack not in trained:
                net.requires_grad_(False)
                self.frozen[stack] = FlatParameters(net, with_grad=False)
                bind_members(net, self._modules[stack])
        if fused:
            for net in self.nets.values():
                fuse_stacked_mlps(net)
        self._bindings = list(self._first_bindings())

    def _learner(self, stacks: list[str]) -> tuple[nn.Module, list[nn.Module]]:
        """The stacked module an optimizer trains and the member modules of each of its rows."""
        if len(stacks) == 1:
            return self.nets[stacks[0]], self._modules[stacks[0]]
        learner = nn.ModuleDict({stack: self.nets[stack] for stack in stacks})
        rows = len(self._modules[stacks[0]])
        return learner, [nn.ModuleDict({stack: self._modules[stack][row] for stack in stacks}) for row in range(rows)]

    def _first_bindings(self) -> Iterator[_Binding]:
        for stack, names in self.stacks.items():
            net = self.nets[stack]
            name, param = next(iter(net.named_parameters()))
            stacked = member_layout(net, name)(param)
            for row, module in enumerate(self._modules[stack]):
                member = self.members[row % self.size]
                attr = names[row // self.size]
                yield _Binding(member, attr, module, next(iter(module.parameters())), stacked, row)

    def __len__(self) -> int:
        return self.size

    def copy_of(self, stack: str, index: int) -> nn.Module:
        """Network `index` of every member in a stack of ``K`` per member (``stacks[stack][index]``;
        member ``p``'s copy ``k`` is row ``k * P + p``), taking inputs ``[P, ...]``: a view of those
        rows that follows the stacked parameters and trains as the stack does now (cached; the
        stack itself when ``K`` is 1)."""
        whole = self.nets[stack]
        if len(self.stacks[stack]) == 1:
            return whole
        key = (stack, index, next(whole.parameters()).requires_grad)
        cache: dict[tuple[str, int, bool], nn.Module] = self.__dict__.setdefault("_copies", {})
        part = cache.get(key)
        if part is None:
            if isinstance(whole, _UnitStack):
                part = _UnitStack([whole.networks[index]])
            else:
                part = member_range(whole, index * self.size, (index + 1) * self.size)
            cache[key] = part
        return part

    def each_copy(self, stack: str, *inputs: Any) -> torch.Tensor:
        """Every member's ``K`` networks of `stack` on the member's inputs ``[P, rows, ...]``, as one
        call: outputs ``[K, P, rows, ...]``."""
        repeat = len(self.stacks[stack])
        out = self.nets[stack](*repeat_members(inputs, repeat))
        return out.reshape(repeat, self.size, *out.shape[1:])

    @contextmanager
    def frozen_stack(self, stack: str) -> Iterator[None]:
        """Within this block gradients flow through `stack`'s networks but not into their
        parameters (e.g. an actor's objective through its critics)."""
        cache: dict[str, list[torch.Tensor]] = self.__dict__.setdefault("_stack_parameters", {})
        params = cache.get(stack)
        if params is None:
            params = cache[stack] = [param for param in self.nets[stack].parameters() if param.requires_grad]
        for param in params:
            param.requires_grad_(False)
        try:
            yield
        finally:
            for param in params:
                param.requires_grad_(True)

    # ------------------------------------------------------------------ validity
    def is_current(self) -> bool:
        """Whether every member still holds the networks, parameters and optimizers this group
        was built from, bound to it (a mutation, a restore or another group ends that)."""
        if not self.stacked:
            member = self.members[0]
            return all(getattr(member, name) is module for name, module in self._unit_modules.items()) and \
                all(getattr(member, attr) is optimizer for _, attr, optimizer in self._optimizer_objects)
        for binding in self._bindings:
            if getattr(binding.member, binding.attr) is not binding.module or \
                    next(iter(binding.module.parameters())) is not binding.param or \
                    not is_bound(binding.stacked, binding.param, binding.row):
                return False
        for member, attr, optimizer in self._optimizer_objects:
            if getattr(member, attr) is not optimizer:
                return False
        return all(adam.states_bound() for adam in self.optimizers.values())

    def check_current(self) -> None:
        """Raise :class:`StaleGroupError` unless :meth:`is_current`."""
        if not self.is_current():
            raise StaleGroupError(f"a {self.algorithm.__name__} member changed after its group was built; "
                                  "build a new group")

    # ------------------------------------------------------------------ hyperparameters
    def column(self, name: str, dtype: torch.dtype = torch.float32, repeat: int = 1) -> torch.Tensor:
        """Every member's hyperparameter `name` as a ``[repeat * P, 1]`` tensor (cached while the
        values stay the same)."""
        values = tuple(getattr(member, name) for member in self.members)
        cached = self._columns.get((name, repeat))
        if cached is not None and cached[0] == values and cached[1].dtype == dtype:
            return cached[1]
        tensor = torch.tensor(list(values) * repeat, dtype=dtype, device=self.device).unsqueeze(1)
        self._columns[(name, repeat)] = (values, tensor)
        return tensor

    def flags(self, active: Sequence[bool], repeat: int = 1) -> torch.Tensor:
        """``active`` as a float ``[repeat * P, 1]`` mask."""
        return torch.tensor(list(active) * repeat, dtype=torch.float32, device=self.device).unsqueeze(1)

    # ------------------------------------------------------------------ updates
    def step(self, optimizer: str, losses: torch.Tensor, active: Sequence[bool],
             max_grad_norm: float | torch.Tensor | None = None) -> None:
        """Backpropagate the members' `losses` (``[P]``, or ``[K * P]`` for an optimizer over stacks
        of ``K`` networks per member; their sum is differentiated, so each member's gradient is
        its own) into `optimizer`'s parameters only, clip each member's gradient norm to
        `max_grad_norm` (one value or a ``[P]`` column) and take an Adam step for the `active` members.

        Every parameter that requires grad in the graph of `losses` receives a gradient: freeze
        networks that must not (``requires_grad_(False)``) while building it."""
        if not self.stacked:
            self._unit_step(optimizer, losses, max_grad_norm)
            return
        adam = self.optimizers[optimizer]
        adam.zero_grad()
        with warnings.catch_warnings():  # gradients are strided views of one flat buffer, by design
            warnings.filterwarnings("ignore", message="grad and param do not obey the gradient layout contract")
            losses.sum().backward()
        average_gradients([adam.flat.grad])
        adam.mask_padding()
        if max_grad_norm is not None:
            clip_flat_grad_norm(adam.flat, max_grad_norm)
        repeat = adam.flat.members // self.size
        adam.step(None if all(active) else list(active) * repeat)

    def soft_update(self, target: str, online: str, tau: torch.Tensor, active: Sequence[bool]) -> None:
        """``target <- tau * online + (1 - tau) * target`` for the active members (`tau` a ``[P, 1]``
        column); `online` must be the only stack of its optimizer."""
        if not self.stacked:
            if active[0]:
                rate = float(tau.reshape(-1)[0])
                with torch.no_grad():
                    for name_online, name_target in zip(self.stacks[online], self.stacks[target], strict=True):
                        online_net, target_net = self._unit_modules[name_online], self._unit_modules[name_target]
                        for param, target_param in zip(online_net.parameters(), target_net.parameters(), strict=True):
                            target_param.lerp_(param, rate)
                        for buffer, target_buffer in zip(online_net.buffers(), target_net.buffers(), strict=True):
                            target_buffer.copy_(buffer)
            return
        flat = self.frozen[target]
        source = next(adam.flat for attr, adam in self.optimizers.items() if self._optimizer_stacks[attr] == [online])
        repeat = flat.members // self.size
        weight = tau.repeat(repeat, 1) if repeat > 1 else tau
        if not all(active):
            weight = weight * self.flags(active, repeat)
        with torch.no_grad():
            flat.data.lerp_(source.data, weight)

    def _unit_step(self, optimizer: str, losses: torch.Tensor, max_grad_norm: float | torch.Tensor | None) -> None:
        """:meth:`step` of a group of one with its member's own optimizer."""
        member_optimizer: torch.optim.Optimizer = getattr(self.members[0], optimizer)
        params = [param for group in member_optimizer.param_groups for param in group["params"]]
        member_optimizer.zero_grad()
        losses.sum().backward()
        average_gradients(param.grad for param in params)
        if max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(params, float(torch.as_tensor(max_grad_norm).reshape(-1)[0]))
        member_optimizer.step()

    def finish(self, active: Sequence[bool], losses: Sequence[Any]) -> list[Any]:
        """Each member's losses, None for the idle ones."""
        return [loss if on else None for on, loss in zip(active, losses, strict=True)]

    # ------------------------------------------------------------------ member ranges
    def select(self, active: Sequence[bool]) -> MemberGroup:
        """The smallest contiguous range of members that holds every active one, as a group of
        its own sharing this group's tensors (``offset`` is its first member's index here); this
        group itself when the range is all of it or its stacks cannot be cut (twin-critic stacks,
        unstacked groups). Callers pass ``active[offset:offset + len(view)]`` with it."""
        flags = list(active)
        start = flags.index(True)
        stop = len(flags) - flags[::-1].index(True)
        if stop - start == self.size or not self.stacked or any(len(names) > 1 for names in self.stacks.values()):
            return self
        view = self._ranges.get((start, stop)) if hasattr(self, "_ranges") else None
        if view is None:
            view = _MemberRange(self, start, stop)
            self.__dict__.setdefault("_ranges", {})[(start, stop)] = view
        return view

    offset = 0


class _MemberRange(MemberGroup):
    """Members ``start:stop`` of a stacked group: range views of its stacked networks; steps and
    target updates go through the whole group's optimizers with the other members idle."""

    def __init__(self, whole: MemberGroup, start: int, stop: int) -> None:
        self.whole, self.offset = whole, start
        self.members = whole.members[start:stop]
        self.algorithm, self.device, self.size = whole.algorithm, whole.device, stop - start
        self.stacks, self.stacked = whole.stacks, True
        self.nets = {stack: member_range(net, start, stop) for stack, net in whole.nets.items()}
        self.optimizers, self.frozen = whole.optimizers, whole.frozen
        self._columns = {}

    def _whole_active(self, active: Sequence[bool]) -> list[bool]:
        flags = [False] * self.whole.size
        flags[self.offset:self.offset + self.size] = list(active)
        return flags

    def column(self, name: str, dtype: torch.dtype = torch.float32, repeat: int = 1) -> torch.Tensor:
        """The whole group's column, these members' rows."""
        return self.whole.column(name, dtype)[self.offset:self.offset + self.size]

    def is_current(self) -> bool:
        return self.whole.is_current()

    def step(self, optimizer: str, losses: torch.Tensor, active: Sequence[bool],
             max_grad_norm: float | torch.Tensor | None = None) -> None:
        padded = losses.new_zeros(self.whole.size)
        padded[self.offset:self.offset + self.size] = losses
        if isinstance(max_grad_norm, torch.Tensor) and max_grad_norm.numel() == self.size:
            full = max_grad_norm.new_ones(self.whole.size)
            full[self.offset:self.offset + self.size] = max_grad_norm.reshape(-1)
            max_grad_norm = full
        self.whole.step(optimizer, padded, self._whole_active(active), max_grad_norm)

    def soft_update(self, target: str, online: str, tau: torch.Tensor, active: Sequence[bool]) -> None:
        full = self.whole.column("tau").new_zeros(self.whole.size, 1)
        full[self.offset:self.offset + self.size] = tau
        self.whole.soft_update(target, online, full, self._whole_active(active))

    def select(self, active: Sequence[bool]) -> MemberGroup:
        return self


class _UnitStack(nn.Module):
    """A member's own network(s) taking and giving a leading member axis of 1 (``K`` networks:
    inputs ``[K, rows, ...]``, row ``k`` to network ``k``), for groups of one that cannot stack.
    Only ``forward`` is translated: other methods of the networks are not reachable through it
    (they would see the member axis as a batch axis)."""

    def __init__(self, networks: Sequence[nn.Module]) -> None:
        super().__init__()
        self.networks = nn.ModuleList(networks)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if len(self.networks) == 1:
            return _map(lambda t: t.unsqueeze(0), self.networks[0](*_map(lambda t: t.squeeze(0), args),
                                                                     **_map(lambda t: t.squeeze(0), kwargs)))
        outputs = [network(*_map(lambda t, k=k: t[k], args), **_map(lambda t, k=k: t[k], kwargs))
                   for k, network in enumerate(self.networks)]
        return torch.stack(outputs)


def _map(fn: Any, value: Any) -> Any:
    """`fn` applied to every tensor inside `value` (nested tuples, lists and dicts)."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, dict):
        return {key: _map(fn, item) for key, item in value.items()}
    if isinstance(value, tuple | list):
        return type(value)(_map(fn, item) for item in value)
    return value
