"""DPO: direct preference optimisation of a LoRA adapter against the frozen base.

With ``log pi`` the summed log-probability of a response under the member (adapter on) and
``log pi_ref`` under the reference (the shared base with adapters disabled, or with
``reference="initial"`` the member's frozen initial adapter), the implicit reward
margin of a pair is ``m = beta * ((log pi(c) - log pi_ref(c)) - (log pi(r) - log pi_ref(r)))``
and the loss is ``mean(-log sigmoid(m)) + nll_alpha * NLL(c)`` (NLL per chosen token).
Fitness (``test``): preference accuracy on held-out pairs (``m > 0``, ties count one half);
``last_margin`` keeps the mean margin of the last evaluation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Self

import torch
import torch.nn.functional as F

from agile_core.hpo.hyperparameters import HyperparameterConfig
from agile_llm.algorithm import LoRAFinetuner, sequence_logprobs
from agile_llm.specs import DPOSpec

__all__ = ["DPO", "dpo_loss"]

_D = DPOSpec.defaults()


def dpo_loss(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor, ref_chosen: torch.Tensor,
             ref_rejected: torch.Tensor, beta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean DPO loss, per-pair margins) from summed log-probs ``[B]`` of each response."""
    margins = beta * ((policy_chosen - ref_chosen) - (policy_rejected - ref_rejected))
    return -F.logsigmoid(margins).mean(), margins


class DPO(LoRAFinetuner):
    """Direct preference optimisation (see the module docstring); arguments as
    :class:`LoRAFinetuner` plus the hyperparameters of :class:`~agile_llm.specs.DPOSpec` (`beta`,
    `nll_alpha` and `reference` among them), with its defaults and rules."""

    spec_class = DPOSpec

    # hyperparameters, set from DPOSpec (declared here for the type checker)
    beta: float
    nll_alpha: float

    def __init__(self, model: Any, *, tokenizer: Any = None, lora_config: Mapping[str, Any] | None = None,
                 lr: float = _D["lr"], batch_size: int = _D["batch_size"], max_length: int = _D["max_length"],
                 max_grad_norm: float | None = _D["max_grad_norm"], beta: float = _D["beta"],
                 nll_alpha: float = _D["nll_alpha"], index: int = 0, hp_config: HyperparameterConfig | None = None,
                 device: str | torch.device = "cpu", seed: int | None = None, base_dir: str | None = None,
                 reference: str = _D["reference"]) -> None:
        self.adopt_hyperparameters(locals())
        super().__init__(model, tokenizer=tokenizer, lora_config=lora_config, index=index, hp_config=hp_config,
                         device=device, seed=seed, base_dir=base_dir)
        self.last_margin = 0.0

    def _reference(self, batch: Mapping[str, Any]) -> torch.Tensor:
        """Reference log-probs of each row: the reference never changes, so they are computed
        once per (sequence, response start) in eval mode and cached (on the shared base for the
        ``base`` reference, on the member for its own ``initial`` one)."""
        cache = self.base.reference_cache if self.reference_adapter_name is None else self.reference_logprob_cache
        ids, mask, labels = batch["input_ids"], batch["attention_mask"], batch["labels"]
        keys = [(tuple(ids[row, :int(mask[row].sum())].tolist()), int((labels[row] != -100).int().argmax()))
                for row in range(ids.shape[0])]
        if any(key not in cache for key in keys):
            model = self.base.peft_model
            training = model.training
            model.eval()
            with torch.no_grad(), self.reference_policy() as reference:
                values = sequence_logprobs(reference, batch, self.device)[0].tolist()
            model.train(training)
            cache.update(zip(keys, values, strict=True))
        return torch.tensor([cache[key] for key in keys], device=self.device)

    @classmethod
    def learn_members(cls, members: Sequence[Self], batches: Sequence[Mapping[str, Any]]) -> list[dict[str, float]]:
        """One DPO update per member on its batch of pairs (chosen rows first, then rejected)."""
        losses = []
        for agent, batch in zip(members, batches, strict=True):
            pairs = int(batch["pairs"])
            ref = agent._reference(batch)
            logp, count = sequence_logprobs(agent.policy(training=True), batch, agent.device)
            loss, margins = dpo_loss(logp[:pairs], logp[pairs:], ref[:pairs], ref[pairs:], agent.beta)
            total = loss
            if agent.nll_alpha > 0:
                total = total + agent.nll_alpha * (-logp[:pairs].sum() / count[:pairs].sum().clamp(min=1))
            agent._step(total)
            losses.append({"loss": float(total.detach()), "dpo_loss": float(loss.detach()),
                           "margin": float(margins.detach().mean()),
                           "accuracy": float((margins > 0).float().mean())})
        return losses

    @torch.no_grad()
    def evaluate_preferences(self, env: Any, batch_size: int = 32) -> tuple[float, float]:
        """(preference accuracy, mean margin) over the held-out pairs of `env`."""
        model = self.policy(training=False)
        wins, margin_sum, count = 0.0, 0.0, 0
        for batch in env.test_batches(batch_size):
            pairs = int(batch["pairs"])
            ref = self._reference(batch)
            logp, _ = sequence_logprobs(self.policy(training=False) if model is None else model, batch, self.device)
            _, margins = dpo_loss(logp[:pairs], logp[pairs:], ref[:pairs], ref[pairs:], self.beta)
            wins += float((margins > 0).sum()) + 0.5 * float((margins == 0).sum())
            margin_sum += float(margins.sum())
            count += pairs
        return wins / max(count, 1), margin_sum / max(count, 1)

    def test(self, env: Any, *args: Any, **kwargs: Any) -> float:
        """Fitness: held-out preference accuracy (appended to ``fitness``)."""
        accuracy, self.last_margin = self.evaluate_preferences(env)
        self.fitness.append(accuracy)
        return accuracy
