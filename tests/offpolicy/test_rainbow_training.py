"""RainbowDQN in `train_off_policy`: prioritized replay (beta annealing, priority updates), n-step
memory aligned with the PER memory, checkpoint/resume of both memories, and the manifest path
(`build_buffer`, `build_memories`, LocalTrainer)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml

from agile_core.hpo.mutation import Mutations
from agile_core.hpo.selection import TournamentSelection
from agile_core.specs.manifest import TrainingManifest
from agile_core.trainer import LocalTrainer
from agile_offpolicy.buffers import MultiStepReplayBuffer, PrioritizedReplayBuffer, ReplayBuffer
from agile_offpolicy.dqn import DQN
from agile_offpolicy.rainbow import RainbowDQN
from agile_offpolicy.run import build_buffer, build_memories
from agile_offpolicy.training import train_off_policy
from tests.offpolicy.test_train_off_policy import countdown_vec

NET = {"latent_dim": 8, "encoder_config": {"hidden_size": [8]}, "head_config": {"hidden_size": [8]}}
GAMMA = 0.9
RAINBOW_MANIFEST = Path(__file__).resolve().parents[2] / "configs" / "training" / "rainbow_cartpole.yaml"


class RecordingRainbow(RainbowDQN):
    """Remembers the storage indices of every 1-step and n-step batch it learns from (agent by
    agent: it declares its own population step, the inherited one, so its ``learn`` may build a
    group of one)."""

    calls: ClassVar[list[tuple[np.ndarray, np.ndarray | None]]] = []

    def learn(self, experiences, n_experiences=None):
        RecordingRainbow.calls.append((np.asarray(experiences.indices),
                                       None if n_experiences is None else np.asarray(n_experiences.indices)))
        return super().learn(experiences, n_experiences)

    @classmethod
    def learn_population(cls, group, batch, active):
        return super().learn_population(group, batch, active)


class RecordingPER(PrioritizedReplayBuffer):
    """Remembers the beta of every sample."""

    betas: ClassVar[list[float]] = []

    def sample(self, batch_size, beta=0.4, rng=None):
        RecordingPER.betas.append(beta)
        return super().sample(batch_size, beta=beta, rng=rng)


def make_pop(env: gym.vector.VectorEnv, size: int = 1, cls: type[RainbowDQN] = RainbowDQN, **kwargs: Any) -> list:
    options = {"net_config": NET, "batch_size": 8, "learn_step": 4, "gamma": GAMMA, "num_atoms": 11,
               "v_min": 0.0, "v_max": 10.0, "beta": 0.4}
    options.update(kwargs)
    return [cls(env.single_observation_space, env.single_action_space, index=i, seed=i, **options)
            for i in range(size)]


def memories(env: gym.vector.VectorEnv, size: int = 1000, n_step: int = 3,
             per_cls: type[PrioritizedReplayBuffer] = PrioritizedReplayBuffer,
             ) -> tuple[PrioritizedReplayBuffer, MultiStepReplayBuffer]:
    o, a = env.single_observation_space, env.single_action_space
    return (per_cls(size, o, a, alpha=0.6, seed=0),
            MultiStepReplayBuffer(size, o, a, n_step=n_step, gamma=GAMMA, num_envs=env.num_envs, seed=0))


def run(env: gym.vector.VectorEnv, pop: list, memory: Any, **kwargs: Any) -> tuple[list, list[float]]:
    options = {"max_steps": 80, "evo_steps": 80, "verbose": False}
    options.update(kwargs)
    return train_off_policy(env, "Steps", "RainbowDQN", pop, memory, **options)


# ---------------------------------------------------------------------------- PER and n-step in the loop
def test_n_step_and_per_memories_stay_aligned_and_batches_share_indices() -> None:
    env = countdown_vec((3, True), (5, False), (7, True))
    per, n_step = memories(env)
    RecordingRainbow.calls.clear()
    run(env, make_pop(env, cls=RecordingRainbow), per, n_step_memory=n_step, max_steps=240, evo_steps=120,
        batch_population=False)
    assert len(per) == len(n_step) > 0 and per.ptr == n_step.ptr
    indices = np.arange(len(per))
    one, multi = per.sample_from_indices(indices), n_step.sample_from_indices(indices)
    obs, n_obs = one.obs.numpy(), multi.obs.numpy()
    np.testing.assert_array_equal(obs, n_obs)
    np.testing.assert_array_equal(one.action.numpy(), multi.action.numpy())
    np.testing.assert_array_equal(one.next_obs.numpy()[:, 0], obs[:, 0] + 1)  # 1-step transition
    steps = multi.n_steps.numpy()
    assert set(steps) == {1, 2, 3}
    np.testing.assert_array_equal(multi.next_obs.numpy()[:, 0], obs[:, 0] + steps)  # never past an episode end
    np.testing.assert_allclose(multi.reward.numpy(), (1 - GAMMA**steps) / (1 - GAMMA), rtol=1e-6)
    ends_episode = multi.next_obs.numpy()[:, 0] == obs[:, 1]
    terminating = obs[:, 1] != 5
    np.testing.assert_array_equal(multi.done.numpy(), (ends_episode & terminating).astype(np.float32))
    # every learn step got the n-step view of exactly the prioritized batch
    assert RecordingRainbow.calls and all(np.array_equal(a, b) for a, b in RecordingRainbow.calls)


def test_priorities_are_updated_after_each_learn_and_beta_anneals_to_one() -> None:
    env = countdown_vec(*[(6, True)] * 4)
    RecordingPER.betas.clear()
    per, n_step = memories(env, per_cls=RecordingPER)
    pop, _ = run(env, make_pop(env, beta=0.4), per, n_step_memory=n_step, max_steps=400, evo_steps=100)
    probabilities = per.probabilities()
    assert per.max_priority != 1.0 and not np.allclose(probabilities, probabilities[0])
    betas = RecordingPER.betas
    assert len(betas) == pop[0].learn_counter and np.all(np.diff(betas) > 0)
    assert 0.4 < betas[0] < 0.45 and betas[-1] == pytest.approx(1.0)


def test_per_alone_and_n_step_alone_train() -> None:
    env = countdown_vec((4, True), (6, False))
    o, a = env.single_observation_space, env.single_action_space
    per = PrioritizedReplayBuffer(500, o, a, seed=0)
    pop, _ = run(env, make_pop(env), per)
    assert pop[0].learn_counter > 0 and per.max_priority != 1.0
    n_step = MultiStepReplayBuffer(500, o, a, n_step=3, gamma=GAMMA, num_envs=2, seed=0)
    pop, _ = run(env, make_pop(env), n_step)
    assert pop[0].learn_counter > 0 and set(n_step.sample_from_indices(np.arange(len(n_step))).n_steps.numpy()) > {3}


def test_uniform_memory_works_with_rainbow() -> None:
    env = countdown_vec((4, True), (6, False))
    memory = ReplayBuffer(500, env.single_observation_space, env.single_action_space, seed=0)
    pop, fitnesses = run(env, make_pop(env), memory)
    assert pop[0].learn_counter > 0 and len(fitnesses) == 1


def test_refuses_memories_that_would_train_silently_wrong() -> None:
    env = countdown_vec((4, True), (6, False))
    o, a = env.single_observation_space, env.single_action_space
    dqn = [DQN(o, a, net_config=NET, batch_size=8)]
    per, n_step = memories(env)
    with pytest.raises(ValueError, match="DQN cannot"):
        run(env, dqn, per)
    with pytest.raises(ValueError, match="DQN cannot"):
        run(env, dqn, ReplayBuffer(1000, o, a), n_step_memory=n_step)
    with pytest.raises(ValueError, match="same max_size"):
        run(env, make_pop(env), PrioritizedReplayBuffer(999, o, a), n_step_memory=n_step)
    with pytest.raises(ValueError, match="1-step buffer"):
        run(env, make_pop(env), n_step, n_step_memory=memories(env)[1])
    with pytest.raises(ValueError, match="windows for 2 sub-environments"):
        run(env, make_pop(env), per, n_step_memory=MultiStepReplayBuffer(1000, o, a, 3, GAMMA, num_envs=3))


def test_checkpoint_resume_restores_priorities_and_n_step_memory(tmp_path) -> None:
    env = countdown_vec((5, True), (7, False))

    def fresh() -> dict[str, Any]:
        per, n_step = memories(env, size=400)
        return {"pop": make_pop(env, size=2), "memory": per, "n_step_memory": n_step,
                "selection_strategy": TournamentSelection(2, True, 2, rng=0), "mutation": Mutations(rand_seed=0)}

    full = fresh()
    pop_full, fit_full = run(env, full["pop"], full["memory"], n_step_memory=full["n_step_memory"], selection_strategy=full["selection_strategy"],
                             mutation=full["mutation"], max_steps=48, evo_steps=16, checkpoint=32,
                             checkpoint_path=str(tmp_path / "ckpt"), seed=3)
    mid_run = tmp_path / "ckpt" / "checkpoint_000000032"
    assert mid_run.exists()

    resumed = fresh()
    pop_resumed, fit_resumed = run(env, resumed["pop"], resumed["memory"], n_step_memory=resumed["n_step_memory"],
                                   selection_strategy=resumed["selection_strategy"], mutation=resumed["mutation"],
                                   max_steps=48, evo_steps=16, seed=3, resume_from_checkpoint=str(mid_run))
    assert fit_resumed == fit_full
    assert [a.learn_counter for a in pop_resumed] == [a.learn_counter for a in pop_full]
    for mine, theirs in zip(pop_resumed, pop_full, strict=True):
        for a, b in zip(mine.actor.state_dict().values(), theirs.actor.state_dict().values(), strict=True):
            torch.testing.assert_close(a, b)
    for name in ("memory", "n_step_memory"):
        assert len(resumed[name]) == len(full[name]) and resumed[name].ptr == full[name].ptr
    np.testing.assert_array_equal(resumed["memory"].probabilities(), full["memory"].probabilities())
    np.testing.assert_array_equal(resumed["n_step_memory"].pending, full["n_step_memory"].pending)


# ---------------------------------------------------------------------------- manifest path
def _manifest(replay_buffer: dict[str, Any], algorithm: dict[str, Any] | None = None) -> TrainingManifest:
    return TrainingManifest.get_validated({
        "algorithm": {"name": "RainbowDQN", **(algorithm or {})},
        "environment": {"name": "CartPole-v1", "num_envs": 2},
        "replay_buffer": replay_buffer,
    })


@pytest.mark.parametrize(("section", "memory_type", "n_step_type"), [
    ({}, ReplayBuffer, type(None)),
    ({"per_buffer": True}, PrioritizedReplayBuffer, type(None)),
    ({"n_step_buffer": True}, MultiStepReplayBuffer, type(None)),
    ({"per_buffer": True, "n_step_buffer": True}, PrioritizedReplayBuffer, MultiStepReplayBuffer),
])
def test_the_memories_are_those_the_manifest_asks_for(section: dict, memory_type: type, n_step_type: type) -> None:
    env = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
    memory, n_step_memory = build_memories(_manifest({"max_size": 500, **section}), env, "cpu")
    assert type(memory) is memory_type and memory.max_size == 500
    assert type(n_step_memory) is n_step_type


def test_n_step_alpha_and_gamma_come_from_the_manifest() -> None:
    env = gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync")
    both = {"per_buffer": True, "n_step_buffer": True, "per_buffer_args": {"alpha": 0.5}}
    memory, n_step = build_memories(_manifest(both, {"n_step": 5, "gamma": 0.95}), env, "cpu")
    assert memory.alpha == 0.5 and n_step is not None
    assert (n_step.n_step, n_step.gamma, n_step.num_envs) == (5, 0.95, 3)
    # an explicit n_step in the replay section wins over the algorithm's
    _, n_step = build_memories(_manifest({**both, "n_step": 2}, {"n_step": 5}), env, "cpu")
    assert n_step is not None and n_step.n_step == 2
    spec = _manifest({"n_step_buffer_args": {"n_step": 4}, "n_step_buffer": True}, {"n_step": 5})
    buffer = build_buffer(spec.resolved_replay_buffer(), spec.algorithm, "cpu",
                          observation_space=env.single_observation_space, action_space=env.single_action_space)
    assert isinstance(buffer, MultiStepReplayBuffer) and buffer.n_step == 4
    with pytest.raises(ValueError, match="observation and action spaces"):
        build_buffer(spec.resolved_replay_buffer(), spec.algorithm, "cpu")


def test_local_trainer_trains_the_rainbow_example_manifest(tmp_path) -> None:
    data = yaml.safe_load(RAINBOW_MANIFEST.read_text())
    data["training"].update({"max_steps": 320, "evo_steps": 160, "learning_delay": 64, "eval_loop": 1})
    data["replay_buffer"]["max_size"] = 1_000
    trainer = LocalTrainer.from_manifest(data)
    pop, fitnesses = trainer.train(verbose=False, checkpoint_steps=160, checkpoint_path=str(tmp_path / "ckpt"))
    assert len(pop) == 2 and all(isinstance(agent, RainbowDQN) for agent in pop)
    assert all(agent.steps == 320 and agent.learn_counter > 0 for agent in pop) and len(fitnesses) == 2
    assert (pop[0].v_min, pop[0].v_max, pop[0].num_atoms) == (0.0, 100.0, 51)
    assert (tmp_path / "ckpt" / "checkpoint_000000320").exists()
