"""`Trainer` and `LocalTrainer`: one manifest in, a trained population out.

The trainer is paradigm-free: it validates the manifest, asks the algorithm's registered
:class:`~agile_core.registry.Paradigm` for the environment and (for paradigms whose members are
not built from spaces) the population, builds the rest from the registered specs, and hands
everything to the paradigm's ``run_loop`` with the options every loop shares as a
:class:`~agile_core.training.options.RunOptions`; the loop reads its own settings (the replay
buffer of off-policy algorithms, for example) from the manifest's sections.
"""

from __future__ import annotations

import importlib
import inspect
import os
import warnings
from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from agile_core.devices import check_device
from agile_core.distributed.data_parallel import check_accelerator
from agile_core.distributed.options import BACKENDS, RayOptions
from agile_core.errors import ManifestError, ManifestIssue, RunWarning
from agile_core.registry import algorithm_spec, paradigm_of
from agile_core.specs.algorithm import AlgorithmSpec
from agile_core.specs.env import EnvSpec
from agile_core.specs.manifest import TrainingManifest
from agile_core.specs.mutation import MutationSpec
from agile_core.specs.selection import MultiFrequencySelectionSpec, TournamentSelectionSpec
from agile_core.specs.training import ReplayBufferSpec, TrainingSpec

if TYPE_CHECKING:
    from agile_core.training.options import RunOptions


class TrainerConfigError(ValueError):
    """Trainer arguments that contradict each other (e.g. resume and warm start together)."""


def _selection_alias(selection_strategy: Any, kwargs: dict[str, Any]) -> Any:
    tournament = kwargs.pop("tournament", None)
    if kwargs:
        raise TypeError(f"unexpected trainer arguments: {', '.join(sorted(kwargs))}")
    if tournament is None:
        return selection_strategy
    warnings.warn("`tournament` is deprecated; use `selection_strategy`", DeprecationWarning, stacklevel=3)
    if selection_strategy is not None:
        raise TrainerConfigError("give `selection_strategy` or its deprecated alias `tournament`, not both")
    return tournament


class Trainer(ABC):
    """Base of the trainers: holds a validated manifest built from specs, names or env objects."""

    def __init__(self, algorithm: AlgorithmSpec | str, environment: Any, training: TrainingSpec | None = None,
                 mutation: MutationSpec | None = None, selection_strategy: Any = None,
                 replay_buffer: ReplayBufferSpec | None = None, **kwargs: Any) -> None:
        selection_strategy = _selection_alias(selection_strategy, kwargs)
        spec = _algorithm_spec(algorithm)
        self.env_object: Any = None
        if isinstance(environment, EnvSpec):
            env_spec = environment
        elif isinstance(environment, str):
            env_spec = paradigm_of(spec.name).env_spec(name=environment)
        else:
            if not all(callable(getattr(environment, name, None)) for name in ("reset", "step")):
                raise TypeError("environment must be an environment id such as 'CartPole-v1', an environment spec, "
                                f"or an environment object with reset() and step(), got {environment!r}")
            self.env_object = environment
            env_spec = paradigm_of(spec.name).env_spec(name=_env_name(environment), num_envs=_num_envs(environment))
        self.manifest = TrainingManifest(
            algorithm=spec, environment=env_spec, training=training or TrainingSpec(), mutation=mutation,
            selection_strategy=selection_strategy, replay_buffer=replay_buffer,
        )

    @classmethod
    def from_manifest(cls, manifest: str | Path | dict[str, Any] | TrainingManifest, **kwargs: Any) -> Self:
        """A trainer from a YAML/JSON path, a dict or a TrainingManifest (kwargs go to the constructor)."""
        validated = TrainingManifest.get_validated(manifest)
        trainer = cls(algorithm=validated.algorithm, environment=validated.environment, training=validated.training,
                      mutation=validated.mutation, selection_strategy=validated.selection_strategy,
                      replay_buffer=validated.replay_buffer, **kwargs)
        trainer.manifest = validated
        return trainer

    @abstractmethod
    def train(self, *args: Any, **kwargs: Any) -> Any:
        """Run the training (locally or remotely)."""


