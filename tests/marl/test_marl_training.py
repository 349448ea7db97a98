"""The multi-agent training loops: populations with selection and mutations on MPE and the toy
heterogeneous env, step counting, per-agent fitness, exact resume from a checkpoint, and
``batch_population=False``."""

from __future__ import annotations

import functools
import inspect
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from mpe2 import simple_speaker_listener_v4, simple_spread_v3

from agile_core.hpo.hyperparameters import HyperparameterConfig, RLParameter
from agile_core.hpo.mutation import Mutations
from agile_core.hpo.selection import TournamentSelection
from agile_marl.envs import PettingZooVecEnv
from agile_marl.ippo import IPPO
from agile_marl.maddpg import MADDPG
from agile_marl.matd3 import MATD3
from agile_marl.training import train_multi_agent_off_policy, train_multi_agent_on_policy
from tests.marl.toy_envs import ToyHeteroEnv

torch.set_num_threads(1)
NET = {"latent_dim": 16, "encoder_config": {"hidden_size": [16]}, "head_config": {"hidden_size": [16]}}


def speaker_listener(num_envs: int = 2) -> PettingZooVecEnv:
    factory = functools.partial(simple_speaker_listener_v4.parallel_env, continuous_actions=True, max_cycles=25)
    return PettingZooVecEnv([factory] * num_envs)


def spread(num_envs: int = 2) -> PettingZooVecEnv:
    factory = functools.partial(simple_spread_v3.parallel_env, N=2, max_cycles=25)
    return PettingZooVecEnv([factory] * num_envs)


def toy(num_envs: int = 2) -> PettingZooVecEnv:
    return PettingZooVecEnv([ToyHeteroEnv] * num_envs)


def off_policy_population(cls: type[MADDPG], env: Any, size: int, **kwargs: Any) -> list[MADDPG]:
    hp = HyperparameterConfig(lr_actor=RLParameter("lr_actor", 1e-4, 1e-2),
                              lr_critic=RLParameter("lr_critic", 1e-4, 1e-2))
    settings = {"batch_size": 16, "learn_step": 4, "net_config": NET, **kwargs}
    torch.manual_seed(0)
    return [cls(dict(env.observation_spaces), dict(env.action_spaces), index=i, seed=i, hp_config=hp, **settings)
            for i in range(size)]


def on_policy_population(env: Any, size: int, **kwargs: Any) -> list[IPPO]:
    hp = HyperparameterConfig(lr=RLParameter("lr", 1e-4, 1e-2))
    settings = {"batch_size": 32, "learn_step": 64, "update_epochs": 2, "net_config": NET, **kwargs}
    torch.manual_seed(0)
    return [IPPO(dict(env.observation_spaces), dict(env.action_spaces), index=i, seed=i, hp_config=hp, **settings)
            for i in range(size)]


def memory_for(env: Any, size: int = 10_000) -> Any:
    from agile_marl.buffers import MultiAgentReplayBuffer

    return MultiAgentReplayBuffer(size, dict(env.observation_spaces), dict(env.action_spaces))


def evolution(size: int, seed: int = 0) -> dict[str, Any]:
    return {"selection_strategy": TournamentSelection(2, True, size, rng=seed),
            "mutation": Mutations(no_mutation=0.2, architecture=0.2, parameters=0.2, rl_hp=0.4, rand_seed=seed)}


def weights(agent: Any) -> list[torch.Tensor]:
    return [p.detach().clone() for net in agent.network_names for p in getattr(agent, net).parameters()]


def check_population(pop: list[Any], fitnesses: list[Any], size: int, generations: int, max_steps: int) -> None:
    assert len(pop) == size and len(fitnesses) == size
    assert all(isinstance(f, float) and np.isfinite(f) for f in fitnesses)
    assert len({agent.index for agent in pop}) == size
    # Every member (a survivor or a clone of one) carries a full run of steps and one fitness
    # per generation it (or its line) was evaluated in.
    assert all(agent.steps == max_steps for agent in pop), [agent.steps for agent in pop]
    assert all(len(agent.fitness) == generations for agent in pop), [len(a.fitness) for a in pop]
    assert [agent.fitness[-1] for agent in pop] == fitnesses


# ------------------------------------------------------------------------- 1. populations train
@pytest.mark.parametrize("cls", [MADDPG, MATD3])
def test_off_policy_population_evolves_on_speaker_listener(cls: type[MADDPG]) -> None:
    env = speaker_listener(2)
    pop, fitnesses = train_multi_agent_off_policy(
        env, "speaker_listener", cls.__name__, off_policy_population(cls, env, 3), memory_for(env),
        max_steps=300, evo_steps=100, eval_steps=25, learning_delay=32, verbose=False, **evolution(3))
    check_population(pop, fitnesses, 3, 3, 300)


