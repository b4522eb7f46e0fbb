"""Batch filters that run before credit assignment.

A group whose rollouts all earned the same reward has zero group-relative
advantage everywhere: it adds no gradient, only compute and a smaller
effective batch (DAPO's "dynamic sampling" drops such groups and resamples).
"""

from __future__ import annotations

from typing import Callable, Sequence

from ludic_core.credit.base import check_rewards
from ludic_core.credit.groups import group_indices
from ludic_core.types import Rollout

__all__ = ["RolloutFilter", "drop_zero_variance_groups", "signal_groups"]

#: rollouts -> (those kept, in order; how many groups were dropped)
RolloutFilter = Callable[[list[Rollout]], tuple[list[Rollout], int]]


def drop_zero_variance_groups(rollouts: Sequence[Rollout]) -> tuple[list[Rollout], int]:
    """Remove groups whose total rewards are all equal.

    Returns (kept rollouts in their original order, number of groups dropped).
    A group of one is trivially zero-variance and is dropped too. Rollouts
    without a group_id, failed rollouts and non-finite rewards raise ValueError.
    """
    check_rewards(rollouts)
    groups = group_indices(rollouts, allow_singletons=True)
    keep: set[int] = set()
    dropped = 0
    for idx in groups.values():
        rewards = {rollouts[i].total_reward for i in idx}
        if len(rewards) > 1:
            keep.update(idx)
        else:
            dropped += 1
    return [r for i, r in enumerate(rollouts) if i in keep], dropped


def signal_groups(rollouts: Sequence[Rollout]) -> int:
    """Groups whose episodes do not all end with the same return (the ones with
    a non-zero group-relative advantage somewhere): those the filter above keeps."""
    kept, _ = drop_zero_variance_groups(rollouts)
    return len({r.meta["group_id"] for r in kept})
