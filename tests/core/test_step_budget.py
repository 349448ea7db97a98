"""Step budgets count the steps each member actually took (docs/step-budgets.md).

On-policy: a generation is ``ceil(evo_steps / learn_step)`` whole rollouts of
``ceil(learn_step / num_envs)`` vector steps, so a run with ``learn_step`` far above ``evo_steps``
takes one rollout per generation and stops once that reaches ``max_steps`` (the reference
trainer's 3 generations and 6,144 steps per agent for learn_step 2048, 16 envs, evo_steps 100,
max_steps 5000; before the fix the loop counted the 112 steps it asked for and ran 45
generations, 92,160 steps per agent). Off-policy: every generation is ``ceil(evo_steps /
num_envs)`` vector steps. The counts reach the progress bar, the metrics' step column and the
checkpoint names, and survive a resume.
"""

from __future__ import annotations

import csv
import functools
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gymnasium as gym
import pytest
import torch

from agile_core.training.budget import StepBudget, rollout_vector_steps, rollouts_per_generation
from agile_core.training.checkpointing import resume_run
from agile_core.training.reporting import TrainingReporter
from agile_core.training.summary import build_summary

torch.set_num_threads(1)
NET = {"latent_dim": 16, "encoder_config": {"hidden_size": [16]}, "head_config": {"hidden_size": [16]}}


@pytest.fixture
def progress(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """(steps, total) of every run's progress bar when it closes."""
    seen: list[tuple[int, int]] = []
    close = TrainingReporter.close

    def recording(self: TrainingReporter) -> None:
        if not seen or seen[-1] != (self.progress.n, self.progress.total):
            seen.append((self.progress.n, self.progress.total))
        close(self)

    monkeypatch.setattr(TrainingReporter, "close", recording)
    return seen


def eval_steps_in(path: Path) -> list[int]:
    with path.open() as handle:
        return [int(row["step"]) for row in csv.DictReader(handle) if row["name"] == "eval/mean_return"]


def checkpoint_names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))


# ------------------------------------------------------------------------------ the budget itself
def test_the_budget_asks_per_paradigm_and_counts_the_least_stepped_member() -> None:
    ppo = SimpleNamespace(learn_step=2048)
    on_policy = StepBudget(5000, 100, 16, whole_rollouts=True)
    assert rollout_vector_steps(2048, 16) == 128 and rollouts_per_generation(100, 2048) == 1
    assert on_policy.request(ppo, 0) == 128 and on_policy.steps(128) == 2048
    assert on_policy.projected_total([ppo, ppo]) == 3 * 2 * 2048
    assert StepBudget(5000, 3000, 16, whole_rollouts=True).request(ppo, 0) == 2 * 128
    # learn_step not a multiple of num_envs: each rollout is ceil(100 / 16) = 7 vector steps, and
    # evo_steps 105 needs two rollouts of learn_step 100
    assert StepBudget(1000, 105, 16, whole_rollouts=True).request(SimpleNamespace(learn_step=100), 0) == 14
    off_policy = StepBudget(30, 10, 4)
    assert off_policy.request(None, 24) == 3 and off_policy.projected_total([None]) == 36
    trimmed = StepBudget(25, 10, 1, trim_last=True)
    assert trimmed.request(None, 20) == 5 and trimmed.projected_total([None, None]) == 50
    assert on_policy.generation_steps([128, 256]) == 2048 and not on_policy.exhausted(4999)
    assert on_policy.exhausted(5000)
    # a generation never asks for more than the whole budget (a Python call with evo_steps > max_steps)
    assert StepBudget(600, 10**7, 4, whole_rollouts=True).request(SimpleNamespace(learn_step=256), 0) == 3 * 64


