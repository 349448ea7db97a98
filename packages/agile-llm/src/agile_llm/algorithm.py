"""`LoRAFinetuner`: what SFT and DPO share. A member is one LoRA adapter on a shared base.

Cloning adds a new adapter to the same base and copies the parent's adapter weights, optimizer
moments, hyperparameters and counters into it (never a deep copy of the model). Checkpoints are
core's agent checkpoints: the adapter (the ``adapter`` network), the optimizer state,
hyperparameters and counters as safetensors + JSON, with the base model referred to by path (or
``memory:<hash>``) and content hash; loading onto a base with another hash is refused.

Why the learning step loops over members: peft can run different adapters for different rows
of one batch (``adapter_names=``) only in inference; in training mode it raises "Cannot pass
`adapter_names` when the model is in training mode" (peft 0.21). So ``learn_members`` is the one
definition of the update for a group of members, iterating over them; ``learn`` is its ``P = 1``
case.
"""

from __future__ import annotations

import contextlib
import copy
import weakref
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

import numpy as np
import torch
from torch import nn

from agile_core.algorithms.base import LLMAlgorithm
from agile_core.checkpoint import CheckpointError
from agile_core.distributed.data_parallel import average_gradients
from agile_core.hpo.hyperparameters import HyperparameterConfig
from agile_llm.models import AdapterView, SharedBase

__all__ = ["REFERENCES", "LoRAFinetuner", "sequence_logprobs"]

REFERENCES = ("base", "initial")
"""Kinds of reference policy (see :class:`LoRAFinetuner`'s ``reference``)."""


