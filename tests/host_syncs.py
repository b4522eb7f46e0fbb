"""Count the operations that would make the host wait for an accelerator, on the CPU.

On a GPU, reading a tensor's value on the host (`float`, `.item()`, `bool`,
`.tolist()`), or an op whose output shape depends on the data (`nonzero`,
boolean indexing), blocks until every queued kernel has run. The CPU has no
queue, so these tests count such calls instead, on "device" tensors only: the
seeds a test marks (a trainer's host-to-device copies, model parameters) and
whatever torch computes from them. Host-side bookkeeping on the CPU
micro-batch is not a sync and is not counted.
"""

from __future__ import annotations

import weakref
from typing import Any, Iterable

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

__all__ = ["SyncCounter"]

_READS = {"__float__", "__int__", "__bool__", "__index__", "item", "tolist", "numpy", "cpu", "nonzero",
          "masked_select", "unique", "argwhere"}


def _reads_on_host(func: Any, args: tuple, kwargs: dict) -> bool:
    name = getattr(func, "__name__", "")
    if name in _READS:
        return True
    if name == "where" and len(args) + len(kwargs) == 1:  # torch.where(cond): data-dependent shape
        return True
    if name == "__getitem__":
        return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in tree_leaves(args[1:]))
    return False


class SyncCounter(TorchFunctionMode):
    """A torch-function mode: `count` host reads of marked tensors (and of all they
    produce), `where` the names of the ops read. Reads while `paused` is set (e.g.
    inside a model's own forward) are not counted."""

    def __init__(self, seeds: Iterable[torch.Tensor] = ()) -> None:
        super().__init__()
        self._device: dict[int, weakref.ref] = {}  # by id: a tensor's == is elementwise
        for t in seeds:
            self.mark(t)
        self.count = 0
        self.where: list[str] = []
        self.paused = 0

    def mark(self, t: torch.Tensor) -> torch.Tensor:
        self._device[id(t)] = weakref.ref(t)
        return t

    def marked(self, t: torch.Tensor) -> bool:
        ref = self._device.get(id(t))
        return ref is not None and ref() is t

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        inputs = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        on_device = any(self.marked(t) for t in inputs)
        if on_device and not self.paused and _reads_on_host(func, args, kwargs):
            self.count += 1
            self.where.append(getattr(func, "__name__", str(func)))
        out = func(*args, **kwargs)
        if on_device:
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor):
                    self.mark(t)
            name = getattr(func, "__name__", "")
            if (name.endswith("_") or name == "__setitem__") and args and isinstance(args[0], torch.Tensor):
                self.mark(args[0])  # written in place from device data
        return out
