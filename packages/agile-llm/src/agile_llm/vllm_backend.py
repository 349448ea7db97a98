"""Optional vLLM generation backend (``algorithm.use_vllm``; extra ``agile-llm[vllm]``, CUDA GPU).

One :class:`VLLMEngine` per :class:`~agile_llm.models.SharedBase` holds the frozen base once with
LoRA enabled. Before a member's rollouts only that member's adapter travels to the engine
(:meth:`VLLMEngine.sync`): its LoRA tensors and peft config are written to a fresh temporary
folder (``adapter_model.safetensors`` + ``adapter_config.json``) and named by a ``LoRARequest``
with a new integer id, so the engine never serves stale weights from its adapter cache. The
engine returns the log-prob of every sampled token; the trainer's own log-probs differ slightly
(other kernels, other precision), so the policy loss multiplies each generated token by the
truncated importance weight :func:`truncated_is_weights`.

Nothing here imports vllm at module import: ``import agile_llm`` never does, and asking for the
backend without vllm or without CUDA raises :class:`VLLMUnavailableError` naming
``algorithm.use_vllm`` and the extra to install.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import shutil
import tempfile
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from agile_llm.models import SharedBase
from agile_llm.rollout import Completion

__all__ = ["VLLMEngine", "VLLMUnavailableError", "adapter_payload", "engine_for", "require_vllm",
           "supported_lora_rank", "truncated_is_weights"]

_ENGINES: weakref.WeakKeyDictionary[SharedBase, VLLMEngine] = weakref.WeakKeyDictionary()
_VLLM_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)


class VLLMUnavailableError(RuntimeError):
    """``use_vllm`` was asked for where vLLM cannot run (not installed, no CUDA, in-memory base)."""


def require_vllm() -> None:
    """VLLMUnavailableError unless vllm is importable and a CUDA GPU is visible."""
    if importlib.util.find_spec("vllm") is None:
        raise VLLMUnavailableError(
            "algorithm.use_vllm is true but vLLM is not installed: install the extra with "
            "`pip install 'agile-llm[vllm]'` (Linux, CUDA GPU), or set algorithm.use_vllm: false to generate "
            "with Hugging Face generate")
    if not torch.cuda.is_available():
        raise VLLMUnavailableError(
            "algorithm.use_vllm is true but no CUDA GPU is visible: the vLLM backend (extra agile-llm[vllm]) "
            "needs one; set algorithm.use_vllm: false to generate with Hugging Face generate")


def truncated_is_weights(trainer_logp: torch.Tensor, sampler_logp: torch.Tensor, cap: float) -> torch.Tensor:
    """Per-token ``min(exp(trainer_logp - sampler_logp), cap)``, without gradient: the weight
    that corrects a loss on tokens sampled by the engine (``sampler_logp``) towards the trainer's
    policy at sampling time (``trainer_logp``), truncated at `cap` to bound its variance."""
    if cap <= 0:
        raise ValueError(f"importance_sampling_cap must be positive, got {cap}")
    return torch.exp(trainer_logp.detach() - sampler_logp.detach()).clamp(max=float(cap))


def supported_lora_rank(rank: int) -> int:
    """The smallest adapter rank vLLM's engine accepts that holds `rank`."""
    for allowed in _VLLM_RANKS:
        if rank <= allowed:
            return allowed
    raise VLLMUnavailableError(f"LoRA rank {rank} exceeds vLLM's largest ({_VLLM_RANKS[-1]})")


