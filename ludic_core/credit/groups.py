"""Grouping rollouts by `meta["group_id"]`, with the checks group baselines need.

Group-relative credit (GRPO and friends) compares rollouts that answered the
same prompt. Every way that comparison can silently go wrong is an error here:
a rollout with no group, a group of one (no baseline to compare against), groups
of unexpected sizes (a lost rollout skews its group's mean), and failed episodes
(whose partial reward would drag their group's baseline around).
"""

from __future__ import annotations

import math
from typing import Hashable, Sequence

from ludic_core.types import Rollout

__all__ = ["group_indices", "centred", "standardised"]


def group_indices(
    rollouts: Sequence[Rollout],
    *,
    expected_group_size: int | None = None,
    allow_singletons: bool = False,
) -> dict[Hashable, list[int]]:
    """Map each group_id to the indices of its rollouts, in first-seen order.

    In a multi-agent batch (rollouts of more than one `meta["agent_id"]`) the key
    is (group_id, agent_id): each seat of a game is compared with the same seat of
    the group's other games, never with its opponent (whose return is often the
    negative of its own).

    Raises ValueError naming the offending rollouts / groups.
    """
    failed = [r.id for r in rollouts if r.failed]
    if failed:
        raise ValueError(
            f"failed rollouts {failed} cannot enter group credit; "
            "filter failed episodes out before assigning credit"
        )
    groups: dict[Hashable, list[int]] = {}
    seats = len({r.meta.get("agent_id") for r in rollouts}) > 1
    for i, r in enumerate(rollouts):
        gid = r.meta.get("group_id")
        if gid is None:
            raise ValueError(f"rollout {r.id} has no meta['group_id'] (needed for group credit)")
        groups.setdefault((gid, r.meta.get("agent_id")) if seats else gid, []).append(i)
    if not allow_singletons:
        for gid, idx in groups.items():
            if len(idx) == 1:
                raise ValueError(
                    f"group {gid!r} has a single rollout ({rollouts[idx[0]].id}): "
                    "no baseline is possible"
                )
    if expected_group_size is not None:
        bad = {gid: len(idx) for gid, idx in groups.items() if len(idx) != expected_group_size}
        if bad:
            raise ValueError(
                f"mismatched group sizes: expected {expected_group_size}, got {bad}"
            )
    return groups


def centred(values: Sequence[float]) -> list[float]:
    """x - mean(values) for each x: a group's rewards against the group's own baseline."""
    mean = sum(values) / len(values)
    return [x - mean for x in values]


def standardised(values: Sequence[float], eps: float, *, divide_by_std: bool = True) -> list[float]:
    """`centred(values)`, divided by their population std + eps when `divide_by_std`
    (the population's: the group is the whole sample, not an estimate of a wider one)."""
    c = centred(values)
    if not divide_by_std:
        return c
    scale = math.sqrt(sum(x ** 2 for x in c) / len(c)) + eps
    return [x / scale for x in c]
