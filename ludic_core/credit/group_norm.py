"""`GroupNormalizedReturn`: GRPO's group-relative advantage.

Rollouts of the same prompt form a group; the group's mean reward is the
baseline, so no value network is needed and the advantage says "better or
worse than my siblings". Dividing by the group's std (DeepSeekMath) makes every
group's advantages unit-scale; Dr. GRPO argues this over-weights groups that
are almost all-right or all-wrong, hence `normalize_std=False`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ludic_core.credit.base import check_group_params, check_rewards
from ludic_core.credit.groups import group_indices, standardised
from ludic_core.types import Rollout

__all__ = ["GroupNormalizedReturn"]


@dataclass
class GroupNormalizedReturn:
    """A_i = (R_i - mean_g R) / (std_g R + eps), R_i the rollout's total reward.

    std is the *population* std (divide by the group size n, not n - 1): the
    group is the whole sample we normalise, not an estimate of a wider one.
    Every step of a rollout gets the rollout's A_i.
    """

    normalize_std: bool = True
    eps: float = 1e-6
    expected_group_size: int | None = None

    def __post_init__(self) -> None:
        check_group_params(self.eps, self.expected_group_size)

    def compute(self, rollouts: Sequence[Rollout]) -> list[list[float]]:
        check_rewards(rollouts)
        groups = group_indices(rollouts, expected_group_size=self.expected_group_size)
        adv = [0.0] * len(rollouts)
        for idx in groups.values():
            rewards = [rollouts[i].total_reward for i in idx]
            for i, a in zip(idx, standardised(rewards, self.eps, divide_by_std=self.normalize_std)):
                adv[i] = a
        return [[adv[i]] * r.length for i, r in enumerate(rollouts)]