def test_the_projected_count_per_member_is_where_the_run_ends() -> None:
    """The progress bar's total of a loop that counts per member (the LLM loops)."""
    ppo = SimpleNamespace(learn_step=2048)
    assert StepBudget(5000, 100, 16, whole_rollouts=True).projected_spent([ppo, ppo]) == 3 * 2048
    assert StepBudget(30, 10, 4).projected_spent([None]) == 36 and StepBudget(30, 10, 4).projected_spent([None], 24) == 36
    trimmed = StepBudget(25, 10, 1, trim_last=True)
    assert trimmed.projected_spent([None, None]) == 25 and trimmed.projected_spent([None], 20) == 25
    assert StepBudget(300, 200, 1, trim_last=True).projected_spent([None]) == 300
    assert trimmed.projected_spent([None], 25) == 25  # spent: nothing more


# ------------------------------------------------------------------------------ multi-agent IPPO
def spread(num_envs: int) -> Any:
    from mpe2 import simple_spread_v3

    from agile_marl.envs import PettingZooVecEnv

    return PettingZooVecEnv([functools.partial(simple_spread_v3.parallel_env, N=2, max_cycles=25)] * num_envs)


def ippo_population(env: Any, learn_step: int, size: int = 2) -> list[Any]:
    from agile_marl.ippo import IPPO

    torch.manual_seed(0)
    return [IPPO(dict(env.observation_spaces), dict(env.action_spaces), index=i, seed=i, net_config=NET,
                 learn_step=learn_step, batch_size=256, update_epochs=1) for i in range(size)]


def test_ippo_stops_at_its_budget_like_the_reference(progress: list[tuple[int, int]]) -> None:
    """learn_step 2048 over 16 envs, evo_steps 100, max_steps 5000: one 2048-step rollout per
    generation, 3 generations, 6,144 steps per agent (the old count: 45 and 92,160)."""
    from agile_marl.training import train_multi_agent_on_policy

    env = spread(16)
    pop, _ = train_multi_agent_on_policy(env, "spread", "IPPO", ippo_population(env, 2048), max_steps=5000,
                                         evo_steps=100, eval_steps=25, verbose=False)
    assert [agent.steps for agent in pop] == [6144, 6144]
    assert [len(agent.fitness) for agent in pop] == [3, 3]
    assert all(agent.steps <= 5000 + 2048 for agent in pop)  # at most one rollout past the budget
    assert progress == [(2 * 6144, 2 * 6144)]


def test_ippo_counts_reach_metrics_checkpoints_and_a_resumed_run(tmp_path: Path) -> None:
    """Scaled down: learn_step 256 over 4 envs, evo_steps 10, max_steps 600 -> 3 x 256 = 768."""
    from agile_marl.training import train_multi_agent_on_policy

    env = spread(4)
    run = functools.partial(train_multi_agent_on_policy, env, "spread", "IPPO", max_steps=600, evo_steps=10,
                            eval_steps=25, verbose=False, seed=5, checkpoint=256)
    pop, _ = run(ippo_population(env, 256), checkpoint_path=str(tmp_path / "ckpt"), csv_path=str(tmp_path / "m.csv"))
    assert [agent.steps for agent in pop] == [768, 768] and [len(a.fitness) for a in pop] == [3, 3]
    assert eval_steps_in(tmp_path / "m.csv") == [512, 1024, 1536]  # the whole population's steps
    names = checkpoint_names(tmp_path / "ckpt")
    assert names == ["checkpoint_000000256", "checkpoint_000000512", "checkpoint_000000768"]
    last = resume_run(tmp_path / "ckpt" / names[-1]).loop
    assert (last["agent_steps"], last["total_steps"], last["generation"]) == (768, 1536, 3)
    summary = build_summary(pop, [a.fitness[-1] for a in pop], None, 1.0)
    assert [a["steps"] for a in summary["agents"]] == [768, 768] and summary["total_steps"] == 1536

    resumed, _ = run(ippo_population(env, 256), checkpoint_path=str(tmp_path / "again"),
                     csv_path=str(tmp_path / "again.csv"), resume_from_checkpoint=str(tmp_path / "ckpt" / names[0]))
    assert [agent.steps for agent in resumed] == [768, 768] and [len(a.fitness) for a in resumed] == [3, 3]
    assert checkpoint_names(tmp_path / "again") == names[1:]
    assert eval_steps_in(tmp_path / "again.csv") == [1024, 1536]


