"""``backend="ray"``: the generation loop on the driver, members' phases in Ray actors.

The driver builds the population exactly as a local run does and drives it through the
shared :class:`~agile_core.training.generations.GenerationLoop` (reporting, selection,
mutation, elite, checkpoints, Ctrl-C, resume). Only a generation's training and evaluation
leave the process: each member is sent as agent bytes to its worker, trained there with the
paradigm's own phase from the seed the local loop would use for it, and sent back; its
fitness is computed by the worker that trained it. Seeded runs therefore equal the local
agent-by-agent run (``training.batch_population: false``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agile_core.distributed.errors import BackendError
from agile_core.distributed.options import RayOptions
from agile_core.distributed.pool import Placement, WorkerPool
from agile_core.distributed.session import import_ray, ray_session
from agile_core.threads import resolve_threads

if TYPE_CHECKING:
    from agile_core.specs.manifest import TrainingManifest
    from agile_core.trainer import LocalTrainer
    from agile_core.training.generations import GenerationLoop, PhaseResult
    from agile_core.training.options import RunOptions

def supported_paradigms() -> list[str]:
    """Installed paradigms the Ray backend can train (those whose members train in a phase)."""
    from agile_core.registry import paradigms

    return sorted(name for name, paradigm in paradigms().items() if paradigm.trains_on_ray)


def check_supported(trainer: LocalTrainer, options: RayOptions) -> None:
    """BackendError unless the Ray backend can run this trainer's manifest."""
    from agile_core.registry import paradigm_of

    paradigm = paradigm_of(trainer.manifest.algorithm.name)
    if not paradigm.trains_on_ray:
        raise BackendError(f"backend ray does not support paradigm {paradigm.name} yet "
                           f"(supported: {', '.join(supported_paradigms()) or 'none installed'}); "
                           "use --backend local")
    if trainer.env_object is not None:
        raise BackendError("backend ray builds the environment in every worker from the manifest: "
                           "give the environment by name, not as an env object")
    if trainer.device.startswith("cuda") and options.gpus_per_worker <= 0:
        raise BackendError(f"backend ray with device {trainer.device!r} needs GPUs per worker "
                           "(--ray-gpus-per-worker / RayOptions.gpus_per_worker > 0)")


class RemotePopulation:
    """Trains and evaluates the driver's members on a :class:`WorkerPool`."""

    def __init__(self, ray: Any, pool: WorkerPool) -> None:
        self.ray = ray
        self.pool = pool
        self.loop: GenerationLoop | None = None
        self.trained_on: dict[int, Placement] = {}

    def _loop(self) -> GenerationLoop:
        if self.loop is None:
            raise RuntimeError("RemotePopulation.loop must be set before training")
        return self.loop

    def train_population(self, agents: list[Any], vector_steps: list[int],
                         should_stop: Callable[[], bool]) -> list[PhaseResult]:
        """Every member's phase at once (a `PopulationPhaseFn`, member ``p`` for
        ``vector_steps[p]``; one with none left stays as it is); members are updated in place."""
        from agile_core.training.generations import PhaseResult

        members = [(slot, agent) for slot, agent in enumerate(agents) if vector_steps[slot] > 0]
        trained = dict(zip([slot for slot, _ in members],
                           self.train_slots(members, [vector_steps[slot] for slot, _ in members], should_stop),
                           strict=True))
        return [trained.get(slot, PhaseResult(vector_steps=0)) for slot in range(len(agents))]

    def train_member(self, slot: int, agent: Any, vector_steps: int, should_stop: Callable[[], bool]) -> PhaseResult:
        """One member's phase (a `PhaseFn`)."""
        return self.train_slots([(slot, agent)], [vector_steps], should_stop)[0]

    def train_slots(self, members: list[tuple[int, Any]], vector_steps: list[int],
                    should_stop: Callable[[], bool] | None = None) -> list[PhaseResult]:
        """Train `members` ((slot, agent) pairs) remotely, each for its entry of `vector_steps`;
        load the results into the agents.

        On Ctrl-C (`should_stop`) the phases in flight are abandoned: every member is left as it
        was and reports 0 steps, so the loop's interrupt checkpoint is the state before this
        phase and resuming it trains the same phase from the same seeds."""
        from agile_core.distributed.agent_bytes import agent_to_bytes, load_agent_bytes
        from agile_core.training.generations import PhaseResult

        if not members:
            return []
        loop = self._loop()
        sent = {slot: self.ray.put(agent_to_bytes(agent)) for slot, agent in members}
        seeds = {slot: loop.phase_seed(slot) for slot, _ in members}
        steps = {slot: int(count) for (slot, _), count in zip(members, vector_steps, strict=True)}

        def submit(actor: Any, slot: int, fresh: bool) -> Any:
            return actor.train.remote(slot, sent[slot], steps[slot], seeds[slot])

        outcome = self.pool.run(sent, submit, "training", should_stop)
        if outcome is None:
            return [PhaseResult(vector_steps=0) for _ in members]
        results = []
        for slot, agent in members:
            (trained, result), placement = outcome[slot]
            load_agent_bytes(agent, trained)
            self.trained_on[slot] = placement
            results.append(PhaseResult(**result))
        return results

    def evaluate_population(self, agents: list[Any]) -> list[float]:
        """Every member's fitness, computed by its worker (a `PopulationEvalFn`); appended to
        each agent's ``fitness`` like ``agent.test`` does."""
        from agile_core.distributed.agent_bytes import agent_to_bytes

        loop = self._loop()
        seeds = {slot: loop.phase_seed(loop.eval_position(slot)) for slot in range(len(agents))}

        def submit(actor: Any, slot: int, fresh: bool) -> Any:
            held = not fresh and self.pool.holds(self.trained_on.get(slot))
            payload = None if held else self.ray.put(agent_to_bytes(agents[slot]))
            return actor.evaluate.remote(slot, payload, seeds[slot])

        outcome = self.pool.run(range(len(agents)), submit, "evaluation")
        assert outcome is not None  # only a run given `should_stop` can be abandoned
        self.trained_on.clear()
        fitnesses = [float(outcome[slot][0]) for slot in range(len(agents))]
        for agent, fitness in zip(agents, fitnesses, strict=True):
            agent.fitness.append(fitness)
        return fitnesses


