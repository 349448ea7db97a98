"""The agent API every paradigm implements, and the generic machinery behind mutation and cloning.

An algorithm declares its networks (which one is the policy, which follow its architecture),
its optimizers (which networks, which learning-rate attribute) and its mutable hyperparameters.
Mutation, cloning, weight migration and checkpoints then work for every algorithm alike.
"""

from __future__ import annotations

import copy
import functools
import inspect
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Self

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from agile_core.algorithms.spaces import UnsupportedSpaceError, check_agent_spaces, check_space
from agile_core.dynamo_free import skip_dynamo_import
from agile_core.hpo.hyperparameters import HyperparameterConfig, RLParameter
from agile_core.hpo.lineage import Lineage
from agile_core.hpo.mutation import AMPLIFIED_SCALE, AMPLIFIED_SHARE, RESET_SHARE, NoiseBands
from agile_core.networks.base import EvolvableModule, MutationError

if TYPE_CHECKING:
    from agile_core.algorithms.group import MemberGroup
    from agile_core.specs.algorithm import AlgorithmSpec


def _recording_init(init: Callable[..., None]) -> Callable[..., None]:
    """Wrap `__init__` so the outermost call records its arguments (for checkpoints)."""
    signature = inspect.signature(init)

    @functools.wraps(init)
    def wrapper(self: EvolvableAlgorithm, *args: Any, **kwargs: Any) -> None:
        if "_init_args" not in self.__dict__:
            bound = signature.bind(self, *args, **kwargs)
            bound.apply_defaults()
            arguments = dict(bound.arguments)
            arguments.pop("self", None)
            extra = arguments.pop(next((p.name for p in signature.parameters.values()
                                        if p.kind is inspect.Parameter.VAR_KEYWORD), "__none__"), {})
            self.__dict__["_init_args"] = {**arguments, **extra}
        init(self, *args, **kwargs)

    return wrapper


@dataclass
class OptimizerSlot:
    """An optimizer attribute of an algorithm: the networks it trains and its learning-rate attribute."""

    attr: str
    networks: tuple[str, ...]
    lr_attr: str
    factory: Callable[..., torch.optim.Optimizer] = torch.optim.Adam
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class NetworkGroup:
    """A policy network and the networks that repeat its architecture mutations."""

    policy: str
    followers: tuple[str, ...] = ()


