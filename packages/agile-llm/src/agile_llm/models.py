"""One frozen base model shared by a whole population; each member is a peft LoRA adapter on it.

:class:`SharedBase` owns the base causal LM wrapped as a peft multi-adapter model. Members ask it
for a fresh adapter (:meth:`SharedBase.new_adapter`), activate theirs before each forward
(:meth:`SharedBase.activate`), and the adapter is deleted when the member is garbage collected.
The default reference policy (KL, DPO) is the base with adapters disabled
(:meth:`SharedBase.reference_model`); a member's frozen ``initial`` reference is one more adapter.

Bases are cached per process (by resolved local path, or by content hash for a model built in
memory), so members rebuilt from a checkpoint attach to the base already loaded instead of
loading a second copy.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import weakref
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

__all__ = ["AdapterView", "BaseModelError", "SharedBase", "content_hash", "load_causal_lm"]

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_CACHE: weakref.WeakValueDictionary[str, SharedBase] = weakref.WeakValueDictionary()
_BY_MODEL: weakref.WeakKeyDictionary[nn.Module, SharedBase] = weakref.WeakKeyDictionary()
_COUNTER = itertools.count()
MEMORY_PREFIX = "memory:"
"""Prefix of the reference to a base model built in memory (followed by its content hash)."""


class BaseModelError(ValueError):
    """A base model that cannot be used (adapters already attached, not found locally, changed)."""


def content_hash(model: nn.Module) -> str:
    """SHA-256 over the names, dtypes, shapes and bytes of `model`'s state dict (sorted by name):
    the identity checkpoints record for the base model."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        data = tensor.detach().contiguous().cpu()
        digest.update(f"{name}|{data.dtype}|{tuple(data.shape)}|".encode())
        digest.update(data.view(torch.uint8).numpy().tobytes() if data.numel() else b"")
    return digest.hexdigest()


def _check_plain(model: nn.Module) -> None:
    """Refuse a model that already carries adapters (attached, or merged by peft)."""
    from peft import PeftModel
    from peft.tuners.tuners_utils import BaseTunerLayer

    if isinstance(model, PeftModel) or getattr(model, "_hf_peft_config_loaded", False):
        raise BaseModelError("the model already has peft adapters attached; pass the plain base model "
                             "(e.g. `peft_model.unload()` or load it fresh): agile adds one adapter per member")
    for name, module in model.named_modules():
        if isinstance(module, BaseTunerLayer):
            state = "merged into" if getattr(module, "merged", False) else "attached to"
            raise BaseModelError(f"adapters are {state} the model (module {name!r}); pass the plain base "
                                 "model: agile adds one adapter per member")


