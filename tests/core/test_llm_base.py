"""LLM agents evolve hyperparameters only; their fixed networks still clone and checkpoint."""

from typing import Any

import numpy as np
import torch
from torch import nn

from agile_core.algorithms import LLMAlgorithm
from agile_core.hpo.hyperparameters import HyperparameterConfig, RLParameter
from agile_core.hpo.mutation import Mutations


class TinyLM(LLMAlgorithm):
    """A stand-in for a pretrained model: an embedding and a linear read-out."""

    hyperparameter_names = ("lr", "beta")

    def __init__(self, index: int = 0, lr: float = 1e-4, beta: float = 0.1,
                 hp_config: HyperparameterConfig | None = None, device: str = "cpu") -> None:
        super().__init__(index=index, hp_config=hp_config, device=device)
        torch.manual_seed(0)
        self.lr, self.beta = lr, beta
        self.actor = nn.Sequential(nn.Embedding(16, 8), nn.Linear(8, 16))
        self.register_network_group("actor")
        self.register_optimizer("optimizer", ["actor"], "lr")

    def get_action(self, obs: Any, *args: Any, **kwargs: Any) -> Any:
        return self.actor(obs).argmax(-1)

    def learn(self, tokens: torch.Tensor) -> float:
        logits = self.actor(tokens[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, 16), tokens[:, 1:].reshape(-1))
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return float(loss.detach())

    def test(self, env: Any, *args: Any, **kwargs: Any) -> float:
        self.fitness.append(0.0)
        return 0.0


def test_only_hyperparameters_evolve():
    hp = HyperparameterConfig(lr=RLParameter("lr", 1e-5, 1e-3), beta=RLParameter("beta", 0.01, 1.0))
    agent = TinyLM(hp_config=hp)
    before = [p.detach().clone() for p in agent.actor.parameters()]
    mutations = Mutations(no_mutation=0, architecture=1, parameters=1, activation=1, rl_hp=0, rand_seed=0)
    for _ in range(10):
        mutations.mutation([agent])
        assert agent.mut == "None"
    assert all(torch.equal(a, b) for a, b in zip(before, agent.actor.parameters(), strict=True))
    Mutations(no_mutation=0, architecture=0, parameters=0, rl_hp=1, rand_seed=0).mutation([agent])
    assert agent.mut != "None" and (agent.lr != 1e-4 or agent.beta != 0.1)
    assert agent.optimizer.param_groups[0]["lr"] == agent.lr


def test_fixed_networks_clone_and_round_trip(tmp_path):
    agent = TinyLM(index=1)
    tokens = torch.randint(0, 16, (4, 6), generator=torch.Generator().manual_seed(0))
    agent.learn(tokens)
    twin = agent.clone(index=2)
    assert twin.lineage.parent_id == 1 and not any(
        a.data_ptr() == b.data_ptr() for a, b in zip(agent.actor.parameters(), twin.actor.parameters(), strict=True))
    agent.save_checkpoint(tmp_path / "lm")
    loaded = TinyLM.load(tmp_path / "lm")
    assert agent.learn(tokens) == loaded.learn(tokens)
    assert np.isclose(loaded.lr, agent.lr)
