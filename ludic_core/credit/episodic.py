"""`EpisodicReturn`: every step gets the whole episode's reward.

The usual choice for outcome rewards (a verifier scores the final answer): no
step can be singled out, so each model call shares the episode's fate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ludic_core.credit.base import check_rewards
from ludic_core.types import Rollout

__all__ = ["EpisodicReturn"]


@dataclass
class EpisodicReturn:
    """`out[i][j] = rollouts[i].total_reward` for every step j."""

    def compute(self, rollouts: Sequence[Rollout]) -> list[list[float]]:
        check_rewards(rollouts)
        return [[r.total_reward] * r.length for r in rollouts]