def train_with_ray(trainer: LocalTrainer, options: RayOptions, run_options: Callable[[Any, Any], RunOptions],
                   threads: int | None = None) -> tuple[list[Any], list[float]]:
    """Run `trainer` with its members' phases on Ray; `run_options(selection, mutation)` gives
    the run's options (from the manifest and `LocalTrainer.train`'s arguments); each worker
    computes with `threads` torch threads (default: by :mod:`agile_core.threads`, within its CPUs). Returns
    (population, fitnesses of the last evaluation), like the local loops."""
    check_supported(trainer, options)
    import_ray()  # fail before the population is built when Ray is missing
    manifest = trainer.manifest
    env, population, selection, mutation = trainer.setup()
    with ray_session(options) as ray:
        resources = ray.cluster_resources()
        count = options.worker_count(len(population), resources.get("CPU", 0.0), resources.get("GPU", 0.0))
        actor_class = _actor_class(ray, options)
        payload = manifest.to_dict()
        base_dir = str(manifest.base_dir)
        cpus = max(1, int(options.cpus_per_worker))
        threads = resolve_threads(population, threads, cores=cpus) or cpus  # None: the user's variables

        def spawn() -> Any:
            return actor_class.remote(payload, base_dir, trainer.device, threads)

        with WorkerPool(ray, spawn, count, options.max_retries) as pool:
            remote = RemotePopulation(ray, pool)
            run = run_options(selection, mutation)
            loop = _generation_loop(manifest, env, population, remote.train_member, run, workers=count)
            remote.loop = loop
            loop.batch_population(remote.train_population, remote.evaluate_population, loop.env, loop.num_envs)
            trainer.lost_workers = pool.lost
            return loop.train(run.resume_from_checkpoint)


def _actor_class(ray: Any, options: RayOptions) -> Any:
    from agile_core.distributed.worker import MemberWorker

    return ray.remote(MemberWorker).options(num_cpus=options.cpus_per_worker, num_gpus=options.gpus_per_worker,
                                            max_restarts=0)


def _generation_loop(manifest: TrainingManifest, env: Any, population: list[Any], phase: Any, options: RunOptions,
                     *, workers: int) -> GenerationLoop:
    """The driver's loop, with the options a local run gives its paradigm loop."""
    from agile_core.algorithms.protocols import CollectsWholeRollouts, has_capability
    from agile_core.training.envs import as_vector_env
    from agile_core.training.generations import GenerationLoop

    vec_env = as_vector_env(env)
    config = {"env_name": manifest.environment.name, "algo": manifest.algorithm.name,
              "population_size": len(population), "num_envs": int(vec_env.num_envs), **options.logged(),
              "backend": "ray", "ray_workers": workers}
    # On-policy agents (those with rollouts) take whole rollouts per generation, as their local loop.
    whole_rollouts = all(has_capability(agent, CollectsWholeRollouts) for agent in population)
    return GenerationLoop.create(population, vec_env, phase, manifest.algorithm.name, manifest.environment.name,
                                 options, config=config, swap_channels=options.swap_channels,
                                 whole_rollouts=whole_rollouts)
