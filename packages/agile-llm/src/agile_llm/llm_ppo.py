"""LLMPPO: proximal policy optimisation of a LoRA actor with a LoRA critic, GAE over turns.

**Networks.** The actor is the member's LoRA adapter (``adapter``). The critic (``critic``) is a
*second* LoRA adapter of the member on the same frozen base plus a linear value head on the last
hidden state (initialised to zero, float32). Actor and critic have their own Adam optimizers
(``lr`` and ``critic_lr``); each update activates only its own adapter, so training the critic
never changes the actor and vice versa (``tests/llm/test_llmppo.py``). A population of P members
holds 2P adapters on one base.

**Turns.** An episode is a sequence of turns (one completion each, with the environment's reward
for it). The state a turn acts in is the transcript before its first generated token, so the
turn's value ``V_k`` is the value head on the hidden state of the last token before the turn's
completion (the end of the prompt or of the environment's feedback; reading it after the turn's
own tokens would make it depend on the action, a Q-value, and bias the baseline). GAE over turns::

    delta_k = r_k + gamma * V_{k+1} - V_k        (V_K = 0: the last turn ends the episode)
    A_k = sum_j (gamma * lambda)^j delta_{k+j},  R_k = A_k + V_k

Every generated token of turn k gets ``A_k`` (whitened over the step's turns when
``normalize_advantages``). Per epoch (``update_epochs``): the actor's loss is GRPO's, the mean
over each sequence's generated tokens of ``-w min(r A, clip(r, 1 - clip_coef, 1 + clip_coef) A) +
beta * KL`` averaged over sequences (``r``: ratio to the sampling-time policy; ``KL`` to the
base with adapters disabled; ``w``: the truncated importance weight with vLLM, else 1), then the
critic's loss ``0.5 * mean_k (V_k - R_k)^2``.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from agile_core.distributed.data_parallel import average_gradients
from agile_core.hpo.hyperparameters import HyperparameterConfig
from agile_llm.models import AdapterView
from agile_llm.rollout import Episode
from agile_llm.rollout_learner import (
    RolloutLearner,
    clipped_surrogate,
    sequence_mean,
    token_logprobs,
)
from agile_llm.specs import LLMPPOSpec

__all__ = ["LLMPPO", "Critic", "token_advantages", "turn_gae", "turn_positions"]

_D = LLMPPOSpec.defaults()


def turn_gae(rewards: Sequence[float], values: Sequence[float], gamma: float,
             gae_lambda: float) -> tuple[list[float], list[float]]:
    """(advantages, value targets) of one episode's turns by GAE; the value after the last turn
    is 0 (the episode is over)."""
    if len(rewards) != len(values):
        raise ValueError(f"{len(rewards)} turn rewards but {len(values)} turn values")
    advantages = [0.0] * len(rewards)
    running = 0.0
    for k in reversed(range(len(rewards))):
        next_value = values[k + 1] if k + 1 < len(values) else 0.0
        delta = rewards[k] + gamma * next_value - values[k]
        running = delta + gamma * gae_lambda * running
        advantages[k] = running
    return advantages, [a + v for a, v in zip(advantages, values, strict=True)]


def turn_positions(episode: Episode) -> list[int]:
    """Index in ``episode.ids`` of the token each turn's value is read at: the last token
    before the turn's first generated token."""
    return [start - 1 for start in episode.turn_starts]


def token_advantages(episodes: Sequence[Episode], turn_advantages: torch.Tensor, width: int) -> torch.Tensor:
    """``[B, width]`` in token-prediction layout (token ``t`` at ``t - 1``): each turn's advantage
    (flat, episode-then-turn order) on the positions of its tokens up to the next turn (feedback
    positions get it too; the loss mask removes them)."""
    out = torch.zeros((len(episodes), width), dtype=torch.float32, device=turn_advantages.device)
    turn = 0
    for row, episode in enumerate(episodes):
        ends = [*episode.turn_starts[1:], len(episode.ids)]
        for start, end in zip(episode.turn_starts, ends, strict=True):
            out[row, start - 1:end - 1] = turn_advantages[turn]
            turn += 1
    return out


class Critic(nn.Module):
    """A member's critic: its own LoRA adapter on the shared base (``adapter``, a view) and a
    linear value head (``head``) on the last hidden state."""

    def __init__(self, adapter: AdapterView, hidden_size: int) -> None:
        super().__init__()
        self.adapter = adapter
        self.head = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def __deepcopy__(self, memo: dict[int, Any]) -> Critic:
        raise TypeError("a critic is tied to its shared base: clone the agent with agent.clone()")


