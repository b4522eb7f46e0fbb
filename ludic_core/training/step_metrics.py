"""One number per optimizer step from the loss metrics of many micro-batches.

A loss reports metrics about its own micro-batch; a step spans several
micro-batches and, under torchrun, several ranks. Averaging everything by
token share turns a maximum into a blend (a `ratio_max` of 1.58 read 1.43 once
the same batch was split in three), so the metric's name says how it combines:

- `*_max` / `*_min`: max / min over the micro-batches that hold action tokens;
- `loss` and `<term>/loss`: summed (each part is already divided by the step's
  totals, so the sum is the step's loss);
- anything else: a mean weighted by the micro-batch's share of the step's
  action tokens (every rank's shares sum to its part of 1, so summing over
  ranks gives the step mean).
"""

from __future__ import annotations

import math
from typing import Mapping

from ludic_core.training import distributed as dist_utils

__all__ = ["StepMetrics", "how_combined"]


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


class StepMetrics:
    """Accumulates micro-batch metrics; `result` reduces them over ranks."""

    def __init__(self) -> None:
        self._values: dict[str, float] = {}

    def add(self, metrics: Mapping[str, float], *, share: float, has_tokens: bool) -> None:
        """One micro-batch's metrics; `share` = its action tokens / the step's.
        A micro-batch without action tokens (a rank's padding) adds its keys
        but no values: its maxima and minima are placeholders, not data."""
        for name, value in metrics.items():
            how, v = how_combined(name), float(value)
            if how == "max":
                cur = self._values.get(name, -math.inf)
                self._values[name] = max(cur, v) if has_tokens else cur
            elif how == "min":
                cur = self._values.get(name, math.inf)
                self._values[name] = min(cur, v) if has_tokens else cur
            elif how == "sum":
                self._values[name] = self._values.get(name, 0.0) + v
            else:
                self._values[name] = self._values.get(name, 0.0) + share * v

    def result(self, ctx: dist_utils.DistContext) -> dict[str, float]:
        """The step's metrics, reduced over ranks (every rank runs the same
        micro-batch count with the same loss, so the key sets agree). A max or
        min that saw no action token anywhere reads 0.0, as the losses do."""
        names = sorted(self._values)
        out: dict[str, float] = {}
        for op in ("sum", "max", "min"):
            keys = [n for n in names if how_combined(n) == op or (op == "sum" and how_combined(n) == "mean")]
            reduced = dist_utils.all_reduce_floats([self._values[k] for k in keys], op, ctx)
            out.update({k: (v if math.isfinite(v) else 0.0) for k, v in zip(keys, reduced)})
        return out
