"""GRPO: group relative policy optimisation of a LoRA adapter (Shao et al., 2024).

For every prompt the member samples ``group_size`` episodes; an episode's advantage is its return
minus the group's mean return, divided by the group's standard deviation plus ``eps``, and applies
to every policy-generated token of its transcript (the rollout mask). With ``r`` the ratio of the
current to the sampling-time probability of a generated token, the loss of a sequence is the mean
over its generated tokens of ``-min(r A, clip(r, 1 - clip_coef, 1 + clip_coef) A) + beta * KL``,
where ``KL`` is the unbiased ``exp(q - p) - (q - p) - 1`` estimate against the reference (the
shared base with adapters disabled, or the member's frozen initial adapter with ``reference:
initial``; ``q`` its log-prob, ``p`` the member's); the batch loss is the
mean over sequences. Each batch is reused for ``update_epochs`` updates. With the vLLM backend
each generated token's term is multiplied by the truncated importance weight between the
engine's and the trainer's log-probs (:mod:`agile_llm.vllm_backend`).
Generation, collection, batch tensors and evaluation are :class:`~agile_llm.rollout_learner.RolloutLearner`'s.
Fitness (``test``): mean return of greedy episodes on the held-out prompts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from agile_core.hpo.hyperparameters import HyperparameterConfig
from agile_llm.rollout import Episode
from agile_llm.rollout_learner import (
    RolloutLearner,
    clipped_surrogate,
    pad_right,
    sequence_mean,
    token_logprobs,
)
from agile_llm.specs import GRPOSpec

__all__ = ["GRPO", "group_advantages", "pad_right", "token_logprobs"]

_D = GRPOSpec.defaults()


def group_advantages(rewards: torch.Tensor | Sequence[float], group_size: int, eps: float = 1e-4) -> torch.Tensor:
    """``(r - mean_group) / (std_group + eps)`` for rewards laid out group after group."""
    r = torch.as_tensor(rewards, dtype=torch.float32).reshape(-1, group_size)
    std = r.std(dim=1, keepdim=True, unbiased=False) if group_size > 1 else torch.zeros_like(r[:, :1])
    return ((r - r.mean(dim=1, keepdim=True)) / (std + eps)).reshape(-1)


class GRPO(RolloutLearner):
    """Group relative policy optimisation of one LoRA adapter per member on a shared base.

    Args:
        model, tokenizer, lora_config, index, hp_config, device, seed, base_dir, reference: As for
            :class:`~agile_llm.algorithm.LoRAFinetuner`.
        lr, batch_size, max_length, max_grad_norm, beta, clip_coef, group_size, temperature,
        max_new_tokens, update_epochs, use_vllm, vllm_config: See
            :class:`~agile_llm.specs.GRPOSpec`.
    """

    spec_class = GRPOSpec

    # hyperparameters, set from GRPOSpec (declared here for the type checker; the shared ones on
    # RolloutLearner and LoRAFinetuner)
    clip_coef: float
    update_epochs: int

    def __init__(self, model: Any, *, tokenizer: Any = None, lora_config: Mapping[str, Any] | None = None,
                 lr: float = _D["lr"], batch_size: int = _D["batch_size"], max_length: int = _D["max_length"],
                 max_grad_norm: float | None = _D["max_grad_norm"], beta: float = _D["beta"],
                 clip_coef: float = _D["clip_coef"], group_size: int = _D["group_size"],
                 temperature: float = _D["temperature"], max_new_tokens: int = _D["max_new_tokens"],
                 update_epochs: int = _D["update_epochs"], use_vllm: bool = _D["use_vllm"],
                 vllm_config: Mapping[str, Any] | None = None, index: int = 0,
                 hp_config: HyperparameterConfig | None = None, device: str | torch.device = "cpu",
                 seed: int | None = None, base_dir: str | None = None,
                 reference: str = _D["reference"]) -> None:
        self.adopt_hyperparameters(locals())
        super().__init__(model, tokenizer=tokenizer, lora_config=lora_config, index=index, hp_config=hp_config,
                         device=device, seed=seed, base_dir=base_dir)

    def update(self, episodes: list[Episode]) -> dict[str, float]:
        """``update_epochs`` GRPO updates on `episodes` (``group_size`` per prompt, group after group)."""
        batch = self.rollout_batch(episodes)
        adv = group_advantages(batch.rewards, self.group_size).to(self.device).unsqueeze(-1)
        stats: dict[str, float] = {}
        for _ in range(self.update_epochs):
            logp = token_logprobs(self.policy(training=True), batch.ids, batch.attention)
            penalty, kl_stats = self.kl_term(logp, batch)
            per_token = -batch.weights * clipped_surrogate(logp, batch.old, adv, self.clip_coef) + penalty
            loss = sequence_mean(per_token, batch.mask)
            self._step(loss)
            stats = {"loss": float(loss.detach()), **kl_stats, "reward": float(np.mean(batch.rewards))}
        return stats
