"""GRPO: group relative policy optimisation of a LoRA adapter (Shao et al., 2024).

For every prompt the member samples ``group_size`` episodes; an episode's advantage is its return
minus the group's mean return, divided by the group's standard deviation plus ``eps``, and applies
to every policy-generated token of its transcript (the rollout mask). With ``r`` the ratio of the
current to the sampling-time probability of a generated token, the loss of a sequence is the mean
over its generated tokens of ``-min(r A, clip(r, 1 - clip_coef, 1 + clip_coef) A) + beta * KL``,
where ``KL`` is the unbiased ``exp(q - p) - (q - p) - 1`` estimate against the reference (the
shared base, adapters disabled; ``q`` its log-prob, ``p`` the member's); the batch loss is the
mean over sequences. Each batch is reused for ``update_epochs`` updates.
Fitness (``test``): mean return of greedy episodes on the held-out prompts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Self

import numpy as np
import torch

from agile_core.hpo.hyperparameters import HyperparameterConfig
from agile_llm.algorithm import LoRAFinetuner
from agile_llm.rollout import Episode, RolloutHarness, run_episodes
from agile_llm.specs import GRPOSpec

__all__ = ["GRPO", "group_advantages", "token_logprobs"]

_D = GRPOSpec.defaults()


def group_advantages(rewards: torch.Tensor | Sequence[float], group_size: int, eps: float = 1e-4) -> torch.Tensor:
    """``(r - mean_group) / (std_group + eps)`` for rewards laid out group after group."""
    r = torch.as_tensor(rewards, dtype=torch.float32).reshape(-1, group_size)
    std = r.std(dim=1, keepdim=True, unbiased=False) if group_size > 1 else torch.zeros_like(r[:, :1])
    return ((r - r.mean(dim=1, keepdim=True)) / (std + eps)).reshape(-1)


def pad_right(sequences: Sequence[Sequence[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids ``[B, L]``, attention mask) of right-padded sequences."""
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), int(pad), dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, :len(seq)] = torch.tensor(list(seq), dtype=torch.long)
        mask[row, :len(seq)] = 1
    return ids, mask


def token_logprobs(model: Any, ids: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
    """Log-prob of each token given the ones before it, ``[B, L - 1]`` (token ``t + 1`` at ``t``)."""
    logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1].float()
    return torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)


