"""`HybridNormalizedReturn`: group-mean baseline, batch-level std (ScaleRL).

The group mean is still the baseline, but the scale comes from the whole
batch's centred rewards. A group whose rollouts barely differ then gets small
advantages instead of being blown up to unit scale by its own tiny std, which
is the failure mode of per-group std normalisation (ScaleRL, Khatri et al. 2025).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from ludic_core.credit.base import check_group_params, check_rewards
from ludic_core.credit.groups import centred, group_indices
from ludic_core.types import Rollout

__all__ = ["HybridNormalizedReturn"]


@dataclass
class HybridNormalizedReturn:
    """A_i = c_i / (std_batch(c) + eps) with c_i = R_i - mean_{group(i)} R.

    std is the population std over every rollout in the batch; since each group
    is centred, mean(c) = 0 and std_batch(c) = sqrt(mean(c^2)).
    """

    eps: float = 1e-6
    expected_group_size: int | None = None

    def __post_init__(self) -> None:
        check_group_params(self.eps, self.expected_group_size)

    def compute(self, rollouts: Sequence[Rollout]) -> list[list[float]]:
        check_rewards(rollouts)
        if not rollouts:
            return []
        groups = group_indices(rollouts, expected_group_size=self.expected_group_size)
        centred_rewards = [0.0] * len(rollouts)
        for idx in groups.values():
            for i, c in zip(idx, centred([rollouts[i].total_reward for i in idx])):
                centred_rewards[i] = c
        batch_mean = sum(centred_rewards) / len(centred_rewards)  # 0 up to rounding
        std = math.sqrt(sum((c - batch_mean) ** 2 for c in centred_rewards) / len(centred_rewards))
        return [[c / (std + self.eps)] * r.length for c, r in zip(centred_rewards, rollouts)]
