"""`ConstantCredit`: every step gets the same weight, whatever its reward.

With value 1 a policy-gradient loss becomes plain maximum likelihood on the
rollouts' own tokens: supervised fine-tuning / behaviour cloning of teacher
(or filtered) episodes through the same RL pipeline.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from ludic_core.credit.base import check_rewards
from ludic_core.types import Rollout

__all__ = ["ConstantCredit"]


@dataclass
class ConstantCredit:
    """`out[i][j] = value`. Rewards are still checked: a NaN is a bug upstream."""

    value: float = 1.0

    def __post_init__(self) -> None:
        if not math.isfinite(self.value):
            raise ValueError(f"value must be finite, got {self.value!r}")

    def compute(self, rollouts: Sequence[Rollout]) -> list[list[float]]:
        check_rewards(rollouts)
        return [[float(self.value)] * r.length for r in rollouts]