class EvolvableAlgorithm(ABC):
    """Base of every agent: fitness, lineage, declared networks/optimizers/hyperparameters."""

    spec_class: ClassVar[type[AlgorithmSpec] | None] = None
    """The algorithm's registered spec: the one home of its hyperparameters, their defaults, their
    rules and which ones are mutable (:meth:`adopt_hyperparameters`)."""
    hyperparameter_names: ClassVar[tuple[str, ...]] = ()
    """Hyperparameters stored as attributes (saved in checkpoints, shown in reports): the spec's
    mutable ones when the class sets `spec_class`."""
    _init_args: dict[str, Any]
    """The constructor's arguments, as the outermost ``__init__`` received them (for checkpoints)."""
    supports_per_and_n_step: ClassVar[bool] = False
    """Whether `learn` takes the batches of prioritized and n-step replay (importance weights,
    indices to re-prioritize, n-step returns); off-policy loops refuse those memories otherwise."""

    @property
    def reads_one_step_transitions(self) -> bool:
        """With an n-step companion memory (``supports_per_and_n_step``): whether a learning step
        reads the 1-step transitions of its batch as well as their n-step view. When not, the
        batched off-policy loop gathers the n-step view alone and passes it as the batch."""
        return True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is not None:
            cls.__init__ = _recording_init(init)  # type: ignore[method-assign]
        if "spec_class" in cls.__dict__ and cls.spec_class is not None and "hyperparameter_names" not in cls.__dict__:
            cls.hyperparameter_names = cls.spec_class.mutable_hyperparameters()

    def adopt_hyperparameters(self, arguments: Mapping[str, Any]) -> AlgorithmSpec:
        """Check the constructor's hyperparameter `arguments` (pass its ``locals()``) against
        :attr:`spec_class` (a ValueError naming the first it refuses) and set each of the spec's
        hyperparameters as an attribute, typed as the spec types it (``lr=1`` becomes ``1.0``);
        return the checked spec. A hyperparameter adopted earlier and not among `arguments` keeps
        its value: a subclass adopts its own arguments first, then its base adopts the ones it takes."""
        if self.spec_class is None:
            raise TypeError(f"{type(self).__name__} sets no spec_class to read its hyperparameters from")
        adopted = {name: self.__dict__[name] for name in self.spec_class.model_fields if name in self.__dict__}
        spec = self.spec_class.from_arguments({**adopted, **arguments})
        for name in type(spec).model_fields:
            if name not in spec.switches:
                setattr(self, name, getattr(spec, name))
        return spec

    def __init__(self, *, index: int = 0, hp_config: HyperparameterConfig | None = None,
                 device: str | torch.device = "cpu") -> None:
        self.index = index
        self.device = torch.device(device)
        self.hp_config = hp_config or HyperparameterConfig()
        self.fitness: list[float] = []
        self.scores: list[float] = []
        self.steps = 0
        self.learn_counter = 0
        self.lineage = Lineage(id=index)
        self.mut = "None"
        self.__dict__.setdefault("_init_args", {})  # recorded by the outermost subclass __init__
        self._groups: list[NetworkGroup] = []
        self._optimizers: list[OptimizerSlot] = []

    # ------------------------------------------------------------------ declarations
    def register_network_group(self, policy: str, *followers: str) -> None:
        """Declare `policy` (mutated) and the networks that replay its architecture changes."""
        self._groups.append(NetworkGroup(policy, tuple(followers)))

    def register_optimizer(self, attr: str, networks: Sequence[str], lr_attr: str,
                           factory: Callable[..., torch.optim.Optimizer] = torch.optim.Adam,
                           **kwargs: Any) -> None:
        """Create `self.<attr>` over the parameters of `networks` with learning rate `self.<lr_attr>`."""
        slot = OptimizerSlot(attr, tuple(networks), lr_attr, factory, kwargs)
        self._optimizers.append(slot)
        setattr(self, attr, self._build_optimizer(slot))

    def _build_optimizer(self, slot: OptimizerSlot) -> torch.optim.Optimizer:
        skip_dynamo_import()
        params = _unique_params(getattr(self, name) for name in slot.networks)
        return slot.factory(params, lr=float(getattr(self, slot.lr_attr)), **slot.kwargs)

    @property
    def network_names(self) -> list[str]:
        """Every registered network (policies first)."""
        names: list[str] = []
        for group in self._groups:
            names.extend(n for n in (group.policy, *group.followers) if n not in names)
        return names

    @property
    def policy_name(self) -> str:
        """The network whose mutations every other one follows."""
        return self._groups[0].policy

    def hyperparameters(self) -> dict[str, Any]:
        """Current values of the declared hyperparameters."""
        return {name: getattr(self, name) for name in self.hyperparameter_names}

    # ------------------------------------------------------------------ agent API
    @abstractmethod
    def get_action(self, obs: Any, *args: Any, **kwargs: Any) -> Any:
        """Choose actions for a batch of observations."""

    @abstractmethod
    def learn(self, *args: Any, **kwargs: Any) -> Any:
        """One learning update; returns the losses."""

    @abstractmethod
    def test(self, env: Any, *args: Any, **kwargs: Any) -> float:
        """Greedy evaluation; appends the score to `fitness` and returns it."""

    # ------------------------------------------------------------------ population-shaped learning
    @classmethod
    def learn_population(cls, group: MemberGroup, batch: Any, active: Sequence[bool]) -> list[Any]:
        """The algorithm's learning step, written once for a group of ``P`` members (see
        :mod:`agile_core.algorithms.group`): one update for every `active` member from its part
        of `batch` (laid out ``[P, rows, ...]``); return each member's losses (None if idle).
        A single agent's ``learn`` is the ``P = 1`` case (:meth:`solo_group`)."""
        raise NotImplementedError(f"{cls.__name__} has no population-shaped learning step")

    @classmethod
    def act_population(cls, group: MemberGroup, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        """The algorithm's acting rule for a group, for network inputs ``[P, rows, ...]``, each
        member exploring its own way; a single agent's ``get_action`` is its ``P = 1`` case.
        Off-policy algorithms take ``(epsilons, action_masks=None, training=True)`` per member and
        give env actions ``[P * rows, ...]``; each paradigm's loop documents what it passes."""
        raise NotImplementedError(f"{cls.__name__} has no population-shaped acting rule")

    def population_stacks(self) -> dict[str, tuple[str, ...]]:
        """Stack name -> the networks stacked together in a group (``K`` per member, rows
        ``k * P + p``); by default every registered network is its own stack."""
        return {name: (name,) for name in self.network_names}

    def population_key(self) -> str:
        """What members of one group must share beyond stackable networks (algorithm, device,
        spaces; algorithms add the settings their learning step reads from the first member)."""
        return repr((type(self).__qualname__, str(self.device), self._spaces_key()))

    def _spaces_key(self) -> tuple[str, str]:
        """The observation and action spaces in :meth:`population_key` (none here)."""
        return repr(None), repr(None)

    def check_population_support(self, own_learn_allowed: bool = False) -> None:
        """Raise ``NotStackableError`` (with the reason) when this agent cannot learn in a group:
        no population-shaped step, or (unless `own_learn_allowed`, as for a group of one that the
        agent's own ``learn`` builds) a subclass that overrides ``learn`` without it, whose
        population would otherwise skip its ``learn``."""
        from agile_core.networks.stacked import NotStackableError

        cls = type(self)
        step_owner = _owner(cls, "learn_population")
        if step_owner is EvolvableAlgorithm or _owner(cls, "act_population") is EvolvableAlgorithm:
            raise NotStackableError(f"{cls.__name__} has no population-shaped learning step")
        learn_owner = _owner(cls, "learn")
        if not own_learn_allowed and learn_owner is not step_owner and issubclass(learn_owner, step_owner):
            raise NotStackableError(f"{cls.__name__} overrides learn() but not learn_population()")

    def solo_group(self) -> MemberGroup:
        """This agent as a group of one (cached; rebuilt when a mutation or restore changed its
        networks or optimizers): how a single agent runs the population-shaped learning step."""
        from agile_core.algorithms.group import MemberGroup

        group: MemberGroup | None = self.__dict__.get("_solo_group")
        if group is None or not group.is_current():
            group = MemberGroup([self])
            self.__dict__["_solo_group"] = group
        return group

    def __getstate__(self) -> dict[str, Any]:
        """Copies and pickles leave the cached group of one behind (it is rebuilt on demand) and
        take optimizer states of their own (a group's members hold views of its moments and share
        one step counter per member)."""
        state = dict(self.__dict__)
        state.pop("_solo_group", None)
        for slot in self._optimizers:
            if slot.attr in state:
                state[slot.attr] = _unbound_optimizer(state[slot.attr])
        return state

    # ------------------------------------------------------------------ cloning and migration
    def clone(self, index: int | None = None, wrap: bool = True) -> Self:
        """A deep, independent copy; with a new `index` the clone's lineage names this agent as
        parent and each of its numpy random generators gets its own stream."""
        twin = copy.deepcopy(self)
        if index is not None and index != self.index:
            twin.index = index
            twin.lineage = self.lineage.child(index, generation=self.lineage.generation_born)
            for name, value in vars(self).items():
                if isinstance(value, np.random.Generator):
                    # The clone's stream is seeded from the parent's, whose state checkpoints keep,
                    # so a resumed run clones exactly as an uninterrupted one (spawn() would not).
                    setattr(twin, name, np.random.default_rng(int(value.integers(2**63))))
        return twin

    def copy_weights_from(self, other: EvolvableAlgorithm) -> None:
        """Take `other`'s networks (architecture and weights), keeping own hyperparameters."""
        for name in self.network_names:
            source = getattr(other, name)
            mine = getattr(self, name)
            if not isinstance(mine, EvolvableModule) or mine.config == source.config:
                mine.load_state_dict(source.state_dict())
            else:
                setattr(self, name, source.clone())
        self.rebuild_optimizers(keep_state=False)
        self.after_architecture_change()

    # ------------------------------------------------------------------ mutations
    def mutate_architecture(self, rng: np.random.Generator, new_layer_prob: float) -> dict[str, Any] | None:
        """One layer (probability `new_layer_prob`) or node change on the policy, replayed on followers."""
        policy: EvolvableModule = getattr(self, self.policy_name)
        first, second = ("layer", "node") if rng.random() < new_layer_prob else ("node", "layer")
        names = policy.mutation_methods(first) or policy.mutation_methods(second)
        if not names:
            return None
        name = names[int(rng.integers(len(names)))]
        return self.apply_architecture_mutation(name, rng)

    def mutate_activation(self, rng: np.random.Generator) -> dict[str, Any] | None:
        """Change the activation of the policy (and the networks that follow it)."""
        names = getattr(self, self.policy_name).mutation_methods("activation")
        if not names:
            return None
        return self.apply_architecture_mutation(names[int(rng.integers(len(names)))], rng)

    def apply_architecture_mutation(self, name: str, rng: np.random.Generator | None = None,
                                    **kwargs: Any) -> dict[str, Any]:
        """Apply mutation `name` to each policy (parameters sampled once, from `rng`, unless given),
        replay it on the followers, then rebuild the optimizers keeping unchanged state."""
        before = self._named_parameters()
        # One seed for every network's new weights: seeded runs repeat, and a follower of the
        # same shape (a target network) gets exactly the weights its policy got.
        seed = int((rng if rng is not None else np.random.default_rng()).integers(2**62))
        applied: dict[str, Any] = {"mutation": name, "networks": []}
        for group in self._groups:
            policy: EvolvableModule = getattr(self, group.policy)
            if name not in policy.mutation_methods():
                continue
            resolved = policy.mutate(name, np.random.default_rng(seed), **(applied.get("kwargs") or kwargs))
            applied.setdefault("kwargs", resolved)
            applied["networks"].append(group.policy)
            for follower in group.followers:
                self._replay(follower, name, applied["kwargs"], applied["networks"], seed)
        self.rebuild_optimizers(keep_state=True, previous=before)
        self.after_architecture_change()
        return applied

    def _replay(self, network: str, name: str, kwargs: dict[str, Any], done: list[str], seed: int) -> None:
        module: EvolvableModule = getattr(self, network)
        try:
            module.mutate(name, np.random.default_rng(seed), **kwargs)
        except MutationError:
            return
        done.append(network)

    def mutate_parameters(self, rng: np.random.Generator, sd: float, *,
                          bands: NoiseBands | None = None) -> dict[str, Any] | None:
        """Perturb a few of the policy's weights: see :func:`perturb_weights`."""
        policy: nn.Module = getattr(self, self.policy_name)
        changed = perturb_weights(policy, rng, sd, bands=bands)
        return {"mutation_sd": sd, "weights_changed": changed}

    def mutate_hyperparameter(self, rng: np.random.Generator) -> dict[str, Any] | None:
        """Grow or shrink one hyperparameter of `hp_config` within its range."""
        if not self.hp_config:
            return None
        parameter: RLParameter = self.hp_config.sample(rng)
        old = getattr(self, parameter.name)
        new = parameter.mutate(old, rng)
        self.set_hyperparameter(parameter.name, new)
        return {"hyperparameter": parameter.name, "old": old, "new": new}

    def set_hyperparameter(self, name: str, value: Any) -> None:
        """Set a hyperparameter; a learning rate also updates its optimizer in place."""
        setattr(self, name, value)
        for slot in self._optimizers:
            if slot.lr_attr == name:
                for group in getattr(self, slot.attr).param_groups:
                    group["lr"] = float(value)

    def rebuild_optimizers(self, keep_state: bool, previous: dict[str, nn.Parameter] | None = None) -> None:
        """Recreate every optimizer for the current parameters, keeping the state of unchanged ones."""
        for slot in self._optimizers:
            old: torch.optim.Optimizer = getattr(self, slot.attr)
            new = self._build_optimizer(slot)
            if keep_state:
                _transfer_state(old, new, previous or {}, self._named_parameters())
            setattr(self, slot.attr, new)

    def _named_parameters(self) -> dict[str, nn.Parameter]:
        return {
            f"{name}.{pname}": param
            for name in self.network_names
            for pname, param in getattr(self, name).named_parameters()
        }

    def after_architecture_change(self) -> None:  # noqa: B027 - optional hook, empty by default
        """Hook for algorithms that cache something tied to the architecture (noise buffers...)."""

    # ------------------------------------------------------------------ checkpoints
    def extra_state(self) -> dict[str, Any]:
        """JSON state of the algorithm beyond networks and hyperparameters (exploration...)."""
        return {}

    def extra_tensors(self) -> dict[str, Any]:
        """Tensor state of the algorithm beyond networks and optimizers (noise processes...)."""
        return {}

    def load_extra_state(self, state: dict[str, Any], tensors: dict[str, Any]) -> None:  # noqa: B027
        """Restore what `extra_state` and `extra_tensors` saved."""

    def save_checkpoint(self, path: str | Path) -> Path:
        """Write this agent (architecture as mutated, weights, optimizers, state) to `path`."""
        from agile_core.algorithms.persistence import save_agent

        return save_agent(self, path)

    @classmethod
    def load(cls, path: str | Path, device: str | torch.device = "cpu") -> EvolvableAlgorithm:
        """A new agent rebuilt from a checkpoint, with its saved (mutated) architecture and state."""
        from agile_core.algorithms.persistence import (
            algorithm_class,
            decode_argument,
            read_agent,
            restore_agent,
        )
        from agile_core.algorithms.saved_state import rebuilding

        meta, tensors = read_agent(path, device)
        with rebuilding(path, "agent"):
            klass = algorithm_class(str(meta.get("algorithm")), cls)
            args = decode_argument(meta["init_args"], device)
            parameters = inspect.signature(klass).parameters
            if "device" in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
                args["device"] = device
            agent = klass(**args)
            restore_agent(agent, meta, tensors)
        return agent

    def load_checkpoint(self, path: str | Path) -> None:
        """Resume: replace this agent's networks, optimizers, hyperparameters and state with the saved ones."""
        from agile_core.algorithms.persistence import read_agent, restore_agent
        from agile_core.algorithms.saved_state import rebuilding

        meta, tensors = read_agent(path, self.device)
        with rebuilding(path, "agent"):
            restore_agent(self, meta, tensors)

    def load_weights(self, path: str | Path) -> None:
        """Warm start: take the saved architecture and weights only (fresh optimizers, own hyperparameters)."""
        from agile_core.algorithms.persistence import read_agent, restore_agent
        from agile_core.algorithms.saved_state import rebuilding

        meta, tensors = read_agent(path, self.device)
        with rebuilding(path, "agent"):
            restore_agent(self, meta, tensors, weights_only=True)


class SingleAgentAlgorithm(EvolvableAlgorithm):
    """An agent acting in one Gymnasium environment; checks its spaces at construction."""

    supported_observation_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (
        spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary, spaces.Dict, spaces.Tuple,
    )
    supported_action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = ()
    normalize_images: bool = True
    """Whether uint8 image observations are divided by 255 on their way into the networks."""

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space, **kwargs: Any) -> None:
        check_space(type(self).__name__, "observation space", observation_space, self.supported_observation_spaces)
        check_space(type(self).__name__, "action space", action_space, self.supported_action_spaces)
        super().__init__(**kwargs)
        self.observation_space = observation_space
        self.action_space = action_space

    def _spaces_key(self) -> tuple[str, str]:
        return repr(self.observation_space), repr(self.action_space)

    def population_inputs(self, obs: Any) -> Any:
        """Network inputs ``[P, rows, ...]`` of raw observations laid out ``[P, rows, ...]``."""
        from agile_core.networks.preprocessing import preprocess_population_observation

        return preprocess_population_observation(self.observation_space, obs, self.device,
                                                 bool(self.normalize_images))


