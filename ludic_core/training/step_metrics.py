"""One number per optimizer step from the loss metrics of many micro-batches.

A loss reports metrics about its own micro-batch; a step spans several
micro-batches and, under torchrun, several ranks. Averaging everything by
token share turns a maximum into a blend (a `ratio_max` of 1.58 read 1.43 once
the same batch was split in three), so the metric's name says how it combines:

- `*_max` / `*_min`: max / min over the micro-batches that hold action tokens;
- `loss` and `<term>/loss`: summed (each part is already divided by the step's
  totals, so the sum is the step's loss);
- anything else: a mean weighted by the micro-batch's share of the step's
  scored action tokens (every rank's shares sum to its part of 1, so summing
  over ranks gives the step mean).

Only scored micro-batches report: the items a trainer skips as inert (weight 0
under a loss inert there, see `ludic_core.losses.Loss`) are in no ratio, clip or
other loss statistic, which therefore describe the non-skipped tokens.

Values stay 0-d tensors on the loss's device until `result`: reading one as a
float would make the host wait for the accelerator at every micro-batch.
`result` stacks them, all-reduces once per kind and reads them all at once.
"""

from __future__ import annotations

import math
from typing import Mapping

import torch

from ludic_core.training import distributed as dist_utils

__all__ = ["StepMetrics", "how_combined"]

Value = torch.Tensor | float


def how_combined(name: str) -> str:
    """'max', 'min', 'sum' or 'mean' for a metric name (see the module docstring)."""
    leaf = name.rsplit("/", 1)[-1]
    if leaf.endswith("_max"):
        return "max"
    if leaf.endswith("_min"):
        return "min"
    if leaf == "loss":
        return "sum"
    return "mean"


def _extreme(how: str, a: Value, b: Value) -> Value:
    """max or min of two values, each a float or a 0-d tensor, without a host sync."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return torch.maximum(a, b) if how == "max" else torch.minimum(a, b)
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        t, f = (a, b) if isinstance(a, torch.Tensor) else (b, a)
        assert isinstance(t, torch.Tensor)  # one of the two is (narrowed for the type checker)
        return t.clamp_min(f) if how == "max" else t.clamp_max(f)
    return max(a, b) if how == "max" else min(a, b)


class StepMetrics:
    """Accumulates micro-batch metrics; `result` reduces them over ranks."""

    def __init__(self) -> None:
        self._values: dict[str, Value] = {}

    def add(self, metrics: Mapping[str, Value], *, share: float, has_tokens: bool) -> None:
        """One micro-batch's metrics (0-d tensors or floats); `share` = its scored
        action tokens / the step's. A micro-batch without action tokens (a rank's
        padding) adds its keys but no values: its maxima and minima are
        placeholders, not data."""
        for name, value in metrics.items():
            how = how_combined(name)
            v = value.detach().to(torch.float64) if isinstance(value, torch.Tensor) else float(value)
            if how in ("max", "min"):
                cur = self._values.get(name, -math.inf if how == "max" else math.inf)
                self._values[name] = _extreme(how, cur, v) if has_tokens else cur
            elif how == "sum":
                self._values[name] = self._values.get(name, 0.0) + v
            else:
                self._values[name] = self._values.get(name, 0.0) + share * v

    def result(self, ctx: dist_utils.DistContext) -> dict[str, float]:
        """The step's metrics, reduced over ranks (every rank runs the same
        micro-batch count with the same loss, so the key sets agree): one
        all-reduce per kind, one read back to the host. A max or min that saw no
        action token anywhere reads 0.0, as the losses do."""
        names = sorted(self._values)
        device = next((v.device for v in self._values.values() if isinstance(v, torch.Tensor)), torch.device("cpu"))
        keys, parts = [], []
        for op in ("sum", "max", "min"):
            mine = [n for n in names if how_combined(n) == op or (op == "sum" and how_combined(n) == "mean")]
            if not mine:
                continue
            stacked = torch.stack([self._tensor(n, device) for n in mine])
            parts.append(dist_utils.all_reduce_tensor(stacked, op, ctx).to(device))
            keys += mine
        values = torch.cat(parts).tolist() if parts else []
        return {k: (v if math.isfinite(v) else 0.0) for k, v in zip(keys, values)}

    def _tensor(self, name: str, device: torch.device) -> torch.Tensor:
        """A value as a 0-d float64 tensor on `device` (a fill, not a host-to-device copy)."""
        v = self._values[name]
        return v.to(device) if isinstance(v, torch.Tensor) else torch.full((), v, dtype=torch.float64, device=device)
