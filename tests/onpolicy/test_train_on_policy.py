"""train_on_policy: evolution, step counting, checkpoints and exact resume, Ctrl-C, learning."""

import csv
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from agile_core.hpo.hyperparameters import HyperparameterConfig, RLParameter
from agile_core.hpo.mutation import Mutations
from agile_core.hpo.selection import TournamentSelection
from agile_core.training.interrupt import TrainingInterrupted
from agile_onpolicy.collect import collect_rollouts
from agile_onpolicy.ppo import PPO
from agile_onpolicy.training import train_on_policy
from tests.seeds import learning_seed

torch.set_num_threads(1)
NET = {"latent_dim": 32, "encoder_config": {"hidden_size": [32]}, "head_config": {"hidden_size": [32]}}


def cartpole(num_envs: int = 4) -> gym.vector.VectorEnv:
    return gym.make_vec("CartPole-v1", num_envs=num_envs, vectorization_mode="vector_entry_point")


def population(env: gym.vector.VectorEnv, size: int, **kwargs) -> list[PPO]:
    hp = HyperparameterConfig(lr=RLParameter("lr", 1e-4, 1e-2))
    settings = {"lr": 1e-3, "learn_step": 256, "batch_size": 64, "net_config": NET, **kwargs}
    torch.manual_seed(0)
    return [PPO(env.single_observation_space, env.single_action_space, index=i, seed=i, hp_config=hp, **settings)
            for i in range(size)]


def evolution(size: int, seed: int = 0) -> dict:
    return {"selection_strategy": TournamentSelection(2, True, size, rng=seed),
            "mutation": Mutations(no_mutation=0.2, architecture=0.2, parameters=0.2, rl_hp=0.4, rand_seed=seed)}


def test_generations_evolve_and_count_steps():
    env = cartpole()
    pop, fitnesses = train_on_policy(env, "CartPole-v1", "PPO", population(env, 3), max_steps=2048, evo_steps=1024,
                                     verbose=False, **evolution(3))
    assert len(pop) == 3 and len(fitnesses) == 3
    assert all(agent.steps == 2048 for agent in pop if agent.lineage.parent_id is None)
    assert all(len(agent.fitness) >= 1 for agent in pop)
    assert len({agent.index for agent in pop}) == 3


def test_a_seeded_run_repeats_whatever_the_global_torch_state():
    """Sampled actions draw from torch's global generator: a seeded run seeds it."""
    results = []
    for global_seed in (11, 12):
        env = cartpole()
        agents = population(env, 2)
        torch.manual_seed(global_seed)
        pop, fitnesses = train_on_policy(env, "CartPole-v1", "PPO", agents, max_steps=1024, evo_steps=512,
                                         verbose=False, seed=7, **evolution(2))
        results.append((fitnesses, [p.detach().clone() for p in pop[0].actor.parameters()]))
    assert results[0][0] == results[1][0]
    assert all(torch.equal(a, b) for a, b in zip(results[0][1], results[1][1], strict=True))


def test_deprecated_tournament_alias_warns():
    env = cartpole()
    with pytest.warns(DeprecationWarning, match="tournament"):
        train_on_policy(env, "CartPole-v1", "PPO", population(env, 2), max_steps=512, evo_steps=512, verbose=False,
                        tournament=TournamentSelection(2, True, 2, rng=0))


def test_custom_collect_function_is_used():
    calls = []

    def collect(agent, env, buffer, **kwargs):
        calls.append(agent.index)
        return collect_rollouts(agent, env, buffer, **kwargs)

    env = cartpole()
    train_on_policy(env, "CartPole-v1", "PPO", population(env, 2), max_steps=512, evo_steps=512, verbose=False,
                    collect_rollouts_fn=collect)
    assert calls == [0, 0, 1, 1]  # two 64-step rollouts of 4 envs per agent


def _final_state(pop: list[PPO]) -> dict:
    return {
        "steps": [a.steps for a in pop], "indices": [a.index for a in pop], "lr": [a.lr for a in pop],
        "fitness_len": [len(a.fitness) for a in pop],
        "weights": [torch.cat([p.detach().flatten() for p in a.actor.parameters()]).tolist() for a in pop],
    }


RESUME_SCRIPT = textwrap.dedent("""
    import json, sys, torch
    sys.path[:0] = [{tests!r}, {root!r}]  # the test module, and the repository (its `tests` imports)
    torch.set_num_threads(1)
    from test_train_on_policy import cartpole, population, evolution, _final_state
    from agile_onpolicy.training import train_on_policy
    env = cartpole()
    pop, _ = train_on_policy(env, "CartPole-v1", "PPO", population(env, 3), max_steps=3072, evo_steps=1024,
                             verbose=False, seed=5, resume_from_checkpoint=sys.argv[1], **evolution(3))
    print(json.dumps(_final_state(pop)))
""")