class MultiAgentAlgorithm(EvolvableAlgorithm):
    """Agents acting together in a PettingZoo Parallel environment, one space per agent id."""

    supported_observation_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (
        spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary, spaces.Dict, spaces.Tuple,
    )
    supported_action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = ()

    def __init__(self, observation_spaces: Mapping[str, spaces.Space], action_spaces: Mapping[str, spaces.Space],
                 **kwargs: Any) -> None:
        name = type(self).__name__
        check_agent_spaces(name, "observation space", observation_spaces, self.supported_observation_spaces)
        check_agent_spaces(name, "action space", action_spaces, self.supported_action_spaces)
        if set(observation_spaces) != set(action_spaces):
            raise UnsupportedSpaceError(
                f"{name}: observation and action spaces name different agents "
                f"({sorted(observation_spaces)} vs {sorted(action_spaces)})"
            )
        super().__init__(**kwargs)
        self.agent_ids = list(observation_spaces)
        self.observation_spaces = dict(observation_spaces)
        self.action_spaces = dict(action_spaces)


class LLMAlgorithm(EvolvableAlgorithm):
    """Finetunes a pretrained model (e.g. a Hugging Face causal LM, with or without LoRA).

    Its networks are ordinary torch modules, not evolvable ones: architecture, activation and
    parameter-noise mutations would destroy pretrained weights, so they do nothing (the mutation
    is recorded as "None") and evolution acts on hyperparameters (`rl_hp_mut`), selection and
    cloning only.
    """

    def mutate_architecture(self, rng: np.random.Generator, new_layer_prob: float) -> dict[str, Any] | None:
        """Pretrained architectures are fixed."""
        return None

    def mutate_activation(self, rng: np.random.Generator) -> dict[str, Any] | None:
        """Pretrained activations are fixed."""
        return None

    def mutate_parameters(self, rng: np.random.Generator, sd: float, *,
                          bands: NoiseBands | None = None) -> dict[str, Any] | None:
        """Pretrained weights are not perturbed."""
        return None


