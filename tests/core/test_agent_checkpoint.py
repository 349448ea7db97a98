"""Agent checkpoints: exact round trip, mutated architectures, warm starts, refusal of pickle."""

import pickle
from typing import Any, ClassVar

import numpy as np
import pytest
import torch
from gymnasium import spaces

from agile_core.algorithms import SingleAgentAlgorithm
from agile_core.algorithms.base import EvolvableAlgorithm
from agile_core.checkpoint import CheckpointError
from agile_core.hpo.hyperparameters import HyperparameterConfig, RLParameter
from agile_core.networks import QNetwork
from agile_core.specs.network import NetworkSpec

torch.set_num_threads(1)
OBS = spaces.Box(-1.0, 1.0, (4,), dtype=np.float32)
ACT = spaces.Discrete(3)


class TinyQ(SingleAgentAlgorithm):
    """A small Q-learner: enough machinery to exercise every part of a checkpoint."""

    supported_action_spaces: ClassVar = (spaces.Discrete,)
    hyperparameter_names = ("lr", "gamma", "batch_size")

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space, index: int = 0,
                 lr: float = 1e-3, gamma: float = 0.9, batch_size: int = 16,
                 net_config: dict[str, Any] | None = None, hp_config: HyperparameterConfig | None = None,
                 device: str = "cpu", seed: int = 0) -> None:
        super().__init__(observation_space, action_space, index=index, hp_config=hp_config, device=device)
        torch.manual_seed(seed)
        self.lr, self.gamma, self.batch_size = lr, gamma, batch_size
        spec = NetworkSpec.model_validate(net_config or {"latent_dim": 16, "encoder_config": {"hidden_size": [16]},
                                                          "head_config": {"hidden_size": [16]}})
        self.actor = QNetwork(observation_space, action_space, spec)
        self.actor_target = self.actor.clone()
        self.register_network_group("actor", "actor_target")
        self.register_optimizer("optimizer", ["actor"], "lr")
        self.rng = np.random.default_rng(seed)
        self.epsilon = 1.0

    def get_action(self, obs: Any, *args: Any, **kwargs: Any) -> np.ndarray:
        with torch.no_grad():
            greedy = self.actor(torch.as_tensor(obs, dtype=torch.float32)).argmax(-1).numpy()
        explore = self.rng.random(len(greedy)) < self.epsilon
        return np.where(explore, self.rng.integers(0, 3, len(greedy)), greedy)

    def learn(self, batch: tuple[torch.Tensor, ...]) -> float:
        obs, action, reward, next_obs = batch
        with torch.no_grad():
            target = reward + self.gamma * self.actor_target(next_obs).max(-1).values
        q = self.actor(obs).gather(1, action[:, None]).squeeze(1)
        loss = torch.nn.functional.mse_loss(q, target)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.epsilon *= 0.9
        return float(loss.detach())

    def test(self, env: Any, *args: Any, **kwargs: Any) -> float:
        self.fitness.append(1.0)
        return 1.0

    def extra_state(self) -> dict[str, Any]:
        return {"epsilon": self.epsilon}

    def load_extra_state(self, state: dict[str, Any], tensors: dict[str, Any]) -> None:
        self.epsilon = float(state["epsilon"])


def batch(seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(32, 4, generator=g) * 2 - 1, torch.randint(0, 3, (32,), generator=g),
            torch.rand(32, generator=g), torch.rand(32, 4, generator=g) * 2 - 1)


def trained_agent() -> TinyQ:
    hp = HyperparameterConfig(lr=RLParameter("lr", 1e-4, 1e-1))
    agent = TinyQ(OBS, ACT, index=3, lr=2e-3, hp_config=hp, seed=1)
    for step in range(5):
        agent.learn(batch(step))
    agent.fitness.extend([10.0, 12.5])
    agent.steps = 1234
    return agent


def _params(agent: TinyQ) -> list[torch.Tensor]:
    return [p.detach().clone() for name in agent.network_names for p in getattr(agent, name).parameters()]


