"""Data-parallel training over processes: Hugging Face Accelerate (torch.distributed) underneath.

Launched as ``accelerate launch --num_processes N -m agile.train MANIFEST`` (or given an
``accelerator`` in Python), every process holds the same population and steps its own
environments, seeded per process:

* each learning step averages every member's gradient over the processes (one all-reduce of the
  flat gradient buffer, before clipping), so a member's networks stay equal on every process and
  learn as one agent would from the processes' batches together;
* evaluation fitness is the mean over the processes;
* the main process selects and mutates, then sends the new population to the others (agent
  checkpoint bytes, :mod:`agile_core.distributed.agent_bytes`);
* only the main process logs, shows progress and writes checkpoints and the elite.

The learning steps find the active group through :func:`average_gradients`, a no-op when no
group is active, so algorithms need nothing of their own; samplers that draw data with a member's
own generator (the LLM datasets and prompts) keep their process's part through :func:`data_share`.
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["ACCELERATOR_ATTRIBUTES", "DataParallel", "average_gradients", "check_accelerator", "close_process_group",
           "current", "data_share"]

ACCELERATOR_ATTRIBUTES = ("num_processes", "process_index", "is_main_process", "device")
"""What the loops use of an ``accelerate.Accelerator``."""

_ACTIVE: list[DataParallel] = []


def check_accelerator(accelerator: Any, owner: str = "accelerator") -> None:
    """A ValueError (naming `owner`) unless `accelerator` is None or has what the loops use of an
    ``accelerate.Accelerator``."""
    missing = [name for name in ACCELERATOR_ATTRIBUTES if not hasattr(accelerator, name)]
    if accelerator is not None and missing:
        raise ValueError(f"{owner}: accelerator must be an accelerate.Accelerator (missing {', '.join(missing)}), "
                         f"got {type(accelerator).__name__}")


class DataParallel:
    """The processes an Accelerate ``Accelerator`` (or anything with its ``num_processes``,
    ``process_index``, ``is_main_process`` and ``device``) trains over."""

    def __init__(self, accelerator: Any) -> None:
        check_accelerator(accelerator)
        self.world_size = int(accelerator.num_processes)
        self.rank = int(accelerator.process_index)
        self.is_main = bool(accelerator.is_main_process)
        self.device = str(accelerator.device)
        self.accelerator = accelerator
        if self.world_size > 1:
            import torch.distributed as dist

            if not dist.is_available() or not dist.is_initialized():
                raise ValueError(f"accelerator reports {self.world_size} processes, but torch.distributed is not "
                                 "initialised: create the Accelerator inside `accelerate launch`")

    @classmethod
    def of(cls, accelerator: Any) -> DataParallel | None:
        """The group of `accelerator`; None for no accelerator."""
        return None if accelerator is None else cls(accelerator)

    @property
    def distributed(self) -> bool:
        """More than one process."""
        return self.world_size > 1

    @contextlib.contextmanager
    def active(self) -> Iterator[DataParallel]:
        """Learning steps inside this block average their gradients over the processes."""
        _ACTIVE.append(self)
        try:
            yield self
        finally:
            _ACTIVE.remove(self)

    def average_(self, tensors: Iterable[torch.Tensor | None]) -> None:
        """Replace each tensor (in place) by its mean over the processes."""
        if not self.distributed:
            return
        import torch.distributed as dist

        for tensor in tensors:
            if tensor is not None:
                dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
                tensor.div_(self.world_size)

    def mean(self, values: Sequence[float]) -> list[float]:
        """`values` averaged element-wise over the processes (every process passes as many)."""
        if not self.distributed:
            return [float(v) for v in values]
        import torch

        tensor = torch.tensor([float(v) for v in values], dtype=torch.float64, device=self._collective_device)
        self.average_([tensor])
        return [float(v) for v in tensor.cpu()]

    def broadcast(self, payload: Any) -> Any:
        """The main process's `payload` (bytes, numbers, lists of them), on every process."""
        if not self.distributed:
            return payload
        import torch.distributed as dist

        box = [payload if self.is_main else None]
        dist.broadcast_object_list(box, src=0, device=self._collective_device)
        return box[0]

    @property
    def _collective_device(self) -> Any:
        import torch
        import torch.distributed as dist

        return torch.device(self.device) if dist.get_backend() == "nccl" else torch.device("cpu")

    def seed_offset(self) -> int:
        """Added to the environment seeds of this process, so processes see different episodes."""
        return 1_000_003 * self.rank


def current() -> DataParallel | None:
    """The innermost active group, if any."""
    return _ACTIVE[-1] if _ACTIVE else None


def data_share() -> tuple[int, int]:
    """(processes, this process's rank) of the active group; ``(1, 0)`` without one. Samplers
    draw ``processes`` times their batch with a generator every process shares and keep their
    rank's part, so the processes learn from disjoint data and their generators stay equal."""
    group = current()
    return (1, 0) if group is None else (group.world_size, group.rank)


def average_gradients(tensors: Iterable[torch.Tensor | None]) -> None:
    """Average these gradients over the active group's processes (nothing without one)."""
    group = current()
    if group is not None:
        group.average_(tensors)


def close_process_group(accelerator: Any) -> None:
    """End `accelerator`'s training (its trackers, then the torch.distributed process group) so
    that the group's backend is freed and its threads stop now, not while the interpreter tears
    down: a gloo group still alive then can abort its process ("terminate called without an active
    exception") after all the work is done. Call it once per process when training is over;
    nothing happens without an accelerator."""
    if accelerator is None:
        return
    accelerator.end_training()
    _forget_destroyed_groups()


def _forget_destroyed_groups() -> None:
    """Reset to None every default argument of a ``torch.distributed`` function that holds a
    process group once no group is up.

    ``torch.distributed.nn.functional`` takes ``group.WORLD`` as a default argument: imported while
    a group is up (importing transformers' models does that), its functions hold that group, and
    ``destroy_process_group`` cannot free it. None is what those defaults mean (the default group).
    """
    import torch.distributed as dist

    if dist.is_initialized():
        return
    for name, module in list(sys.modules.items()):
        if not name.startswith("torch.distributed") or module is None:
            continue
        for value in list(vars(module).values()):
            # type(), not isinstance(): a deprecated object there (reduce_op) warns on __class__
            if type(value) is types.FunctionType and value.__defaults__:
                defaults = value.__defaults__
                if any(isinstance(default, dist.ProcessGroup) for default in defaults):
                    value.__defaults__ = tuple(None if isinstance(d, dist.ProcessGroup) else d for d in defaults)