def test_resume_in_a_new_process_matches_the_uninterrupted_run(tmp_path):
    env = cartpole()
    pop, _ = train_on_policy(env, "CartPole-v1", "PPO", population(env, 3), max_steps=3072, evo_steps=1024,
                             verbose=False, seed=5, checkpoint=1024, checkpoint_path=str(tmp_path / "ckpt"),
                             **evolution(3))
    expected = _final_state(pop)
    halfway = tmp_path / "ckpt" / "checkpoint_000001024"
    assert halfway.is_dir()
    script = tmp_path / "resume.py"
    script.write_text(RESUME_SCRIPT.format(tests=str(Path(__file__).parent), root=str(Path(__file__).resolve().parents[2])))
    result = subprocess.run([sys.executable, str(script), str(halfway)], capture_output=True, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    resumed = json.loads(result.stdout.strip().splitlines()[-1])
    for key in ("steps", "indices", "lr", "fitness_len"):
        assert resumed[key] == expected[key], key
    for mine, theirs in zip(expected["weights"], resumed["weights"], strict=True):
        assert np.allclose(mine, theirs, atol=1e-6)


def test_ctrl_c_saves_a_resumable_checkpoint(tmp_path):
    env = cartpole()
    # a tiny run first, so lazy imports are done before the signal can arrive (a SIGINT during an
    # import, outside the loop's guard, is a plain KeyboardInterrupt)
    train_on_policy(env, "CartPole-v1", "PPO", population(env, 2), max_steps=256, evo_steps=256, verbose=False)
    timer = threading.Timer(1.5, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    with pytest.raises(TrainingInterrupted) as info:
        train_on_policy(env, "CartPole-v1", "PPO", population(env, 2), max_steps=200_000, evo_steps=4096,
                        verbose=False, checkpoint_path=str(tmp_path / "ckpt"), **evolution(2))
    timer.cancel()
    path = info.value.checkpoint_path
    assert path is not None and path.is_dir()
    # one more generation whatever the interrupt point (a fast batched run may have finished
    # generations within the 1.5 s); the checkpoint is named by the steps each agent had taken
    done = int(path.name.rsplit("_", 1)[-1])
    pop, fitnesses = train_on_policy(env, "CartPole-v1", "PPO", population(env, 2), max_steps=done + 4096,
                                     evo_steps=4096, verbose=False, resume_from_checkpoint=str(path), **evolution(2))
    assert len(fitnesses) == 2 and all(agent.fitness for agent in pop)


def test_tensorboard_curves_continue_across_a_resume(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    env, logs = cartpole(), str(tmp_path / "tb")
    common = {"evo_steps": 1024, "verbose": False, "seed": 3, "tensorboard": True, "tensorboard_log_dir": logs,
              "csv_path": str(tmp_path / "metrics.csv")}
    train_on_policy(env, "CartPole-v1", "PPO", population(env, 2), max_steps=2048, checkpoint=1024,
                    checkpoint_path=str(tmp_path / "ckpt"), **common, **evolution(2))
    train_on_policy(env, "CartPole-v1", "PPO", population(env, 2), max_steps=3072,
                    resume_from_checkpoint=str(tmp_path / "ckpt" / "checkpoint_000002048"), **common, **evolution(2))
    events = EventAccumulator(logs)
    events.Reload()
    steps = [event.step for event in events.Scalars("eval/mean_return")]
    assert steps == sorted(set(steps)) and steps[-1] == 3 * 1024 * 2  # one curve, no restart at 0
    # every generation once: the checkpoint's own generation (step 4096) is kept, not purged
    assert steps == [2048, 4096, 6144]
    with open(tmp_path / "metrics.csv") as handle:
        csv_steps = [int(row["step"]) for row in csv.DictReader(handle) if row["name"] == "eval/mean_return"]
    assert csv_steps == [2048, 4096, 6144]


@pytest.mark.learning
def test_ppo_population_solves_cartpole():
    """PPO, population 4, evolution on: best agent >= 475 over 10 greedy episodes within 150k steps."""
    env, seed = cartpole(8), learning_seed()
    hp = HyperparameterConfig(lr=RLParameter("lr", 1e-4, 1e-2), batch_size=RLParameter("batch_size", 32, 512, int))
    pop = [PPO(env.single_observation_space, env.single_action_space, index=i, seed=seed * 10 + i, hp_config=hp, lr=1e-3,
               learn_step=1024, batch_size=128, ent_coef=0.0,
               net_config={"latent_dim": 64, "encoder_config": {"hidden_size": [64]}, "head_config": {"hidden_size": [64]}})
           for i in range(4)]
    pop, _ = train_on_policy(env, "CartPole-v1", "PPO", pop, max_steps=150_000, evo_steps=10_240, eval_loop=2,
                             target=475, verbose=False, seed=seed, **evolution(4, seed))
    assert max(agent.steps for agent in pop) <= 150_000 + 1024
    evaluation_env = cartpole(10)
    best = max(agent.test(evaluation_env, loop=1) for agent in pop)  # 10 greedy episodes each
    assert best >= 475, best