def _unbound_optimizer(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """A shallow copy of `optimizer` whose per-parameter state tensors are its own clones."""
    twin = copy.copy(optimizer)
    twin.state = defaultdict(dict, {
        param: {key: value.clone() if isinstance(value, torch.Tensor) else value for key, value in state.items()}
        for param, state in optimizer.state.items()})
    return twin


def _owner(cls: type, attribute: str) -> type:
    """The class in `cls`'s MRO that defines `attribute`."""
    return next(klass for klass in cls.__mro__ if attribute in vars(klass))


NORM_LAYERS = (nn.LayerNorm, nn.modules.batchnorm._BatchNorm, nn.GroupNorm, nn.modules.instancenorm._InstanceNorm)

MUTATED_FRACTION = 0.1
"""At most this share of a chosen weight tensor's entries is perturbed by one parameter mutation."""


def perturb_weights(network: nn.Module, rng: np.random.Generator, sd: float, *,
                    bands: NoiseBands | None = None) -> int:
    """The parameter-noise mutation (the established "classic" semantics): perturb a few weights
    of `network` in place; return how many entries changed.

    Only weight tensors (two or more dimensions) outside normalisation layers are candidates:
    biases, norm gains and gates keep their values. A random non-empty subset of the candidates is
    chosen; in each, a random number (1 to 10% of its entries) of randomly placed entries get
    Gaussian noise with standard deviation `sd` times their own magnitude, so a weight moves by
    about ``sd`` of itself and a zero weight stays zero. A trained network therefore keeps most of
    its function (noise on every entry at the tensor's scale, as before, often destroyed it).
    `bands` adds the amplified and random-reset bands (:class:`NoiseBands`).
    """
    bands = bands or NoiseBands()
    candidates = [param for module in network.modules() if not isinstance(module, NORM_LAYERS)
                  for param in module.parameters(recurse=False)
                  if param.is_floating_point() and param.dim() >= 2 and param.numel() > 0]
    if not candidates or (sd <= 0 and not (bands.amplified or bands.random_reset)):
        return 0
    chosen = rng.choice(len(candidates), size=int(rng.integers(1, len(candidates) + 1)), replace=False)
    generator = torch.Generator().manual_seed(int(rng.integers(0, 2**62)))
    changed = 0
    with torch.no_grad():
        for position in sorted(int(p) for p in chosen):
            param = candidates[position]
            flat = param.detach().reshape(-1).clone()
            count = int(rng.integers(1, max(1, int(np.ceil(MUTATED_FRACTION * flat.numel()))) + 1))
            where = torch.as_tensor(rng.choice(flat.numel(), size=count, replace=False), device=param.device)
            noise = torch.randn(count, generator=generator, dtype=param.dtype).to(param.device)
            values = flat[where]
            if bands.amplified or bands.random_reset:
                draw = torch.as_tensor(rng.random(count), device=param.device)
                amplified = draw < AMPLIFIED_SHARE
                reset = (draw >= AMPLIFIED_SHARE) & (draw < AMPLIFIED_SHARE + RESET_SHARE)
                updated = values + noise * sd * values.abs()
                updated = torch.where(amplified, values + noise * AMPLIFIED_SCALE * values.abs() if bands.amplified
                                      else values, updated)
                updated = torch.where(reset, noise if bands.random_reset else values, updated)
                changed += int((updated != values).sum())
                flat[where] = updated
            else:
                flat[where] = values + noise * sd * values.abs()
                changed += count
            param.copy_(flat.view_as(param))
    return changed


def _unique_params(modules: Iterable[nn.Module]) -> list[nn.Parameter]:
    seen: dict[int, nn.Parameter] = {}
    for module in modules:
        for param in module.parameters():
            seen.setdefault(id(param), param)
    return list(seen.values())


def _transfer_state(old: torch.optim.Optimizer, new: torch.optim.Optimizer,
                    before: dict[str, nn.Parameter], after: dict[str, nn.Parameter]) -> None:
    """Copy per-parameter optimizer state to the new optimizer where the parameter survived.

    A parameter survives when it is the same tensor object, or when the same name has the same
    shape (a module that was rebuilt without changing that tensor).
    """
    by_name_before = {name: param for name, param in before.items()}
    for name, param in after.items():
        source = param if param in old.state else None
        if source is None and name in by_name_before:
            candidate = by_name_before[name]
            if candidate.shape == param.shape and candidate in old.state:
                source = candidate
        if source is not None:  # tensors cloned alone (they may be views of a population's moments)
            new.state[param] = {key: value.clone() if isinstance(value, torch.Tensor) else copy.deepcopy(value)
                                for key, value in old.state[source].items()}
