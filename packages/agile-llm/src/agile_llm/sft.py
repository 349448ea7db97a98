"""SFT: supervised finetuning of a LoRA adapter on (prompt, response) pairs.

Loss: mean cross-entropy over the response tokens of the batch (prompt and padding take none).
Fitness (``test``): minus the mean per-token loss over the test split, so higher is better.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Self

import torch

from agile_core.hpo.hyperparameters import HyperparameterConfig
from agile_llm.algorithm import LoRAFinetuner, sequence_logprobs
from agile_llm.specs import SFTSpec

__all__ = ["SFT"]

_D = SFTSpec.defaults()


class SFT(LoRAFinetuner):
    """Supervised finetuning (see the module docstring); arguments as :class:`LoRAFinetuner`
    plus the hyperparameters of :class:`~agile_llm.specs.SFTSpec`, with its defaults and rules."""

    spec_class = SFTSpec

    def __init__(self, model: Any, *, tokenizer: Any = None, lora_config: Mapping[str, Any] | None = None,
                 lr: float = _D["lr"], batch_size: int = _D["batch_size"], max_length: int = _D["max_length"],
                 max_grad_norm: float | None = _D["max_grad_norm"], index: int = 0,
                 hp_config: HyperparameterConfig | None = None, device: str | torch.device = "cpu",
                 seed: int | None = None, base_dir: str | None = None) -> None:
        self.adopt_hyperparameters(locals())
        super().__init__(model, tokenizer=tokenizer, lora_config=lora_config, index=index, hp_config=hp_config,
                         device=device, seed=seed, base_dir=base_dir)

    @classmethod
    def learn_members(cls, members: Sequence[Self], batches: Sequence[Mapping[str, Any]]) -> list[dict[str, float]]:
        """One SFT update per member on its batch: token-mean response cross-entropy."""
        losses = []
        for agent, batch in zip(members, batches, strict=True):
            logp, count = sequence_logprobs(agent.policy(training=True), batch, agent.device)
            loss = -logp.sum() / count.sum().clamp(min=1)
            agent._step(loss)
            losses.append({"loss": float(loss.detach())})
        return losses

    @torch.no_grad()
    def evaluate_loss(self, env: Any, batch_size: int = 32) -> float:
        """Mean per-token response loss over the test split of `env`."""
        model = self.policy(training=False)
        total, tokens = 0.0, 0
        for batch in env.test_batches(batch_size):
            logp, count = sequence_logprobs(model, batch, self.device)
            total -= float(logp.sum())
            tokens += int(count.sum())
        return total / max(tokens, 1)

    def test(self, env: Any, *args: Any, **kwargs: Any) -> float:
        """Fitness: minus the test-split loss (appended to ``fitness``)."""
        fitness = -self.evaluate_loss(env)
        self.fitness.append(fitness)
        return fitness