# ------------------------------------------------------------------------------ single-agent PPO
def cartpole(num_envs: int = 4) -> gym.vector.VectorEnv:
    return gym.make_vec("CartPole-v1", num_envs=num_envs, vectorization_mode="vector_entry_point")


def ppo_population(env: gym.vector.VectorEnv, learn_step: int, size: int = 2) -> list[Any]:
    from agile_onpolicy.ppo import PPO

    torch.manual_seed(0)
    return [PPO(env.single_observation_space, env.single_action_space, index=i, seed=i, net_config=NET,
                learn_step=learn_step, batch_size=128, update_epochs=1) for i in range(size)]


@pytest.mark.parametrize("batched", [True, False], ids=["batched", "agent-by-agent"])
def test_ppo_takes_whole_rollouts_and_counts_them(batched: bool, tmp_path: Path,
                                                  progress: list[tuple[int, int]]) -> None:
    from agile_onpolicy.training import train_on_policy

    env = cartpole(4)
    pop, _ = train_on_policy(env, "CartPole-v1", "PPO", ppo_population(env, 256), max_steps=600, evo_steps=10,
                             verbose=False, batch_population=batched, csv_path=str(tmp_path / "m.csv"))
    assert [agent.steps for agent in pop] == [768, 768] and [len(a.fitness) for a in pop] == [3, 3]
    assert [agent.learn_counter for agent in pop] == [3, 3]  # one learning step per rollout
    assert eval_steps_in(tmp_path / "m.csv") == [512, 1024, 1536]
    assert progress == [(1536, 1536)]


def test_ppo_collects_ceil_evo_over_learn_rollouts_of_ceil_learn_over_envs() -> None:
    """learn_step 100 over 4 envs is a 25-vector-step rollout; evo_steps 250 is 3 of them (300
    steps) per generation; max_steps 500 stops after the second generation, at 600."""
    from agile_onpolicy.training import train_on_policy

    env = cartpole(4)
    pop, _ = train_on_policy(env, "CartPole-v1", "PPO", ppo_population(env, 100, size=1), max_steps=500,
                             evo_steps=250, verbose=False)
    assert pop[0].steps == 600 and len(pop[0].fitness) == 2 and pop[0].learn_counter == 6


# ------------------------------------------------------------------------------ off-policy
@pytest.mark.parametrize("batched", [True, False], ids=["batched", "agent-by-agent"])
def test_off_policy_generations_round_evo_steps_up_to_whole_vector_steps(batched: bool, tmp_path: Path) -> None:
    """evo_steps 10 over 4 envs is 3 vector steps (12 steps) in every generation: 12, 24, 36."""
    from agile_offpolicy.buffers import ReplayBuffer
    from agile_offpolicy.dqn import DQN
    from agile_offpolicy.training import train_off_policy

    env = cartpole(4)
    torch.manual_seed(0)
    pop = [DQN(env.single_observation_space, env.single_action_space, index=i, seed=i, net_config=NET, batch_size=8,
               learn_step=4) for i in range(2)]
    memory = ReplayBuffer(1000, env.single_observation_space, env.single_action_space)
    pop, _ = train_off_policy(env, "CartPole-v1", "DQN", pop, memory, max_steps=30, evo_steps=10, verbose=False,
                              batch_population=batched, learning_delay=0, checkpoint=12,
                              checkpoint_path=str(tmp_path / "ckpt"), csv_path=str(tmp_path / "m.csv"))
    assert [agent.steps for agent in pop] == [36, 36] and [len(a.fitness) for a in pop] == [3, 3]
    assert eval_steps_in(tmp_path / "m.csv") == [24, 48, 72]
    assert checkpoint_names(tmp_path / "ckpt") == ["checkpoint_000000012", "checkpoint_000000024",
                                                   "checkpoint_000000036"]