def _algorithm_spec(algorithm: Any) -> AlgorithmSpec:
    """The spec `algorithm` names or is (TypeError for anything else, e.g. a spec class)."""
    if isinstance(algorithm, str):
        return algorithm_spec(algorithm).model_validate({})
    if isinstance(algorithm, AlgorithmSpec):
        return algorithm
    if isinstance(algorithm, type) and issubclass(algorithm, AlgorithmSpec):
        raise TypeError(f"algorithm: pass an instance, {algorithm.__name__}(...), not the class itself")
    raise TypeError(f"algorithm must be an algorithm name such as 'DQN' or an AlgorithmSpec, got {algorithm!r}")


def _env_name(env: Any) -> str:
    spec = getattr(env, "spec", None)
    return getattr(spec, "id", None) or type(env).__name__


def _num_envs(env: Any) -> int:
    return int(getattr(env, "num_envs", 1))


class LocalTrainer(Trainer):
    """Train on this machine: builds env and population, then runs the paradigm's loop."""

    def __init__(self, algorithm: AlgorithmSpec | str, environment: Any, training: TrainingSpec | None = None,
                 mutation: MutationSpec | None = None, selection_strategy: Any = None,
                 replay_buffer: ReplayBufferSpec | None = None, *, resume_from_checkpoint: str | None = None,
                 load_weights_from: str | None = None, hpo: bool = False, device: str = "cpu",
                 accelerator: Any = None, hp_config: Any = None, actor_network: Any = None,
                 critic_network: Any = None, actor_networks: Any = None, critic_networks: Any = None,
                 backend: str = "local", ray_options: RayOptions | None = None, **kwargs: Any) -> None:
        super().__init__(algorithm, environment, training, mutation, selection_strategy, replay_buffer, **kwargs)
        if resume_from_checkpoint is not None and load_weights_from is not None:
            raise TrainerConfigError("resume_from_checkpoint and load_weights_from are mutually exclusive: "
                                     "resume continues a run, load_weights_from starts a new one from its weights")
        if accelerator is not None:
            if backend != "local":
                raise TrainerConfigError("accelerator and backend='ray' do not combine: Ray spreads members over "
                                         "processes, Accelerate trains each member over processes")
            try:
                check_accelerator(accelerator, "LocalTrainer")
            except ValueError as error:
                raise TrainerConfigError(str(error)) from error
            device = accelerator.device
        self.accelerator = accelerator
        if backend not in BACKENDS:
            raise TrainerConfigError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        if ray_options is not None and backend != "ray":
            raise TrainerConfigError("ray_options need backend='ray'")
        self.backend = backend
        self.ray_options = ray_options or RayOptions()
        self.lost_workers: list[Any] = []
        """Ray workers lost (and replaced) during the last `train` with backend ray."""
        self.resume_from_checkpoint = _optional_path(resume_from_checkpoint, "resume_from_checkpoint")
        self.load_weights_from = _optional_path(load_weights_from, "load_weights_from")
        if not isinstance(hpo, bool):
            raise TypeError(f"hpo must be True or False, got {hpo!r}")
        self.hpo = hpo
        self.device = check_device(device, here=backend == "local") if accelerator is None else str(device)
        self.hp_config = hp_config
        self.networks = {"actor_network": actor_network, "critic_network": critic_network,
                         "actor_networks": actor_networks, "critic_networks": critic_networks}

    # ------------------------------------------------------------------ building blocks
    @property
    def evolving(self) -> bool:
        """HPO is on when the manifest says so and a mutation or selection section (or `hpo`) asks for it."""
        m = self.manifest
        return m.training.hpo and (self.hpo or m.mutation is not None or m.selection_strategy is not None)

    def make_env(self, num_envs: int | None = None) -> Any:
        """The vector env of the manifest (or the env object given to the constructor; a single
        Gymnasium env becomes a one-sub-env vector env around it)."""
        paradigm = paradigm_of(self.manifest.algorithm.name)
        if self.env_object is not None:
            if paradigm.builds_envs:  # the paradigm's own kind of env (PettingZoo...): used as it is
                return self.env_object
            from agile_core.training.envs import as_vector_env

            return as_vector_env(self.env_object)
        return paradigm.make_env(self.manifest.environment, base_dir=self.manifest.base_dir,
                                 seed=self.manifest.training.seed, num_envs=num_envs)

    def make_hp_config(self) -> Any:
        """Which hyperparameters mutate: the explicit `hp_config`, else the manifest's ranges."""
        from agile_core.hpo.hyperparameters import HyperparameterConfig

        if self.hp_config is not None:
            return self.hp_config
        if not self.evolving:
            return HyperparameterConfig()
        spec_class = type(self.manifest.algorithm)
        mutable = spec_class.mutable_hyperparameters()
        selection = {name: bounds for name, bounds in (self.manifest.resolved_mutation().rl_hp_selection or {}).items()
                     if name in mutable}  # validation warned about the others
        return HyperparameterConfig.from_selection(selection, spec_class.numeric_hyperparameters())

    def make_population(self, env: Any, hp_config: Any) -> list[Any]:
        """`pop_size` agents of the manifest's algorithm, seeded per index (or what the
        paradigm's `make_population` hook builds: ``hook(manifest, env, hp_config, device)``)."""
        spec = self.manifest.algorithm
        paradigm = paradigm_of(spec.name)
        built = paradigm.make_population(self.manifest, env, hp_config, self.device)
        if built is not None:  # paradigms whose members are not built from spaces (LLMs)
            return list(built)
        module_name, _, class_name = type(spec).algorithm_class.partition(":")
        algorithm_class = getattr(importlib.import_module(module_name), class_name)
        parameters = inspect.signature(algorithm_class).parameters
        open_ended = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())

        def accepted(name: str) -> bool:
            return name in parameters or open_ended

        seed = self.manifest.training.seed
        kwargs = dict(spec.hyperparameters())  # every spec field is a constructor argument (tested)
        if accepted("net_config") and self.manifest.network is not None:
            kwargs["net_config"] = self.manifest.network.model_dump(exclude_none=True)
        kwargs.update({k: v for k, v in self.networks.items() if v is not None and accepted(k)})
        spaces = paradigm.agent_spaces(env)
        self._check_population_fits(lambda device: algorithm_class(*spaces, index=0, hp_config=hp_config,
                                                                   device=device, **kwargs))
        population = []
        for index in range(self.manifest.training.pop_size):
            agent_kwargs = dict(kwargs)
            if accepted("seed"):
                agent_kwargs["seed"] = None if seed is None else seed + index
            population.append(algorithm_class(*spaces, index=index, hp_config=hp_config, device=self.device,
                                              **agent_kwargs))
        return population

    def _check_population_fits(self, build_member: Any) -> None:
        """ManifestError on `network` when its sizes are large and the population's networks
        would not fit in this machine's memory (see :mod:`agile_core.algorithms.footprint`)."""
        from agile_core.algorithms.footprint import LARGE_WIDTH, check_population_fits, widest_size

        network = self.manifest.network
        if network is None or widest_size(network.model_dump(exclude_none=True)) <= LARGE_WIDTH:
            return
        problem = check_population_fits(build_member, self.manifest.training.pop_size)
        if problem is not None:
            raise ManifestError([ManifestIssue(("network",), problem)])

    def make_selection_and_mutation(self) -> tuple[Any, Any]:
        """Selection strategy and Mutations objects (None, None when HPO is off)."""
        if not self.evolving:
            return None, None
        from agile_core.hpo.multi_frequency import MultiFrequencySelection
        from agile_core.hpo.mutation import Mutations
        from agile_core.hpo.selection import TournamentSelection

        training = self.manifest.training
        seed = self.manifest.resolved_mutation().rand_seed  # its own seed, else training.seed
        selection_spec = self.manifest.resolved_selection()
        if isinstance(selection_spec, MultiFrequencySelectionSpec):
            selection: Any = MultiFrequencySelection(
                population_size=training.pop_size, n_subpopulations=selection_spec.n_subpopulations,
                evolution_frequency_ratios=selection_spec.evolution_frequency_ratios,
                n_winners=selection_spec.n_winners, n_survivors=selection_spec.n_survivors,
                n_open_for_migration=selection_spec.n_open_for_migration, n_losers=selection_spec.n_losers,
                eval_loop=training.eval_loop, rng=seed)
        elif training.pop_size >= 2:
            assert isinstance(selection_spec, TournamentSelectionSpec)
            selection = TournamentSelection(min(selection_spec.tournament_size, training.pop_size),
                                            selection_spec.elitism, training.pop_size,
                                            eval_loop=training.eval_loop, rng=seed)
        else:
            selection = None
        return selection, Mutations.from_spec(self.manifest.resolved_mutation())

    def setup(self) -> tuple[Any, list[Any], Any, Any]:
        """What every backend starts from: env, population (warm-started when asked), selection
        and mutation."""
        from agile_core.training.profiling import PROFILER

        with PROFILER.setup:
            env = self.make_env()
            hp_config = self.make_hp_config()
            population = self.make_population(env, hp_config)
            if self.load_weights_from is not None:
                _warm_start(population, self.load_weights_from, self.device)
            selection, mutation = self.make_selection_and_mutation()
        return env, population, selection, mutation

    # ------------------------------------------------------------------ training
    def train(self, *args: Any, **kwargs: Any) -> tuple[list[Any], list[float]]:
        """Train; return (population, fitnesses of the last evaluation). The arguments are
        :class:`~agile_core.training.options.TrainOptions`' fields (this signature is derived
        from them): reporting (`verbose`, `wb`, `tensorboard`, `csv_path`...), saving
        (`checkpoint_steps`, `checkpoint_path`, `save_elite`, `final_checkpoint`...) and torch
        `threads` per process. With ``backend="ray"`` members train in Ray actors
        (:mod:`agile_core.distributed`), the rest of the run staying here."""
        from agile_core.train_options import TrainOptions
        from agile_core.training.options import RunOptions

        train = TrainOptions.bind(args, kwargs)
        threads = train.threads

        def options(selection: Any, mutation: Any) -> RunOptions:
            return RunOptions.from_manifest(self.manifest, train, selection=selection, mutation=mutation,
                                            accelerator=self.accelerator,
                                            resume_from_checkpoint=self.resume_from_checkpoint)

        if self.backend == "ray":
            from agile_core.distributed.ray_loop import train_with_ray

            return train_with_ray(self, self.ray_options, options, threads=threads)
        from agile_core.threads import configure_threads

        paradigm = paradigm_of(self.manifest.algorithm.name)
        env, population, selection, mutation = self.setup()
        processes = int(getattr(self.accelerator, "num_processes", None) or os.environ.get("WORLD_SIZE") or 1)
        configure_threads(population, threads, processes)
        return paradigm.run_loop(self.manifest, env, population, options(selection, mutation), self.device)