def test_round_trip_gives_identical_actions_and_next_learning_step(tmp_path):
    agent = trained_agent()
    agent.save_checkpoint(tmp_path / "agent")
    loaded = TinyQ.load(tmp_path / "agent")
    assert isinstance(loaded, TinyQ) and loaded.index == 3 and loaded.steps == 1234
    assert loaded.fitness == [10.0, 12.5] and loaded.epsilon == agent.epsilon and loaded.lr == agent.lr
    obs = np.random.default_rng(0).uniform(-1, 1, (64, 4)).astype(np.float32)
    assert np.array_equal(agent.get_action(obs), loaded.get_action(obs))  # same weights, same rng state
    assert agent.learn(batch(9)) == loaded.learn(batch(9))
    for mine, theirs in zip(_params(agent), _params(loaded), strict=True):
        assert torch.equal(mine, theirs)


def test_grown_architecture_survives_save_and_load(tmp_path):
    agent = trained_agent()
    rng = np.random.default_rng(0)
    agent.apply_architecture_mutation("encoder.add_layer", rng)
    agent.apply_architecture_mutation("head.add_node", rng)
    agent.learn(batch(1))
    agent.save_checkpoint(tmp_path / "grown")
    loaded = EvolvableAlgorithm.load(tmp_path / "grown")  # class resolved from the checkpoint
    assert type(loaded) is TinyQ
    assert loaded.actor.config == agent.actor.config != TinyQ(OBS, ACT).actor.config
    obs = torch.rand(8, 4)
    with torch.no_grad():
        assert torch.equal(loaded.actor(obs), agent.actor(obs))
    assert agent.learn(batch(2)) == loaded.learn(batch(2))


def test_load_checkpoint_resumes_in_place_and_load_weights_warm_starts(tmp_path):
    agent = trained_agent()
    agent.save_checkpoint(tmp_path / "a")
    fresh = TinyQ(OBS, ACT, lr=5e-2, seed=7)
    fresh.load_weights(tmp_path / "a")
    assert fresh.lr == 5e-2 and fresh.fitness == [] and fresh.optimizer.state == {}
    assert fresh.optimizer.param_groups[0]["lr"] == 5e-2
    with torch.no_grad():
        assert torch.equal(fresh.actor(torch.ones(1, 4)), agent.actor(torch.ones(1, 4)))
    resumed = TinyQ(OBS, ACT, seed=7)
    resumed.load_checkpoint(tmp_path / "a")
    assert resumed.lr == agent.lr and resumed.fitness == agent.fitness and resumed.optimizer.state


def test_pickle_payload_is_refused_without_running_it(tmp_path):
    agent = trained_agent()
    path = agent.save_checkpoint(tmp_path / "victim")
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    (path / "agent.safetensors").write_bytes(pickle.dumps(Payload()))
    with pytest.raises(CheckpointError):
        TinyQ.load(path)
    assert not marker.exists()


def test_wrong_algorithm_and_non_checkpoint_are_refused(tmp_path):
    agent = trained_agent()
    agent.save_checkpoint(tmp_path / "a")

    class OtherQ(TinyQ):
        pass

    with pytest.raises(CheckpointError, match=r"not .*OtherQ"):
        OtherQ(OBS, ACT).load_checkpoint(tmp_path / "a")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError):
        TinyQ.load(tmp_path / "empty")


def test_population_checkpoint_round_trip(tmp_path):
    from agile_core.checkpoint import CheckpointManager
    from agile_core.training.checkpointing import load_population, population_state

    agents = [trained_agent(), TinyQ(OBS, ACT, index=5, seed=4)]
    agents[1].apply_architecture_mutation("head.add_layer", np.random.default_rng(1))
    meta, parts = population_state(agents, evolution={"generation": 3}, loop={"global_step": 99},
                                   buffers={"agent_0": {"obs": np.zeros((4, 4), np.float32), "ptr": 2}})
    manager = CheckpointManager(tmp_path / "ckpts")
    manager.save(99, parts, meta)
    torch.rand(3)  # advance the global RNG; restoring must rewind it
    restored = load_population(manager.latest())
    assert [a.index for a in restored.agents] == [3, 5]
    assert restored.evolution == {"generation": 3} and restored.loop == {"global_step": 99}
    assert restored.buffers["agent_0"]["ptr"] == 2
    assert restored.agents[1].actor.config == agents[1].actor.config
    for mine, theirs in zip(agents, restored.agents, strict=True):
        assert mine.learn(batch(4)) == theirs.learn(batch(4))
    warm = load_population(manager.latest(), weights_only=True)
    assert warm.agents[0].fitness == [] and warm.agents[0].optimizer.state == {}