def test_off_policy_population_evolves_on_the_toy_env() -> None:
    env = toy(2)
    pop, fitnesses = train_multi_agent_off_policy(
        env, "toy", "MADDPG", off_policy_population(MADDPG, env, 2), memory_for(env),
        max_steps=200, evo_steps=100, verbose=False, **evolution(2))
    check_population(pop, fitnesses, 2, 2, 200)
    # b_0 lives 4 steps and a_0 2: the greedy episode's return is a_0's 1 + 2 (+ actions) plus b_0's
    # 10 + 20 + 30 + 40 (+ actions in [-1, 1]).
    assert all(103 - 4 <= f <= 103 + 2 + 4 for f in fitnesses)


def test_off_policy_steps_round_up_to_whole_vector_steps() -> None:
    env = toy(3)
    pop, _ = train_multi_agent_off_policy(env, "toy", "MADDPG", off_policy_population(MADDPG, env, 2),
                                          memory_for(env), max_steps=100, evo_steps=50, verbose=False)
    assert [agent.steps for agent in pop] == [102, 102]  # 17 + 17 vector steps of 3 sub-envs
    assert [len(agent.fitness) for agent in pop] == [2, 2]


def test_on_policy_population_evolves_on_spread() -> None:
    env = spread(2)
    pop, fitnesses = train_multi_agent_on_policy(
        env, "spread", "IPPO", on_policy_population(env, 3), max_steps=384, evo_steps=128, eval_steps=25,
        verbose=False, **evolution(3))
    check_population(pop, fitnesses, 3, 3, 384)


def test_on_policy_population_evolves_on_the_toy_env() -> None:
    env = toy(2)
    pop, fitnesses = train_multi_agent_on_policy(
        env, "toy", "IPPO", on_policy_population(env, 2), max_steps=256, evo_steps=128, verbose=False,
        **evolution(2))
    check_population(pop, fitnesses, 2, 2, 256)


def test_on_policy_members_collect_whole_rollouts() -> None:
    """evo_steps 40 of 2 sub-envs is 20 vector steps; a rollout is 32 (learn_step 64): each member
    collects one whole rollout per generation, 64 steps."""
    env = toy(2)
    pop, _ = train_multi_agent_on_policy(env, "toy", "IPPO", on_policy_population(env, 2), max_steps=80,
                                         evo_steps=40, verbose=False)
    assert [agent.steps for agent in pop] == [128, 128]
    assert [len(agent.fitness) for agent in pop] == [2, 2]


# ---------------------------------------------------------------------------- 2. sum_scores
@pytest.mark.parametrize("loop", ["off", "on"])
def test_sum_scores_false_returns_per_agent_dicts(loop: str) -> None:
    results = {}
    for sum_scores in (True, False):
        env = toy(2)
        if loop == "off":
            pop, fitnesses = train_multi_agent_off_policy(
                env, "toy", "MADDPG", off_policy_population(MADDPG, env, 2), memory_for(env), max_steps=64,
                evo_steps=64, verbose=False, sum_scores=sum_scores, seed=3)
        else:
            pop, fitnesses = train_multi_agent_on_policy(
                env, "toy", "IPPO", on_policy_population(env, 2), max_steps=64, evo_steps=64, verbose=False,
                sum_scores=sum_scores, seed=3)
        results[sum_scores] = (pop, fitnesses)
    pop, summed = results[True]
    assert all(isinstance(f, float) for f in summed)
    pop, per_agent = results[False]
    assert len(per_agent) == 2
    for agent, scores in zip(pop, per_agent, strict=True):
        assert isinstance(scores, dict) and set(scores) == {"a_0", "b_0"}
        assert sum(scores.values()) == pytest.approx(agent.fitness[-1])
    # The same seeded run: the sums are the fitnesses of the summed run.
    assert [sum(s.values()) for s in per_agent] == pytest.approx(summed)
    assert all(agent.agent_fitness == [] for agent in results[True][0])


@pytest.mark.parametrize("loop", [train_multi_agent_off_policy, train_multi_agent_on_policy])
def test_loop_docstring_documents_every_parameter_once(loop: Any) -> None:
    documented = re.findall(r"^    (\w+): ", inspect.getdoc(loop) or "", flags=re.MULTILINE)
    assert sorted(documented) == sorted(inspect.signature(loop).parameters)
    assert "Run options" in (loop.__doc__ or "")