def _train_signature() -> inspect.Signature:
    from agile_core.train_options import train_signature

    return train_signature(method=True)


LocalTrainer.train.__signature__ = _train_signature()  # type: ignore[attr-defined]


def _optional_path(value: Any, name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str | os.PathLike):
        raise TypeError(f"{name} must be a path, got {value!r}")
    text = os.fspath(value)
    if "\0" in text or not text:
        raise ValueError(f"{name} must be a non-empty path without NUL bytes, got {text!r}")
    return text


def _warm_start(population: list[Any], path: str, device: str) -> None:
    """Give each agent the weights of a saved agent or of the matching member of a saved run.

    The checkpoint must hold the same algorithm for the same spaces (CheckpointError otherwise);
    a saved architecture other than the manifest's is taken, with a warning."""
    from agile_core.algorithms.base import EvolvableAlgorithm
    from agile_core.checkpoint import CheckpointError, inspect_checkpoint
    from agile_core.training.checkpointing import (
        resolve_run_checkpoint,
        resume_mismatches,
        resume_run,
    )

    target = resolve_run_checkpoint(path)
    if inspect_checkpoint(target).metadata.get("kind") == "agent":
        saved = [EvolvableAlgorithm.load(target, device=device)]
    else:
        saved = resume_run(target, device=device, weights_only=True).agents
    problems = resume_mismatches(saved, population, same_size=False)
    if problems:
        raise CheckpointError(target, "its agents do not fit this manifest: " + "; ".join(problems))
    changed = sorted({name for position, agent in enumerate(population) for name in agent.network_names
                      if _architecture_of(agent, name) != _architecture_of(saved[position % len(saved)], name)})
    if changed:
        warnings.warn(f"load_weights_from: the checkpoint's architecture of {', '.join(changed)} differs from the "
                      "manifest's network section; training starts from the checkpoint's", RunWarning, stacklevel=2)
    for position, agent in enumerate(population):
        agent.copy_weights_from(saved[position % len(saved)])


def _architecture_of(agent: Any, name: str) -> Any:
    return getattr(getattr(agent, name), "config", None)
