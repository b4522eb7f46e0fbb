"""Credit seam: rollouts in, one scalar weight per step out.

A credit assigner is a pure function of rollouts. Its weights become
`SAWItem.weight` (the advantage of that model call). Bad rewards (NaN/inf) and
missing group ids are errors naming the rollout, never a silent wrong gradient.
"""

from __future__ import annotations

import math
from typing import Protocol, Sequence, runtime_checkable

from ludic_core.types import Rollout

__all__ = ["CreditAssigner", "check_group_params", "check_gamma", "check_rewards"]


@runtime_checkable
class CreditAssigner(Protocol):
    def compute(self, rollouts: Sequence[Rollout]) -> list[list[float]]:
        """`out[i][j]` is the weight of step j of rollouts[i]."""
        ...


def check_rewards(rollouts: Sequence[Rollout]) -> None:
    """Raise a ValueError naming the first non-finite step reward."""
    for r in rollouts:
        for s in r.steps:
            if not math.isfinite(s.reward):
                raise ValueError(
                    f"rollout {r.id} step {s.index} has non-finite reward {s.reward!r}"
                )


def check_group_params(eps: float, expected_group_size: int | None) -> None:
    """The shared checks of the group-relative assigners' parameters."""
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    if expected_group_size is not None and expected_group_size < 2:
        raise ValueError(f"expected_group_size must be >= 2, got {expected_group_size}")


def check_gamma(gamma: float) -> None:
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