def sequence_logprobs(model: nn.Module, batch: Mapping[str, Any], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum of log-probs of the labelled tokens per sequence ``[B]``, labelled-token counts ``[B]``)."""
    ids = batch["input_ids"].to(device)
    labels = batch["labels"].to(device)
    logits = model(input_ids=ids, attention_mask=batch["attention_mask"].to(device)).logits[:, :-1].float()
    targets = labels[:, 1:]
    mask = targets != -100
    logp = torch.log_softmax(logits, dim=-1).gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return (logp * mask).sum(-1), mask.sum(-1)


class LoRAFinetuner(LLMAlgorithm):
    """Base of the dataset LLM algorithms: one LoRA adapter per member on a shared frozen base.

    Args:
        model: The base: a local model directory or HF-cache id, a ``memory:<hash>`` reference,
            a plain causal LM object (then `tokenizer` is required) or a :class:`SharedBase`.
            Members given the same path or object share one base.
        tokenizer: Tokenizer for a model object (a path loads its own).
        lora_config: LoRA settings (:class:`~agile_llm.specs.LoraConfigSpec` fields); used when
            this call creates the base.
        index, hp_config, device: As for every agile algorithm.
        seed: Seed of the member's generator (batch sampling).
        base_dir: Folder a relative model path is resolved against.

    Subclasses set `spec_class`, take the spec's hyperparameters as constructor keywords, adopt
    them (:meth:`adopt_hyperparameters`) and then call this constructor; it and the learning step
    read ``lr``, ``batch_size``, ``max_length``, ``max_grad_norm`` and ``reference`` from the
    member. ``reference`` is the reference policy of the KL or DPO term: ``"base"``, the shared
    base with adapters disabled; ``"initial"``, a frozen copy of this member's adapter as it was
    when the member was created or loaded, kept as a separate non-trainable adapter on the same
    shared base (cloned with the member, saved in its checkpoints; a checkpoint saved without one
    loads with the reference set to a copy of the loaded adapter).
    """

    # hyperparameters, set from the subclass's spec (declared here for the type checker)
    lr: float
    batch_size: int
    max_length: int
    max_grad_norm: float | None
    reference: str = "base"
    """One of :data:`REFERENCES`; ``"base"`` where the spec has no ``reference`` (SFT)."""

    optimizer: torch.optim.Optimizer
    """The member's Adam optimizer over its adapter (created by ``register_optimizer``)."""

    def __init__(self, model: Any, *, tokenizer: Any = None, lora_config: Mapping[str, Any] | None = None,
                 index: int = 0, hp_config: HyperparameterConfig | None = None, device: str | torch.device = "cpu",
                 seed: int | None = None, base_dir: str | None = None) -> None:
        super().__init__(index=index, hp_config=hp_config, device=device)
        self.base = SharedBase.of(model, tokenizer, lora_config, base_dir=base_dir, device=device)
        self.rng = np.random.default_rng(seed)
        with _seeded_torch(seed):  # peft draws the new adapter's weights from torch's global generator
            self.adapter_name = self.base.new_adapter()
        weakref.finalize(self, self.base.release, self.adapter_name)
        self.adapter = AdapterView(self.base.adapter_parameters(self.adapter_name))
        self.reference_adapter_name: str | None = None
        """Name of the frozen reference adapter (``reference="initial"``), else None."""
        self.reference_logprob_cache: dict[tuple[tuple[int, ...], int], float] = {}
        """Summed log-probs under this member's own frozen reference (``reference="initial"``)."""
        if self.reference == "initial":
            self.reference_adapter_name = self.base.new_adapter()
            weakref.finalize(self, self.base.release, self.reference_adapter_name)
            self.reset_reference()
        self.base.activate(self.adapter_name)
        self.register_network_group("adapter")
        self.register_optimizer("optimizer", ["adapter"], "lr")
        # Checkpoints refer to the base, never embed it: a reference string and its hash.
        self.__dict__["_init_args"].update(model=self.base.reference, tokenizer=None, lora_config=self.base.lora.model_dump())

    # ------------------------------------------------------------------ model access
    @property
    def tokenizer(self) -> Any:
        """The shared tokenizer."""
        return self.base.tokenizer

    def policy(self, training: bool) -> nn.Module:
        """The shared model with this member's adapter active, in train or eval mode."""
        model = self.base.activate(self.adapter_name)
        model.train(training)
        return model

    def _step(self, loss: torch.Tensor) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        average_gradients(param.grad for param in self.adapter.parameters())
        if self.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(list(self.adapter.parameters()), self.max_grad_norm)
        self.optimizer.step()
        self.learn_counter += 1

    # ------------------------------------------------------------------ reference policy
    def _reference_parameters(self) -> dict[str, nn.Parameter]:
        assert self.reference_adapter_name is not None
        return self.base.adapter_parameters(self.reference_adapter_name)

    def reference_tensors(self) -> dict[str, torch.Tensor]:
        """Copies of the frozen reference adapter's tensors (empty with ``reference="base"``)."""
        if self.reference_adapter_name is None:
            return {}
        return {key: param.detach().clone() for key, param in self._reference_parameters().items()}

    def reset_reference(self, tensors: Mapping[str, torch.Tensor] | None = None) -> None:
        """Set the frozen reference adapter to `tensors` (None: a copy of the member's adapter
        now); nothing with ``reference="base"``."""
        if self.reference_adapter_name is None:
            return
        source = dict(tensors) if tensors is not None else dict(self.adapter.state_dict())
        target = self._reference_parameters()
        if set(source) != set(target):
            raise CheckpointError("reference_adapter", "the saved reference adapter does not match this "
                                  "member's LoRA shapes")
        with torch.no_grad():
            for key, param in target.items():
                param.copy_(source[key].to(param.device, param.dtype))
                param.requires_grad_(False)
        self.reference_logprob_cache.clear()

    @contextlib.contextmanager
    def reference_policy(self) -> Iterator[nn.Module]:
        """The reference policy for this block: the shared base with adapters disabled
        (``reference="base"``) or the member's frozen reference adapter (``"initial"``). The
        caller sets train/eval mode and disables gradients."""
        if self.reference_adapter_name is None:
            with self.base.reference_model(self.adapter_name) as model:
                yield model
            return
        try:
            yield self.base.activate(self.reference_adapter_name)
        finally:
            self.base.activate(self.adapter_name)
            for param in self._reference_parameters().values():
                param.requires_grad_(False)

    # ------------------------------------------------------------------ agent API
    def learn(self, batch: Mapping[str, Any]) -> dict[str, float]:
        """One update on `batch`: the ``P = 1`` case of :meth:`learn_members`."""
        return type(self).learn_members([self], [batch])[0]

    @classmethod
    def learn_members(cls, members: Sequence[Self], batches: Sequence[Mapping[str, Any]]) -> list[dict[str, float]]:
        """The learning step for a group of members, each on its own batch (see the module
        docstring for why it iterates); each member's losses."""
        raise NotImplementedError

    @torch.no_grad()
    def get_action(self, obs: Any, *args: Any, max_new_tokens: int = 32, **kwargs: Any) -> list[str]:
        """Greedy completions (decoded text, without the prompt) of `obs`, a list of raw prompt
        strings (already templated)."""
        return generate_greedy(self, [encode_for_generation(self.tokenizer, p) for p in obs], max_new_tokens)

    # ------------------------------------------------------------------ cloning
    def clone(self, index: int | None = None, wrap: bool = True) -> Self:
        """A new member on the same base: own adapter (a copy of this one's weights), own
        optimizer moments, same hyperparameters and counters; a new `index` makes this agent its
        parent and gives its generator its own stream."""
        from agile_core.algorithms.persistence import agent_state, restore_agent

        args = dict(self.__dict__["_init_args"])
        args.update(model=self.base, index=self.index, hp_config=copy.deepcopy(self.hp_config), device=self.device)
        twin = type(self)(**args)
        meta, tensors = agent_state(self)
        restore_agent(twin, meta, _cloned(tensors))
        if index is not None and index != self.index:
            twin.index = index
            twin.lineage = self.lineage.child(index, generation=self.lineage.generation_born)
            twin.rng = np.random.default_rng(int(self.rng.integers(2**63)))
        return twin

    # ------------------------------------------------------------------ checkpoints
    def extra_state(self) -> dict[str, Any]:
        """The base model's reference and content hash (checked on load)."""
        return {"base_model": self.base.reference, "base_model_hash": self.base.model_hash}

    def extra_tensors(self) -> dict[str, Any]:
        """The frozen reference adapter (``reference="initial"``), saved beside the adapter."""
        return {"reference_adapter": self.reference_tensors()} if self.reference_adapter_name else {}

    def load_extra_state(self, state: dict[str, Any], tensors: dict[str, Any]) -> None:
        """Refuse state saved for another base model; restore the reference adapter (a copy of
        the loaded adapter when the checkpoint has none)."""
        check_base(state, self.base)
        self._restore_reference(tensors)

    def _restore_reference(self, tensors: Mapping[str, Any]) -> None:
        saved = tensors.get("reference_adapter")
        self.reset_reference(saved if saved else None)

    def load_checkpoint(self, path: str | Path) -> None:
        """Resume from an agent checkpoint (refused when it was saved on another base model)."""
        self._check_saved_base(path)
        super().load_checkpoint(path)

    def load_weights(self, path: str | Path) -> None:
        """Take a saved adapter only (refused when it was saved on another base model); the
        reference adapter (``reference="initial"``) becomes the saved one, else the loaded adapter."""
        from agile_core.algorithms.persistence import read_agent, restore_agent

        meta, tensors = read_agent(path, self.device)
        check_base(meta.get("extra") or {}, self.base)
        restore_agent(self, meta, tensors, weights_only=True)
        self._restore_reference(tensors.get("extra") or {})

    def _check_saved_base(self, path: str | Path) -> None:
        from agile_core.algorithms.persistence import read_agent

        meta, _ = read_agent(path, self.device)
        check_base(meta.get("extra") or {}, self.base)


