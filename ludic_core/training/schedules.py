"""Learning-rate schedules as LambdaLR multipliers (warmup, then decay)."""

from __future__ import annotations

import math
from typing import Callable

__all__ = ["lr_multiplier"]


def lr_multiplier(schedule: str, *, warmup_steps: int, total_steps: int | None) -> Callable[[int], float]:
    """Multiplier of the base lr at optimizer step `s` (0-based, as LambdaLR counts).

    Linear warmup over `warmup_steps`, then constant, linear or cosine decay to 0
    at `total_steps`.
    """
    if schedule not in ("constant", "linear", "cosine"):
        raise ValueError(f"unknown lr schedule {schedule!r}; use constant, linear or cosine")
    if schedule != "constant" and not total_steps:
        raise ValueError(f"lr schedule {schedule!r} needs total_steps")

    def fn(s: int) -> float:
        if warmup_steps and s < warmup_steps:
            return (s + 1) / warmup_steps
        if schedule == "constant":
            return 1.0
        span = max(total_steps - warmup_steps, 1)  # type: ignore[operator]
        progress = min(max(s - warmup_steps, 0) / span, 1.0)
        if schedule == "linear":
            return 1.0 - progress
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return fn
