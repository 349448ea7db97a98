"""LLMREINFORCE: REINFORCE with a baseline on a LoRA adapter (Williams, 1992; RLOO with the group
baseline, Ahmadian et al., 2024).

An episode's advantage is its return minus a baseline, the same for every generated token of its
transcript (no standard-deviation scaling: that is GRPO's). Baselines (``baseline``):

* ``group`` (default): the mean return of the *other* episodes sampled for the same prompt
  (leave-one-out). It does not depend on the episode itself, so the gradient stays unbiased, and
  it removes how hard the prompt is;
* ``batch``: the mean return of the step's episodes (slightly biased, one per step);
* ``running``: an exponential moving average of past steps' mean returns,
  ``b <- decay * b + (1 - decay) * mean(returns)``, used *before* it sees the current step (the
  first step uses the batch mean); its value is saved in checkpoints and copied to clones.

The loss of a sequence is the mean over its generated tokens of ``-w A log p + beta * KL``
(``KL``: the ``exp(q - p) - (q - p) - 1`` estimate against the shared base with adapters
disabled; ``w``: the truncated importance weight with the vLLM backend, else 1); the batch loss
is the mean over sequences. One on-policy update per batch (REINFORCE has no ratio to clip).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from agile_core.hpo.hyperparameters import HyperparameterConfig
from agile_llm.rollout import Episode
from agile_llm.rollout_learner import RolloutLearner, sequence_mean, token_logprobs
from agile_llm.specs import LLMREINFORCESpec

__all__ = ["LLMREINFORCE", "baseline_advantages"]

_D = LLMREINFORCESpec.defaults()


def baseline_advantages(rewards: Sequence[float], baseline: str, group_size: int,
                        running: float | None = None) -> torch.Tensor:
    """Return minus baseline for rewards laid out group after group: ``group`` (leave-one-out
    mean of the group), ``batch`` (mean of all), ``running`` (`running`, or the batch mean when
    None)."""
    r = torch.as_tensor(list(rewards), dtype=torch.float32)
    if baseline == "group":
        if group_size < 2:
            raise ValueError("the group baseline needs group_size >= 2")
        grouped = r.reshape(-1, group_size)
        others = (grouped.sum(dim=1, keepdim=True) - grouped) / (group_size - 1)
        return (grouped - others).reshape(-1)
    if baseline == "batch":
        return r - r.mean()
    if baseline == "running":
        return r - (r.mean() if running is None else torch.tensor(float(running)))
    raise ValueError(f"unknown baseline {baseline!r} (group, batch or running)")


class LLMREINFORCE(RolloutLearner):
    """REINFORCE with a baseline, one LoRA adapter per member on a shared base.

    Args:
        model, tokenizer, lora_config, index, hp_config, device, seed, base_dir, reference: As for
            :class:`~agile_llm.algorithm.LoRAFinetuner`.
        lr, batch_size, max_length, max_grad_norm, beta, group_size, baseline, baseline_decay,
        temperature, max_new_tokens, use_vllm, vllm_config: See
            :class:`~agile_llm.specs.LLMREINFORCESpec`.
    """

    spec_class = LLMREINFORCESpec

    # hyperparameters, set from LLMREINFORCESpec (declared here for the type checker; the shared
    # ones on RolloutLearner and LoRAFinetuner)
    baseline: str
    baseline_decay: float

    def __init__(self, model: Any, *, tokenizer: Any = None, lora_config: Mapping[str, Any] | None = None,
                 lr: float = _D["lr"], batch_size: int = _D["batch_size"], max_length: int = _D["max_length"],
                 max_grad_norm: float | None = _D["max_grad_norm"], beta: float = _D["beta"],
                 group_size: int = _D["group_size"], baseline: str = _D["baseline"],
                 baseline_decay: float = _D["baseline_decay"], temperature: float = _D["temperature"],
                 max_new_tokens: int = _D["max_new_tokens"], use_vllm: bool = _D["use_vllm"],
                 vllm_config: Mapping[str, Any] | None = None, index: int = 0,
                 hp_config: HyperparameterConfig | None = None, device: str | torch.device = "cpu",
                 seed: int | None = None, base_dir: str | None = None,
                 reference: str = _D["reference"]) -> None:
        self.adopt_hyperparameters(locals())
        super().__init__(model, tokenizer=tokenizer, lora_config=lora_config, index=index, hp_config=hp_config,
                         device=device, seed=seed, base_dir=base_dir)
        self.running_baseline: float | None = None
        """The ``running`` baseline's current value (None before the first step)."""

    def update(self, episodes: list[Episode]) -> dict[str, float]:
        """One REINFORCE update on `episodes` (``group_size`` per prompt, group after group)."""
        batch = self.rollout_batch(episodes)
        adv = baseline_advantages(batch.rewards, self.baseline, self.group_size, self.running_baseline)
        mean_return = float(np.mean(batch.rewards))
        if self.baseline == "running":
            previous = mean_return if self.running_baseline is None else self.running_baseline
            self.running_baseline = self.baseline_decay * previous + (1 - self.baseline_decay) * mean_return
        logp = token_logprobs(self.policy(training=True), batch.ids, batch.attention)
        penalty, kl_stats = self.kl_term(logp, batch)
        per_token = -batch.weights * adv.to(self.device).unsqueeze(-1) * logp + penalty
        loss = sequence_mean(per_token, batch.mask)
        self._step(loss)
        return {"loss": float(loss.detach()), **kl_stats, "reward": mean_return}

    # ------------------------------------------------------------------ checkpoints
    def extra_state(self) -> dict[str, Any]:
        """The base model's reference and hash, and the running baseline."""
        return {**super().extra_state(), "running_baseline": self.running_baseline}

    def load_extra_state(self, state: dict[str, Any], tensors: dict[str, Any]) -> None:
        """Check the base model; restore the running baseline."""
        super().load_extra_state(state, tensors)
        value = state.get("running_baseline")
        self.running_baseline = None if value is None else float(value)
