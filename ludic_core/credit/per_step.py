"""`PerStepReward`: each step is credited with its own immediate reward only.

For dense, per-turn rewards that already judge the turn itself (a bandit view
of each step): later rewards are deliberately not propagated back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ludic_core.credit.base import check_rewards
from ludic_core.types import Rollout

__all__ = ["PerStepReward"]


@dataclass
class PerStepReward:
    """`out[i][j] = rollouts[i].steps[j].reward`."""

    def compute(self, rollouts: Sequence[Rollout]) -> list[list[float]]:
        check_rewards(rollouts)
        return [[float(s.reward) for s in r.steps] for r in rollouts]