def load_causal_lm(name_or_path: str | Path, *, dtype: str = "float32", device: str | torch.device = "cpu",
                   base_dir: str | Path | None = None) -> tuple[nn.Module, Any, str]:
    """(model, tokenizer, resolved reference) from a local directory or the local HF cache only."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    text = str(name_or_path)
    candidate = Path(text).expanduser()
    if not candidate.is_absolute() and base_dir is not None and (Path(base_dir) / candidate).exists():
        candidate = Path(base_dir) / candidate
    reference = str(candidate.resolve()) if candidate.exists() else text
    try:
        with _quiet_loading():
            model = AutoModelForCausalLM.from_pretrained(reference, dtype=_DTYPES[dtype], local_files_only=True)
            tokenizer = AutoTokenizer.from_pretrained(reference, local_files_only=True)
    except OSError as error:
        raise BaseModelError(f"cannot load {text!r} locally (nothing is downloaded at run time): give a "
                             f"directory written by save_pretrained or a model already in the HF cache ({error})") \
            from error
    moved: Any = model
    return moved.to(device), tokenizer, reference


@contextlib.contextmanager
def _quiet_loading() -> Iterator[None]:
    """Without transformers' per-load progress bar (a local load takes a moment; agile has its
    own progress output), and in the Hub's offline mode: nothing is downloaded, so a name that is
    not cached fails at once instead of after half a minute of connection retries."""
    from huggingface_hub import constants
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    offline = constants.HF_HUB_OFFLINE
    hf_logging.disable_progress_bar()
    constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = offline
        if enabled:
            hf_logging.enable_progress_bar()


def _default_pad(tokenizer: Any) -> None:
    if tokenizer is not None and tokenizer.pad_token_id is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token


class SharedBase:
    """A frozen causal LM and its tokenizer, shared by every member; members are LoRA adapters.

    Args:
        model: The plain base model (no adapters).
        tokenizer: Its tokenizer (a pad token is set to EOS when it has none).
        lora_config: :class:`~agile_llm.specs.LoraConfigSpec` fields (a dict), the same for
            every member.
        reference: Local path of the model (checkpoints record it); None for a model built in
            memory, which is then referred to as ``memory:<hash>``.
    """

    def __init__(self, model: nn.Module, tokenizer: Any, lora_config: Mapping[str, Any] | None = None,
                 reference: str | None = None) -> None:
        _check_plain(model)
        from agile_llm.specs import LoraConfigSpec

        self.model_hash = content_hash(model)
        self.lora = LoraConfigSpec.model_validate(dict(lora_config or {}))
        for param in model.parameters():
            param.requires_grad_(False)
        self.base_model = model
        self.tokenizer = tokenizer
        _default_pad(tokenizer)
        self.path = reference
        self.peft_model: Any = None
        self._adapters: list[str] = []
        self._released: list[str] = []
        """Adapters whose members are gone, deleted at the next safe point (see :meth:`release`)."""
        self.reference_cache: dict[tuple[tuple[int, ...], int], float] = {}
        """Summed reference log-probs by (token ids, response start): the base is frozen."""
        _CACHE[self.reference] = self
        _BY_MODEL[model] = self

    # ------------------------------------------------------------------ construction
    @property
    def reference(self) -> str:
        """How checkpoints refer to this base: its local path, or ``memory:<hash>``."""
        return self.path if self.path is not None else MEMORY_PREFIX + self.model_hash

    @classmethod
    def get(cls, name_or_path: str | Path, lora_config: Mapping[str, Any] | None = None, *,
            tokenizer: Any = None, dtype: str = "float32", device: str | torch.device = "cpu",
            base_dir: str | Path | None = None) -> SharedBase:
        """The base loaded from `name_or_path` (once per process), or an in-memory base by its
        ``memory:<hash>`` reference."""
        text = str(name_or_path)
        if text.startswith(MEMORY_PREFIX):
            found = _CACHE.get(text)
            if found is None:
                raise BaseModelError(f"the base model {text} was built in memory and is not loaded in this "
                                     "process: save it with save_pretrained and refer to its directory")
            return found
        model, loaded_tokenizer, reference = load_causal_lm(text, dtype=dtype, device=device, base_dir=base_dir)
        found = _CACHE.get(reference)
        if found is not None:
            return found
        return cls(model, tokenizer if tokenizer is not None else loaded_tokenizer, lora_config, reference)

    @classmethod
    def lookup(cls, reference: str) -> SharedBase | None:
        """The base already loaded in this process under `reference`, if any."""
        return _CACHE.get(reference)

    @classmethod
    def of(cls, model: Any, tokenizer: Any = None, lora_config: Mapping[str, Any] | None = None, *,
           base_dir: str | Path | None = None, dtype: str = "float32",
           device: str | torch.device = "cpu") -> SharedBase:
        """The shared base for `model`: a SharedBase as is, a reference (path or ``memory:<hash>``)
        through :meth:`get`, a plain model object moved to `device` and wrapped once (the same
        object gives the same base, so members built from one model share it)."""
        if isinstance(model, SharedBase):
            return model
        if isinstance(model, str | Path):
            return cls.get(model, lora_config, tokenizer=tokenizer, dtype=dtype, device=device, base_dir=base_dir)
        if isinstance(model, nn.Module):
            found = _BY_MODEL.get(model)
            if found is not None:
                return found
            if tokenizer is None:
                raise BaseModelError("a model object needs its tokenizer (tokenizer=...)")
            return cls(model.to(device), tokenizer, lora_config)
        raise BaseModelError(f"expected a model path, a causal LM or a SharedBase, not {type(model).__name__}")

    # ------------------------------------------------------------------ adapters
    @property
    def adapters(self) -> list[str]:
        """The live adapters' names, oldest first."""
        self._delete_released()
        return list(self._adapters)

    def new_adapter(self) -> str:
        """Add a fresh LoRA adapter (B = 0: the member starts as the base model); its name."""
        from peft import LoraConfig, get_peft_model

        self._delete_released()
        name = f"member{next(_COUNTER)}"
        config = LoraConfig(r=self.lora.lora_r, lora_alpha=self.lora.lora_alpha,
                            target_modules=self.lora.target_modules, lora_dropout=self.lora.lora_dropout,
                            task_type=self.lora.task_type, bias="none")
        if self.peft_model is None:
            self.peft_model = get_peft_model(self.base_model, config, adapter_name=name)
        else:
            self.peft_model.add_adapter(name, config)
        self._adapters.append(name)
        if self.peft_model.active_adapter not in self._adapters:  # every earlier member is gone
            self.peft_model.set_adapter(name)
        return name

    def release(self, name: str) -> None:
        """Mark adapter `name` for deletion (its member is gone).

        Members call this from a finalizer, which the garbage collector may run in the middle of
        peft iterating over its own dictionaries; so this only records the name, and the adapter
        is deleted at the next call that touches adapters."""
        self._released.append(name)

    def _delete_released(self) -> None:
        while self._released:
            name = self._released.pop()
            if name not in self._adapters or self.peft_model is None:
                continue
            self._adapters.remove(name)
            with contextlib.suppress(Exception):  # peft refusing to delete the last adapter
                if self._adapters:
                    self.peft_model.set_adapter(self._adapters[0])
                self.peft_model.delete_adapter(name)

    def adapter_parameters(self, name: str) -> dict[str, nn.Parameter]:
        """Adapter `name`'s parameters by adapter-independent key (``/`` for ``.``)."""
        self._delete_released()
        marker = f".{name}."
        return {key.replace(marker, ".").replace(".", "/"): param
                for key, param in self.peft_model.named_parameters() if marker in key}

    def activate(self, name: str) -> nn.Module:
        """Make adapter `name` the active (and only trainable) one; returns the peft model."""
        self._delete_released()
        if self.peft_model.active_adapter != name:
            self.peft_model.set_adapter(name)
        return self.peft_model

    @contextlib.contextmanager
    def reference_model(self, name: str) -> Iterator[nn.Module]:
        """The base with every adapter disabled (DPO's reference policy), for this block; `name`
        (a live member's adapter) becomes the active one, as peft needs an active adapter."""
        model: Any = self.activate(name)
        with model.disable_adapter():
            yield model

    @property
    def device(self) -> torch.device:
        """Device of the base weights."""
        return next(self.base_model.parameters()).device


class AdapterView(nn.ParameterDict):
    """One member's adapter parameters as a module: its state dict is the member's adapter (keys
    independent of the adapter name) and loading one copies into the shared model in place."""

    def __init__(self, params: Mapping[str, nn.Parameter]) -> None:
        super().__init__()
        for key, param in params.items():
            self.register_parameter(key, param)

    def __deepcopy__(self, memo: dict[int, Any]) -> AdapterView:
        raise TypeError("an adapter view is tied to its shared base: clone the agent with agent.clone()")