class LLMPPO(RolloutLearner):
    """PPO with a LoRA actor, a LoRA critic with value head and GAE over turns (see the module
    docstring).

    Args:
        model, tokenizer, lora_config, index, hp_config, device, seed, base_dir, reference: As for
            :class:`~agile_llm.algorithm.LoRAFinetuner`.
        lr, critic_lr, batch_size, max_length, max_grad_norm, beta, clip_coef, group_size, gamma,
        gae_lambda, update_epochs, normalize_advantages, temperature, max_new_tokens, use_vllm,
        vllm_config: See :class:`~agile_llm.specs.LLMPPOSpec`.
    """

    critic_optimizer: torch.optim.Optimizer
    """Adam over the critic adapter and value head (learning rate ``critic_lr``)."""

    spec_class = LLMPPOSpec

    # hyperparameters, set from LLMPPOSpec (declared here for the type checker; the shared ones on
    # RolloutLearner and LoRAFinetuner)
    critic_lr: float
    clip_coef: float
    gamma: float
    gae_lambda: float
    update_epochs: int
    normalize_advantages: bool

    def __init__(self, model: Any, *, tokenizer: Any = None, lora_config: Mapping[str, Any] | None = None,
                 lr: float = _D["lr"], critic_lr: float = _D["critic_lr"], batch_size: int = _D["batch_size"],
                 max_length: int = _D["max_length"], max_grad_norm: float | None = _D["max_grad_norm"],
                 beta: float = _D["beta"], clip_coef: float = _D["clip_coef"], group_size: int = _D["group_size"],
                 gamma: float = _D["gamma"], gae_lambda: float = _D["gae_lambda"],
                 update_epochs: int = _D["update_epochs"], normalize_advantages: bool = _D["normalize_advantages"],
                 temperature: float = _D["temperature"], max_new_tokens: int = _D["max_new_tokens"],
                 use_vllm: bool = _D["use_vllm"], vllm_config: Mapping[str, Any] | None = None, index: int = 0,
                 hp_config: HyperparameterConfig | None = None, device: str | torch.device = "cpu",
                 seed: int | None = None, base_dir: str | None = None,
                 reference: str = _D["reference"]) -> None:
        self.adopt_hyperparameters(locals())
        super().__init__(model, tokenizer=tokenizer, lora_config=lora_config, index=index, hp_config=hp_config,
                         device=device, seed=seed, base_dir=base_dir)
        self.critic_adapter_name = self.base.new_adapter()
        weakref.finalize(self, self.base.release, self.critic_adapter_name)
        self.base.activate(self.adapter_name)
        base_model: Any = self.base.base_model
        hidden = int(base_model.config.hidden_size)
        self.critic = Critic(AdapterView(self.base.adapter_parameters(self.critic_adapter_name)), hidden).to(self.device)
        self.register_network_group("critic")
        self.register_optimizer("critic_optimizer", ["critic"], "critic_lr")

    # ------------------------------------------------------------------ critic
    def turn_values(self, ids: torch.Tensor, attention: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor,
                    training: bool) -> torch.Tensor:
        """The critic's values at (`rows`, `positions`) of a padded batch (grad when `training`)."""
        model: Any = self.base.activate(self.critic_adapter_name)
        model.train(training)
        with torch.set_grad_enabled(training):
            hidden = model(input_ids=ids, attention_mask=attention, output_hidden_states=True).hidden_states[-1]
            return self.critic.head(hidden[rows, positions].float()).squeeze(-1)

    def _critic_step(self, loss: torch.Tensor) -> None:
        self.critic_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        average_gradients(param.grad for param in self.critic.parameters())
        if self.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(list(self.critic.parameters()), self.max_grad_norm)
        self.critic_optimizer.step()

    # ------------------------------------------------------------------ learning
    def advantages(self, episodes: Sequence[Episode], values: Sequence[float]) -> tuple[list[float], list[float]]:
        """(turn advantages, turn value targets) of `episodes` by :func:`turn_gae`, flat in
        episode-then-turn order (`values` in the same order)."""
        advantages: list[float] = []
        targets: list[float] = []
        at = 0
        for episode in episodes:
            count = len(episode.turn_starts)
            adv, ret = turn_gae(episode.rewards[:count], values[at:at + count], self.gamma, self.gae_lambda)
            advantages.extend(adv)
            targets.extend(ret)
            at += count
        return advantages, targets

    def update(self, episodes: list[Episode]) -> dict[str, float]:
        """``update_epochs`` actor and critic updates on `episodes`."""
        batch = self.rollout_batch(episodes)
        turns = [(row, pos) for row, e in enumerate(episodes) for pos in turn_positions(e)]
        rows = torch.tensor([r for r, _ in turns], dtype=torch.long, device=self.device)
        positions = torch.tensor([p for _, p in turns], dtype=torch.long, device=self.device)
        values = self.turn_values(batch.ids, batch.attention, rows, positions, training=False) if turns else \
            torch.zeros(0, device=self.device)
        adv_list, target_list = self.advantages(episodes, values.tolist())
        adv = torch.tensor(adv_list, dtype=torch.float32, device=self.device)
        if self.normalize_advantages and adv.numel() > 1:
            adv = (adv - adv.mean()) / (adv.std(unbiased=False) + 1e-8)
        targets = torch.tensor(target_list, dtype=torch.float32, device=self.device)
        token_adv = token_advantages(episodes, adv, batch.old.shape[1])
        stats: dict[str, float] = {}
        for _ in range(self.update_epochs):
            logp = token_logprobs(self.policy(training=True), batch.ids, batch.attention)
            penalty, kl_stats = self.kl_term(logp, batch)
            per_token = -batch.weights * clipped_surrogate(logp, batch.old, token_adv, self.clip_coef) + penalty
            actor_loss = sequence_mean(per_token, batch.mask)
            self._step(actor_loss)
            value_loss = torch.zeros(())
            if turns:
                new_values = self.turn_values(batch.ids, batch.attention, rows, positions, training=True)
                value_loss = 0.5 * ((new_values - targets) ** 2).mean()
                self._critic_step(value_loss)
            stats = {"loss": float(actor_loss.detach()), "value_loss": float(value_loss.detach()), **kl_stats,
                     "reward": float(np.mean(batch.rewards))}
        return stats