def adapter_payload(base: SharedBase, adapter_name: str) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(peft adapter config as JSON data, LoRA tensors) of one member's adapter: exactly what a
    sync sends (keys without the adapter name, as peft saves them; CPU copies)."""
    from peft import get_peft_model_state_dict

    model = base.peft_model
    tensors = get_peft_model_state_dict(model, adapter_name=adapter_name)
    config = model.peft_config[adapter_name].to_dict()
    config = {key: (sorted(value) if isinstance(value, set) else value) for key, value in config.items()}
    config["base_model_name_or_path"] = base.reference
    return (json.loads(json.dumps(config, default=str)),
            {key: value.detach().to("cpu").contiguous() for key, value in tensors.items()})


def write_adapter(directory: Path, config: Mapping[str, Any], tensors: Mapping[str, torch.Tensor]) -> None:
    """Write an adapter folder vLLM (and peft) load: ``adapter_config.json`` and
    ``adapter_model.safetensors``."""
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    save_file(dict(tensors), str(directory / "adapter_model.safetensors"))
    (directory / "adapter_config.json").write_text(json.dumps(dict(config), indent=1), encoding="utf-8")


def _vllm_classes() -> tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]]:
    require_vllm()
    from vllm import LLM, SamplingParams
    from vllm.lora.request import LoRARequest

    return LLM, SamplingParams, LoRARequest


class VLLMEngine:
    """A vLLM engine on a shared base with LoRA enabled (see the module docstring).

    Args:
        base: The shared base; it must have been loaded from a local directory or a cached model
            id (vLLM loads the base itself).
        config: :class:`~agile_llm.specs.VLLMConfigSpec` fields.
        max_model_len: Context length when ``config.max_model_len`` is null.
        llm_factory, sampling_params, lora_request: vLLM's ``LLM``, ``SamplingParams`` and
            ``LoRARequest`` (imported from vllm when None; tests pass fakes).
    """

    def __init__(self, base: SharedBase, config: Mapping[str, Any], *, max_model_len: int,
                 llm_factory: Callable[..., Any] | None = None, sampling_params: Callable[..., Any] | None = None,
                 lora_request: Callable[..., Any] | None = None) -> None:
        from agile_llm.specs import VLLMConfigSpec

        if base.path is None:
            raise VLLMUnavailableError(
                "algorithm.use_vllm needs a base model vLLM can load itself: give "
                "network.pretrained_model_name_or_path as a local directory (save in-memory models with "
                "save_pretrained) rather than a model object")
        if llm_factory is None or sampling_params is None or lora_request is None:
            real = _vllm_classes()
            llm_factory, sampling_params, lora_request = (llm_factory or real[0], sampling_params or real[1],
                                                          lora_request or real[2])
        self.config = VLLMConfigSpec.model_validate(dict(config))
        self.base = base
        self.sampling_params = sampling_params
        self.lora_request = lora_request
        self.workdir = Path(tempfile.mkdtemp(prefix="agile_vllm_"))
        weakref.finalize(self, shutil.rmtree, str(self.workdir), True)
        self._ids = itertools.count(1)
        self._synced: dict[str, Path] = {}
        c = self.config
        self.engine_kwargs: dict[str, Any] = {
            "model": base.path, "tokenizer": base.path, "enable_lora": True,
            "max_lora_rank": c.max_lora_rank or supported_lora_rank(base.lora.lora_r), "max_loras": c.max_loras,
            "gpu_memory_utilization": c.gpu_memory_utilization, "max_num_seqs": c.max_num_seqs,
            "tensor_parallel_size": c.tensor_parallel_size, "max_model_len": c.max_model_len or int(max_model_len),
            "dtype": str(next(base.base_model.parameters()).dtype).removeprefix("torch."),
            "enforce_eager": c.enforce_eager}
        if c.seed is not None:
            self.engine_kwargs["seed"] = c.seed
        self.llm = llm_factory(**self.engine_kwargs)

    def sync(self, adapter_name: str) -> Any:
        """Send adapter `adapter_name`'s current weights to the engine: a LoRARequest on a fresh
        folder with a new integer id (the member's previous folder is deleted)."""
        lora_id = next(self._ids)
        directory = self.workdir / f"{adapter_name}-{lora_id}"
        config, tensors = adapter_payload(self.base, adapter_name)
        write_adapter(directory, config, tensors)
        previous = self._synced.pop(adapter_name, None)
        if previous is not None:
            shutil.rmtree(previous, ignore_errors=True)
        self._synced[adapter_name] = directory
        return self.lora_request(f"{adapter_name}-{lora_id}", lora_id, str(directory))

    def generate(self, request: Any, contexts: Sequence[Sequence[int]], max_new_tokens: int, temperature: float,
                 eos_token_id: int | None) -> list[Completion]:
        """Continue each token context with the adapter of `request` (``temperature`` 0: greedy);
        the generated ids (up to and including EOS) and each one's log-prob under the engine
        (of the untempered distribution: vLLM's default ``raw_logprobs``, the distribution the
        trainer's log-probs are computed from)."""
        params = self.sampling_params(n=1, temperature=float(temperature), top_p=1.0, max_tokens=int(max_new_tokens),
                                      logprobs=0, stop_token_ids=[] if eos_token_id is None else [int(eos_token_id)])
        prompts = [{"prompt_token_ids": [int(t) for t in ctx]} for ctx in contexts]
        outputs = self.llm.generate(prompts, params, lora_request=request, use_tqdm=False)
        results = []
        for output in outputs:
            sample = output.outputs[0]
            ids = [int(t) for t in sample.token_ids]
            if eos_token_id is not None and eos_token_id in ids:
                ids = ids[:ids.index(eos_token_id) + 1]
            logprobs = [_sampled_logprob(sample.logprobs[i], token) for i, token in enumerate(ids)]
            results.append(Completion(ids, logprobs))
        return results


def _sampled_logprob(entry: Any, token: int) -> float:
    """The log-prob of `token` in one position's entry of vLLM's ``logprobs`` (a mapping from
    token id to a ``Logprob`` with ``.logprob``, or to a float)."""
    value = entry[token]
    return float(getattr(value, "logprob", value))


def engine_for(base: SharedBase, config: Mapping[str, Any], max_model_len: int, **factories: Any) -> VLLMEngine:
    """The vLLM engine of `base` (created on first use; one per shared base, so the whole
    population uses one engine)."""
    engine = _ENGINES.get(base)
    if engine is None:
        engine = VLLMEngine(base, config, max_model_len=max_model_len, **factories)
        _ENGINES[base] = engine
    return engine
