"""`MonteCarloReturn`: the discounted reward-to-go of each step.

A step can only influence rewards that come after it, so crediting it with
the rewards-to-go (rather than the whole episode's reward) drops terms that
are pure noise for its gradient. `gamma < 1` further favours near rewards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ludic_core.credit.base import check_gamma, check_rewards
from ludic_core.types import Rollout

__all__ = ["MonteCarloReturn", "discounted_returns"]


def discounted_returns(rewards: Sequence[float], gamma: float) -> list[float]:
    """G_t = r_t + gamma * G_{t+1}, computed backwards from G_T = 0."""
    out = [0.0] * len(rewards)
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = float(rewards[t]) + gamma * running
        out[t] = running
    return out


@dataclass
class MonteCarloReturn:
    """Every step gets its discounted return G_t within its own rollout."""

    gamma: float = 1.0

    def __post_init__(self) -> None:
        check_gamma(self.gamma)

    def compute(self, rollouts: Sequence[Rollout]) -> list[list[float]]:
        check_rewards(rollouts)
        return [discounted_returns([s.reward for s in r.steps], self.gamma) for r in rollouts]