# ------------------------------------------------------------------------------ 3. resume
def _off_policy_run(tmp_path: Path, max_steps: int, resume: str | None = None) -> tuple[list[Any], list[float]]:
    env = speaker_listener(2)
    return train_multi_agent_off_policy(
        env, "speaker_listener", "MATD3", off_policy_population(MATD3, env, 2), memory_for(env),
        max_steps=max_steps, evo_steps=50, eval_steps=25, learning_delay=16, verbose=False, seed=11,
        checkpoint=50, checkpoint_path=str(tmp_path / "ckpt"), resume_from_checkpoint=resume, **evolution(2))


def _on_policy_run(tmp_path: Path, max_steps: int, resume: str | None = None) -> tuple[list[Any], list[float]]:
    env = spread(2)
    return train_multi_agent_on_policy(
        env, "spread", "IPPO", on_policy_population(env, 2), max_steps=max_steps, evo_steps=64, eval_steps=25,
        verbose=False, seed=11, checkpoint=64, checkpoint_path=str(tmp_path / "ckpt"),
        resume_from_checkpoint=resume, **evolution(2))


def assert_same_run(pop: list[Any], fitnesses: list[float], other: list[Any], other_fitnesses: list[float]) -> None:
    # returns sum a whole episode of float32 rounding (a lone member's layer norm rounds differently)
    assert other_fitnesses == pytest.approx(fitnesses, rel=1e-5, abs=1e-5)
    assert [a.index for a in other] == [a.index for a in pop]
    assert [a.steps for a in other] == [a.steps for a in pop]
    for mine, theirs in zip(pop, other, strict=True):
        assert theirs.fitness == pytest.approx(mine.fitness, rel=1e-5, abs=1e-5)
        for p, q in zip(weights(mine), weights(theirs), strict=True):
            torch.testing.assert_close(p, q, atol=1e-5, rtol=0)


@pytest.mark.parametrize("loop", ["off", "on"])
def test_resume_matches_the_uninterrupted_run(loop: str, tmp_path: Path) -> None:
    """As the single-agent tests do: resume from the checkpoint an uninterrupted run saved after
    its first generation (after selection and mutation), in a fresh env, memory and population.
    Off-policy: a generation is 25 vector steps of 2 sub-envs and learn_step is 4, so each slot
    ends it with 2 steps of unspent learn credit, which the checkpoint must carry."""
    run, per_generation = (_off_policy_run, 50) if loop == "off" else (_on_policy_run, 64)
    full, full_fitnesses = run(tmp_path / "full", 3 * per_generation)
    halfway = tmp_path / "full" / "ckpt" / f"checkpoint_{per_generation:09d}"
    assert halfway.is_dir(), sorted(p.name for p in (tmp_path / "full" / "ckpt").iterdir())
    resumed, resumed_fitnesses = run(tmp_path / "resumed", 3 * per_generation, str(halfway))
    assert_same_run(full, full_fitnesses, resumed, resumed_fitnesses)


def test_a_seeded_run_repeats() -> None:
    results = []
    for global_seed in (1, 2):
        env = spread(2)
        agents = on_policy_population(env, 2)
        torch.manual_seed(global_seed)
        np.random.seed(global_seed)
        results.append(train_multi_agent_on_policy(env, "spread", "IPPO", agents, max_steps=128, evo_steps=64,
                                                   eval_steps=25, verbose=False, seed=5, **evolution(2)))
    assert_same_run(*results[0], *results[1])


# ----------------------------------------------------------------------- 4. batch_population
@pytest.mark.parametrize("cls", [MADDPG, MATD3])
def test_unbatched_population_gives_the_batched_weights(cls: type[MADDPG]) -> None:
    runs = []
    for batched in (True, False):
        env = speaker_listener(2)
        runs.append(train_multi_agent_off_policy(
            env, "speaker_listener", cls.__name__, off_policy_population(cls, env, 2), memory_for(env),
            max_steps=120, evo_steps=60, eval_steps=25, learning_delay=16, verbose=False, seed=2,
            batch_population=batched, **evolution(2)))
    assert_same_run(*runs[0], *runs[1])


def test_unbatched_on_policy_population_trains() -> None:
    env = toy(2)
    pop, fitnesses = train_multi_agent_on_policy(env, "toy", "IPPO", on_policy_population(env, 2), max_steps=128,
                                                 evo_steps=64, verbose=False, batch_population=False,
                                                 **evolution(2))
    check_population(pop, fitnesses, 2, 2, 128)
