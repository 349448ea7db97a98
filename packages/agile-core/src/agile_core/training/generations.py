"""The generation loop every single-agent paradigm shares.

One generation: each agent in turn trains for the generation's steps (the paradigm's *phase*:
collect and learn; :class:`~agile_core.training.budget.StepBudget` says how many vector steps
each member is asked for), every agent is evaluated greedily, the run stops at the target or the
step budget, otherwise the population is selected and mutated. The budget counts the steps each
phase reports it took, not the steps it was asked for. Around that skeleton this module handles
the step budget, reporting, periodic checkpoints, elite saving, Ctrl-C (save and stop) and
resuming from a checkpoint, so the paradigm loops only write their phase.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agile_core.algorithms.protocols import PopulationMember
from agile_core.algorithms.saved_state import decode_scores, encode_scores, rebuilding
from agile_core.distributed.data_parallel import DataParallel
from agile_core.hpo.mutation import Mutations
from agile_core.hpo.protocols import SelectionStrategy
from agile_core.training.budget import StepBudget
from agile_core.training.checkpointing import (
    ResumeMismatchError,
    RunCheckpointer,
    check_resume_matches,
    resume_run,
)
from agile_core.training.divergence import DivergenceWatch
from agile_core.training.evolution import (
    EvolutionResult,
    evaluate_population,
    evolve_population,
    target_reached,
)
from agile_core.training.heap import retain_freed_memory
from agile_core.training.interrupt import InterruptGuard, TrainingInterrupted
from agile_core.training.options import RunOptions
from agile_core.training.profiling import PROFILER
from agile_core.training.reporting import TrainingReporter


@dataclass
class PhaseResult:
    """What one agent's training phase produced; `vector_steps` are the vector steps it actually
    took (each counts the loop's ``num_envs`` steps toward the budget)."""

    vector_steps: int
    episodic_returns: list[float] = field(default_factory=list)
    episode_lengths: list[int] = field(default_factory=list)
    losses: dict[str, list[float]] = field(default_factory=dict)


PhaseFn = Callable[[int, Any, int, Callable[[], bool]], PhaseResult]
"""(slot, agent, vector_steps, should_stop) -> PhaseResult. The phase must stop early (between
vector steps) once `should_stop()` is true, and report the vector steps it actually took."""

PopulationPhaseFn = Callable[[list[Any], list[int], Callable[[], bool]], list[PhaseResult]]
"""(population, vector_steps, should_stop) -> one PhaseResult per agent: the whole population
trains at once (population-batched loops), member ``p`` for up to ``vector_steps[p]`` vector steps
(the same for every member except in on-policy loops, where each collects whole rollouts of its
own ``learn_step``; 0 for a member that has finished this generation's phase)."""

PopulationEvalFn = Callable[[list[Any]], list[float]]
"""(population) -> fitnesses, appended to each agent's ``fitness`` (population-batched evaluation)."""


@dataclass
class LoopState:
    """Counters that say where a run is, and the results of this generation's finished phases
    (so a run resumed mid-generation reports the generation as an uninterrupted one); saved in
    checkpoints.

    `agent_steps` is the run's budget count: the steps per member of the finished generations
    (each counted by its least-stepped member); `total_steps` the steps the whole population took
    in them; `slot_progress` the vector steps each slot has taken in the current generation."""

    agent_steps: int = 0
    generation: int = 0
    slot_progress: list[int] = field(default_factory=list)
    phase_results: list[PhaseResult] = field(default_factory=list)
    total_steps: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON form (non-finite numbers as null)."""
        return {"agent_steps": self.agent_steps, "generation": self.generation,
                "slot_progress": list(self.slot_progress),
                "phase_results": [_result_to_json(result) for result in self.phase_results],
                "total_steps": self.total_steps}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LoopState:
        """Inverse of `to_dict` (a checkpoint without `total_steps` counts every slot at `agent_steps`);
        ValueError for a count that is not a non-negative integer."""
        progress = [_count(v, "slot_progress") for v in data["slot_progress"]]
        agent_steps = _count(data["agent_steps"], "agent_steps")
        total = data.get("total_steps")
        return cls(agent_steps, _count(data["generation"], "generation"), progress,
                   [_result_from_json(result) for result in data.get("phase_results", [])],
                   _count(total, "total_steps") if total is not None else agent_steps * len(progress))


def _count(value: Any, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**62:
        raise ValueError(f"{name} must be an integer in [0, 2**62), got {value!r}")
    return value


def _result_to_json(result: PhaseResult) -> dict[str, Any]:
    return {"vector_steps": result.vector_steps, "episodic_returns": encode_scores(result.episodic_returns),
            "episode_lengths": [int(n) for n in result.episode_lengths],
            "losses": {name: encode_scores(values) for name, values in result.losses.items()}}


def _result_from_json(data: Mapping[str, Any]) -> PhaseResult:
    return PhaseResult(_count(data["vector_steps"], "vector_steps"), decode_scores(data["episodic_returns"]),
                       [_count(n, "episode_lengths") for n in data["episode_lengths"]],
                       {str(name): decode_scores(values) for name, values in data["losses"].items()})


@dataclass
class GenerationLoop:
    """Drives a population through generations; see the module docstring."""

    population: list[PopulationMember]
    env: Any
    phase: PhaseFn
    max_steps: int
    evo_steps: int
    reporter: TrainingReporter
    eval_steps: int | None = None
    eval_loop: int = 1
    target: float | None = None
    selection: SelectionStrategy | None = None
    mutation: Mutations | None = None
    checkpointer: RunCheckpointer | None = None
    interrupt_path: str | Path | None = None
    save_elite: bool = False
    elite_path: str | Path | None = None
    swap_channels: bool = False
    buffers: Callable[[], Mapping[str, Any]] | None = None
    on_evolved: Callable[[EvolutionResult], None] | None = None
    env_seed: int | None = None
    population_phase: PopulationPhaseFn | None = None
    population_evaluate: PopulationEvalFn | None = None
    envs_per_agent: int | None = None
    data_parallel: DataParallel | None = None
    whole_rollouts: bool = False
    trim_last: bool = False
    count_per_member: bool = False
    state: LoopState = field(default_factory=LoopState)
    fitnesses: list[float] = field(default_factory=list)
    stop_requested: bool = False
    divergence: DivergenceWatch = field(default_factory=DivergenceWatch)

    @classmethod
    def create(cls, population: Sequence[PopulationMember], env: Any, phase: PhaseFn, algo: str, env_name: str, options: RunOptions,
               *, config: Mapping[str, Any], swap_channels: bool = False,
               buffers: Callable[[], Mapping[str, Any]] | None = None, whole_rollouts: bool = False,
               trim_last: bool = False, count_per_member: bool = False) -> GenerationLoop:
        """Build the loop, its reporter and checkpointer from a run's options (with an
        `accelerator`, only its main process reports and writes files). `config` is what the run
        logs as its configuration; `buffers` gives the memories a checkpoint saves;
        `whole_rollouts` and `trim_last` shape the step budget (see :attr:`budget`);
        `count_per_member` reports steps per member instead of the population's (see
        :attr:`reported_steps`). A checkpointer exists when the options ask for periodic or final
        checkpoints."""
        o = options
        data_parallel = DataParallel.of(o.accelerator)
        main = data_parallel is None or data_parallel.is_main
        total = o.max_steps if count_per_member else o.max_steps * len(population)
        reporter = TrainingReporter(total_steps=total, desc=f"{algo} {env_name}",
                                    verbose=o.verbose and main, wb=o.wb and main, tensorboard=o.tensorboard and main,
                                    tensorboard_log_dir=o.tensorboard_log_dir, wandb_api_key=o.wandb_api_key,
                                    wandb_kwargs=o.wandb_kwargs, config=dict(config),
                                    csv_path=o.csv_path if main else None)
        checkpointer = RunCheckpointer(o.checkpoint_path or "checkpoints", o.checkpoint_steps, o.overwrite_checkpoints,
                                       save_buffers=buffers is not None) \
            if (o.checkpoint_steps or o.final_checkpoint) and main else None
        return cls(population=list(population), env=env, phase=phase, max_steps=o.max_steps, evo_steps=o.evo_steps,
                   reporter=reporter, eval_steps=o.eval_steps, eval_loop=o.eval_loop, target=o.target,
                   selection=o.selection, mutation=o.mutation, checkpointer=checkpointer,
                   interrupt_path=o.checkpoint_path, save_elite=o.save_elite, elite_path=o.elite_path,
                   swap_channels=swap_channels, buffers=buffers, env_seed=o.seed, data_parallel=data_parallel,
                   whole_rollouts=whole_rollouts, trim_last=trim_last, count_per_member=count_per_member)

    def train(self, resume_from_checkpoint: str | Path | None = None,
              load_buffers: Callable[[Mapping[str, Any]], None] | None = None) -> tuple[list[Any], list[float]]:
        """Resume first when asked (handing saved buffers to `load_buffers`), then run to the end."""
        retain_freed_memory()
        if resume_from_checkpoint is not None:
            saved = self.restore(resume_from_checkpoint, device=str(self.population[0].device))
            if load_buffers is not None:
                with rebuilding(resume_from_checkpoint, "buffers"):
                    load_buffers(saved)
        elif self.env_seed is not None:
            # Actions sampled by torch (PPO's categorical and Gaussian policies) draw from torch's
            # global generator, which recent torch versions seed from OS entropy at start-up.
            import torch

            torch.manual_seed(self.env_seed)
        self.reporter.expect(self._expected_steps())
        with self.reporter, self._data_parallel_steps():
            return self.run()

    def _expected_steps(self) -> int:
        """The progress bar's total, in the unit of :attr:`reported_steps`."""
        if self.count_per_member:
            return self.budget.projected_spent(self.population, self.state.agent_steps)
        return self.state.total_steps + self.budget.projected_total(self.population, self.state.agent_steps)

    def _data_parallel_steps(self) -> contextlib.AbstractContextManager[Any]:
        return self.data_parallel.active() if self.data_parallel is not None else contextlib.nullcontext()

    @property
    def _processes(self) -> DataParallel | None:
        """The data-parallel group when there is more than one process, else None."""
        return self.data_parallel if self.data_parallel is not None and self.data_parallel.distributed else None

    @property
    def is_main(self) -> bool:
        """This process reports and writes files (always, unless data-parallel on another rank)."""
        return self.data_parallel is None or self.data_parallel.is_main

    @property
    def num_envs(self) -> int:
        """Sub-environments each agent steps at once."""
        return int(self.envs_per_agent if self.envs_per_agent is not None else self.env.num_envs)

    @property
    def budget(self) -> StepBudget:
        """The run's step budget: how many vector steps each member takes per generation and when
        the run is spent (``max_steps`` may change while the run goes on)."""
        return StepBudget(self.max_steps, self.evo_steps, self.num_envs, whole_rollouts=self.whole_rollouts,
                          trim_last=self.trim_last)

    def stop_after_generation(self) -> None:
        """End the run after the current generation's evaluation (e.g. out of wall-clock time)."""
        self.stop_requested = True

    def batch_population(self, phase: PopulationPhaseFn, evaluate: PopulationEvalFn, env: Any,
                         envs_per_agent: int) -> None:
        """Train and evaluate the whole population at once in `env`, whose sub-envs are split into
        consecutive slices of `envs_per_agent`, one per agent (instead of agent by agent)."""
        self.population_phase, self.population_evaluate = phase, evaluate
        self.env, self.envs_per_agent = env, int(envs_per_agent)

    def restore(self, checkpoint: str | Path, device: str = "cpu") -> dict[str, Any]:
        """Continue from a run checkpoint: agents, counters, selection and mutation RNG, global RNG.

        Returns the saved buffers (by name) for the paradigm to load into its memories."""
        run = resume_run(checkpoint, device=device)
        check_resume_matches(run.agents, self.population)
        with rebuilding(run.path, "loop"):
            state = LoopState.from_dict(run.loop)
        self.population = list[PopulationMember](run.agents)
        self.state = state
        if self.budget.exhausted(self.state.agent_steps):
            raise ResumeMismatchError(
                f"cannot resume: the checkpoint is at {self.state.agent_steps:,} steps per agent, which already "
                f"spends training.max_steps ({self.max_steps:,}); raise max_steps to train further")
        if self.checkpointer is not None:
            self.checkpointer.start_from(self.state.agent_steps)
        self.reporter.resume_at(self.reported_steps)
        evolution = run.evolution if isinstance(run.evolution, dict) else {}
        with rebuilding(run.path, "evolution.selection"):
            if self.selection is not None and evolution.get("selection") is not None:
                self.selection.load_state_dict(evolution["selection"])
        with rebuilding(run.path, "evolution.mutation"):
            if self.mutation is not None and evolution.get("mutation") is not None:
                self.mutation.load_state_dict(evolution["mutation"])
        return run.buffers

    def run(self) -> tuple[list[Any], list[float]]:
        """Train until the step budget or the target; return (population, last fitnesses)."""
        with InterruptGuard() as guard:
            while not self.budget.exhausted(self.state.agent_steps) and not self.stop_requested:
                budget = self.budget
                if len(self.state.slot_progress) != len(self.population):
                    self.state.slot_progress = [0] * len(self.population)
                requests = [budget.request(agent, self.state.agent_steps) for agent in self.population]
                self._train_phases(requests, guard)
                with PROFILER.log:
                    self._report_training(self.state.phase_results)
                self.state.phase_results = []
                with PROFILER.evaluate:
                    self._seed_env(len(self.population))
                    self.fitnesses = self.divergence.check(self.population, self._evaluate(), self.reported_steps)
                self.state.agent_steps += budget.generation_steps(self.state.slot_progress)
                self.state.total_steps += budget.steps(sum(self.state.slot_progress))
                self.state.generation += 1
                self.state.slot_progress = [0] * len(self.population)
                done = (self.budget.exhausted(self.state.agent_steps) or self.stop_requested
                        or target_reached(self.fitnesses, self.target))
                if self.is_main:  # the population as evaluated, before evolution changes any member
                    with PROFILER.log:
                        self.reporter.log_generation(self.reported_steps, self.state.generation, self.population,
                                                     self.fitnesses, population_steps=self.global_steps)
                    with PROFILER.checkpoint:
                        self._save_elite()
                with PROFILER.evolve:
                    evolution = None if done else self._evolve()
                if evolution is not None:
                    if self.is_main:
                        with PROFILER.log:
                            self.reporter.log_evolution(self.reported_steps, evolution)
                    self.population = evolution.population
                    if self.on_evolved is not None:
                        self.on_evolved(evolution)
                if self.checkpointer is not None and (done or self.checkpointer.due(self.state.agent_steps)):
                    with PROFILER.checkpoint:
                        self.save(self.checkpointer)
                if done:
                    break
        return self.population, self.fitnesses

    @property
    def global_steps(self) -> int:
        """Steps the whole population took (finished generations plus this one's progress)."""
        return self.state.total_steps + self.budget.steps(sum(self.state.slot_progress))

    @property
    def member_steps(self) -> int:
        """Steps per member: the finished generations' count plus the furthest slot's progress in
        this one (what checkpoints are named by)."""
        return self.state.agent_steps + self.budget.steps(max(self.state.slot_progress or [0]))

    @property
    def reported_steps(self) -> int:
        """The step the progress bar, the metrics and the history show: :attr:`member_steps` when
        the loop counts per member (LLM loops, whose members learn in lockstep), else
        :attr:`global_steps`."""
        return self.member_steps if self.count_per_member else self.global_steps

    def _evolve(self) -> EvolutionResult:
        """Select and mutate; data-parallel, the main process does and sends the result to the others."""
        processes = self._processes
        if processes is None:
            return evolve_population(self.population, self.selection, self.mutation)
        from agile_core.distributed.agent_bytes import agent_from_bytes, agent_to_bytes

        evolution = evolve_population(self.population, self.selection, self.mutation) if self.is_main else None
        payload = processes.broadcast(None if evolution is None else {
            "agents": [agent_to_bytes(agent) for agent in evolution.population],
            "mutations": evolution.mutations, "parents": evolution.parents})
        if evolution is not None:
            return evolution
        device = str(self.population[0].device)
        population = [agent_from_bytes(data, device=device) for data in payload["agents"]]
        return EvolutionResult(population, elite=None, mutations=payload["mutations"], parents=payload["parents"])

    def _evaluate(self) -> list[float]:
        fitnesses = self._evaluate_here()
        processes = self._processes
        if processes is None:
            return fitnesses
        fitnesses = processes.mean(fitnesses)  # the same decisions on every process
        for agent, fitness in zip(self.population, fitnesses, strict=True):
            if agent.fitness and isinstance(agent.fitness[-1], float | int):
                agent.fitness[-1] = fitness
        return fitnesses

    def _evaluate_here(self) -> list[float]:
        if self.population_evaluate is not None:
            return self.population_evaluate(self.population)
        fitnesses = []
        for slot, agent in enumerate(self.population):  # each agent from its own seed: order-free
            self._seed_env(self.eval_position(slot))
            fitnesses += evaluate_population([agent], self.env, swap_channels=self.swap_channels,
                                             max_steps=self.eval_steps, loop=self.eval_loop)
        return fitnesses

    def eval_position(self, slot: int) -> int:
        """Seed position of slot `slot`'s evaluation (agent by agent): after every phase position."""
        return len(self.population) + slot

    def _train_phases(self, requests: list[int], guard: InterruptGuard) -> None:
        """Train each member's phase (or the whole population's) for the vector steps of
        `requests` (per slot) it has not taken yet, collecting results in the loop state. A first
        Ctrl-C stops when a phase ends (an exact checkpoint: the next phase starts from a freshly
        seeded env either way); a second one stops the phase early."""
        if self.population_phase is not None:
            self._train_population(requests, guard)
            return
        for slot, agent in enumerate(self.population):
            remaining = requests[slot] - self.state.slot_progress[slot]
            if remaining > 0:
                self._seed_env(slot)
                result = self.phase(slot, agent, remaining, lambda: guard.urgent)
                self.state.slot_progress[slot] += result.vector_steps
                self.state.phase_results.append(result)
            self.reporter.advance(self.reported_steps)
            if guard.requested:
                self._interrupt()

    def _train_population(self, requests: list[int], guard: InterruptGuard) -> None:
        assert self.population_phase is not None
        remaining = [max(0, request - taken) for request, taken in zip(requests, self.state.slot_progress, strict=True)]
        if any(remaining):
            self._seed_env(0)
            results = self.population_phase(self.population, remaining, lambda: guard.urgent)
            for slot, result in enumerate(results):
                self.state.slot_progress[slot] += result.vector_steps
            self.state.phase_results.extend(results)
        self.reporter.advance(self.reported_steps)
        if guard.requested:
            self._interrupt()

    def phase_seed(self, position: int) -> int | None:
        """The seed of `position` (a slot's phase, an evaluation) in this generation; None unseeded."""
        if self.env_seed is None:
            return None
        offset = self.data_parallel.seed_offset() if self.data_parallel is not None else 0
        return self.env_seed + offset + 100_003 * self.state.generation + 101 * position

    def _seed_env(self, position: int) -> None:
        """With `env_seed`, reset the env and torch's global generator to a seed fixed by
        (generation, position), so a resumed run sees the same episodes and samples as an
        uninterrupted one, and every phase depends only on its agent and position (which lets
        members train in other processes, see :mod:`agile_core.distributed`)."""
        seed = self.phase_seed(position)
        if seed is not None:
            seed_position(self.env, seed)

    def _interrupt(self) -> None:
        target = self.checkpointer if self.checkpointer is not None and self.checkpointer.manager is not None \
            else RunCheckpointer(self.interrupt_path or "checkpoints", save_buffers=self.buffers is not None)
        path = self.save(target)
        self.reporter.close()
        raise TrainingInterrupted(path, self.member_steps, total_steps=self.global_steps)

    def save(self, checkpointer: RunCheckpointer) -> Path | None:
        """Checkpoint the run now (at a generation boundary or an interrupt), named by the steps
        each agent has taken; None on a data-parallel process other than the main one."""
        if not self.is_main:
            return None
        evolution = {
            "selection": self.selection.state_dict() if self.selection is not None else None,
            "mutation": self.mutation.state_dict() if self.mutation is not None else None,
        }
        buffers = dict(self.buffers()) if self.buffers is not None else None
        return checkpointer.save(self.member_steps, self.population, evolution, self.state.to_dict(), buffers)

    def _report_training(self, results: list[PhaseResult]) -> None:
        returns = [r for result in results for r in result.episodic_returns]
        lengths = [n for result in results for n in result.episode_lengths]
        losses: dict[str, list[float]] = {}
        for result in results:
            for name, values in result.losses.items():
                losses.setdefault(name, []).extend(values)
        self.reporter.log_training(self.reported_steps, returns, lengths, losses)

    def _save_elite(self) -> None:
        if not self.save_elite or not self.fitnesses:
            return
        best = self.population[int(np.argmax(self.fitnesses))]
        best.save_checkpoint(self.elite_path or "elite")


def seed_position(env: Any, seed: int) -> None:
    """Reset `env` with `seed` and seed torch's global generator (PPO samples actions from it)."""
    import torch

    env.reset(seed=seed)
    torch.manual_seed(seed)