class GRPO(LoRAFinetuner):
    """Group relative policy optimisation (see the module docstring); arguments as
    :class:`LoRAFinetuner` plus the GRPO fields, defaults from :class:`~agile_llm.specs.GRPOSpec`.
    ``batch_size`` is prompts per step; ``max_length`` is the transcript limit (``max_model_len``)."""

    hyperparameter_names: ClassVar[tuple[str, ...]] = (
        "lr", "batch_size", "max_length", "max_grad_norm", "beta", "clip_coef", "group_size", "temperature",
        "max_new_tokens", "update_epochs")

    def __init__(self, model: Any, *, tokenizer: Any = None, lora_config: Mapping[str, Any] | None = None,
                 lr: float = _D["lr"], batch_size: int = _D["batch_size"], max_length: int = _D["max_length"],
                 max_grad_norm: float | None = _D["max_grad_norm"], beta: float = _D["beta"],
                 clip_coef: float = _D["clip_coef"], group_size: int = _D["group_size"],
                 temperature: float = _D["temperature"], max_new_tokens: int = _D["max_new_tokens"],
                 update_epochs: int = _D["update_epochs"], index: int = 0,
                 hp_config: HyperparameterConfig | None = None, device: str | torch.device = "cpu",
                 seed: int | None = None, base_dir: str | None = None) -> None:
        GRPOSpec.check_values({"lr": lr, "batch_size": batch_size, "max_length": max_length,
                               "max_grad_norm": max_grad_norm, "beta": beta, "clip_coef": clip_coef,
                               "group_size": group_size, "temperature": temperature,
                               "max_new_tokens": max_new_tokens, "update_epochs": update_epochs})
        super().__init__(model, tokenizer=tokenizer, lora_config=lora_config, lr=lr, batch_size=batch_size,
                         max_length=max_length, max_grad_norm=max_grad_norm, index=index, hp_config=hp_config,
                         device=device, seed=seed, base_dir=base_dir)
        self.beta = float(beta)
        self.clip_coef = float(clip_coef)
        self.group_size = int(group_size)
        self.temperature = float(temperature)
        self.max_new_tokens = int(max_new_tokens)
        self.update_epochs = int(update_epochs)

    # ------------------------------------------------------------------ generation
    @torch.no_grad()
    def generate(self, contexts: list[list[int]], max_new_tokens: int, greedy: bool = False) -> list[list[int]]:
        """Continue each token context (left-padded batch, position ids from the mask) by
        sampling at ``temperature`` (or greedily); each output stops after its first EOS."""
        model: Any = self.policy(training=False)
        tok = self.tokenizer
        pad = int(tok.pad_token_id if tok.pad_token_id is not None else 0)
        width = max(len(c) for c in contexts)
        ids = torch.full((len(contexts), width), pad, dtype=torch.long)
        mask = torch.zeros((len(contexts), width), dtype=torch.long)
        for row, ctx in enumerate(contexts):
            ids[row, width - len(ctx):] = torch.tensor(ctx, dtype=torch.long)
            mask[row, width - len(ctx):] = 1
        sampling: dict[str, Any] = ({"do_sample": False} if greedy or self.temperature <= 0 else
                                    {"do_sample": True, "temperature": self.temperature, "top_k": 0, "top_p": 1.0})
        out = model.generate(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                             max_new_tokens=max_new_tokens, pad_token_id=pad, eos_token_id=tok.eos_token_id,
                             **sampling)
        results = []
        for row in out[:, width:].tolist():
            if tok.eos_token_id is not None and tok.eos_token_id in row:
                row = row[:row.index(tok.eos_token_id) + 1]
            results.append([int(t) for t in row] or [int(tok.eos_token_id if tok.eos_token_id is not None else pad)])
        return results

    def collect(self, env_factory: Callable[[], RolloutHarness], seeds: Sequence[int]) -> list[Episode]:
        """``group_size`` sampled episodes for each prompt seed, group after group."""
        harnesses = [env_factory() for _ in range(len(seeds) * self.group_size)]
        group_seeds = [int(s) for s in seeds for _ in range(self.group_size)]
        return run_episodes(harnesses, group_seeds, self.generate, self.max_new_tokens)

    def sample_seeds(self) -> list[int]:
        """``batch_size`` prompt seeds drawn with the member's generator."""
        return [int(s) for s in self.rng.integers(0, 2**31 - 1, size=self.batch_size)]

    # ------------------------------------------------------------------ learning
    def _tensors(self, episodes: Sequence[Episode]) -> dict[str, torch.Tensor]:
        pad = int(self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0)
        ids, attention = pad_right([e.ids for e in episodes], pad)
        loss_mask, _ = pad_right([e.mask for e in episodes], 0)
        ids, attention = ids.to(self.device), attention.to(self.device)
        model: Any = self.policy(training=False)
        with torch.no_grad():
            old = token_logprobs(model, ids, attention)
            with self.base.reference_model(self.adapter_name) as reference:
                ref = token_logprobs(reference, ids, attention)
        return {"ids": ids, "attention": attention, "mask": loss_mask[:, 1:].float().to(self.device),
                "old": old, "ref": ref}

    def learn(self, batch: Any) -> dict[str, float]:
        """One GRPO update on `batch`, a list of episodes (``group_size`` per prompt, group after
        group): the ``P = 1`` case of :meth:`learn_members`."""
        return type(self).learn_members([self], [batch])[0]

    @classmethod
    def learn_members(cls, members: Sequence[Self], batches: Sequence[Any]) -> list[dict[str, float]]:
        """``update_epochs`` GRPO updates per member on its episodes (``group_size`` per prompt,
        group after group)."""
        losses = []
        for agent, episodes in zip(members, batches, strict=True):
            rewards = [e.reward for e in episodes]
            adv = group_advantages(rewards, agent.group_size).to(agent.device)
            t = agent._tensors(episodes)
            mask = t["mask"]
            count = mask.sum(-1).clamp(min=1)
            stats: dict[str, float] = {}
            for _ in range(agent.update_epochs):
                logp = token_logprobs(agent.policy(training=True), t["ids"], t["attention"])
                ratio = torch.exp(logp - t["old"])
                a = adv.unsqueeze(-1)
                surrogate = torch.min(ratio * a, ratio.clamp(1 - agent.clip_coef, 1 + agent.clip_coef) * a)
                diff = t["ref"] - logp
                kl = torch.exp(diff) - diff - 1
                per_token = -surrogate + agent.beta * kl
                loss = ((per_token * mask).sum(-1) / count).mean()
                agent._step(loss)
                stats = {"loss": float(loss.detach()), "kl": float(((kl * mask).sum(-1) / count).mean().detach()),
                         "reward": float(np.mean(rewards))}
            losses.append(stats)
        return losses

    # ------------------------------------------------------------------ evaluation
    def evaluate_episodes(self, env_factory: Callable[[], RolloutHarness],
                          episodes: int | None = None) -> list[Episode]:
        """Greedy episodes on the held-out prompts (every one the environment has, else `episodes`)."""
        probe = env_factory()
        count = int(episodes if episodes is not None else getattr(probe.env, "num_test", 1))
        harnesses = [probe] + [env_factory() for _ in range(count - 1)]
        return run_episodes(harnesses, list(range(count)), lambda c, n: self.generate(c, n, greedy=True),
                            self.max_new_tokens, options={"split": "test"})

    def evaluate_reward(self, env_factory: Callable[[], RolloutHarness], episodes: int | None = None) -> float:
        """Mean return of :meth:`evaluate_episodes`."""
        return float(np.mean([e.reward for e in self.evaluate_episodes(env_factory, episodes)]))

    def test(self, env: Any, *args: Any, **kwargs: Any) -> float:
        """Fitness: :meth:`evaluate_reward` with `env` a harness factory (appended to ``fitness``)."""
        fitness = self.evaluate_reward(env, kwargs.get("episodes"))
        self.fitness.append(fitness)
        return fitness