def check_base(saved: Mapping[str, Any], base: SharedBase) -> None:
    """CheckpointError unless `saved` (an agent's extra state) names `base`'s content hash."""
    expected = saved.get("base_model_hash")
    if expected is not None and expected != base.model_hash:
        raise CheckpointError(
            str(saved.get("base_model")),
            f"saved on base model {saved.get('base_model')} (hash {str(expected)[:12]}...), but this agent's base "
            f"{base.reference} has hash {base.model_hash[:12]}...: resuming on a different base model is refused")


def _cloned(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return type(value)((k, _cloned(v)) for k, v in value.items())
    if isinstance(value, list | tuple):
        return type(value)(_cloned(v) for v in value)
    return value


def encode_for_generation(tokenizer: Any, prompt: str) -> list[int]:
    """Token ids of a prompt as the dataset encodes it (BOS first when there is one)."""
    bos = tokenizer.bos_token_id
    return ([bos] if bos is not None else []) + list(tokenizer.encode(prompt, add_special_tokens=False))


@torch.no_grad()
def generate_greedy(agent: LoRAFinetuner, prompts: Sequence[list[int]], max_new_tokens: int = 32) -> list[str]:
    """Greedy completions of tokenised prompts with `agent`'s adapter (left-padded batch),
    decoded up to the first EOS."""
    model: Any = agent.policy(training=False)
    tokenizer = agent.tokenizer
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), int(pad), dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt):] = torch.tensor(prompt)
        mask[row, width - len(prompt):] = 1
    out = model.generate(input_ids=ids.to(agent.device), attention_mask=mask.to(agent.device),
                         max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=int(pad),
                         eos_token_id=tokenizer.eos_token_id)
    return [tokenizer.decode(row[width:], skip_special_tokens=True) for row in out.tolist()]


@contextlib.contextmanager
def _seeded_torch(seed: int | None) -> Iterator[None]:
    """Torch's global CPU generator seeded with `seed` inside, and as it was again after (None:
    left as it is)."""
    if seed is None:
        yield
        return
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield
