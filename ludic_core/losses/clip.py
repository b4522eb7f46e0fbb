"""The PPO-style clipped objective, shared by the token-level and sequence-level losses.

`ClippedSurrogateLoss` clips each token's ratio, `GSPOLoss` each sequence's; the
bounds they accept and the pessimistic min they take are the same, so both live here.
"""

from __future__ import annotations

import torch

__all__ = ["check_clip_range", "clipped_objective"]


def check_clip_range(clip_low: float, clip_high: float) -> None:
    """ValueError unless 0 <= clip_low < 1 (a lower bound 1 - clip_low > 0) and clip_high >= 0."""
    if not 0.0 <= clip_low < 1.0:
        raise ValueError(f"clip_low must be in [0, 1), got {clip_low}")
    if clip_high < 0.0:
        raise ValueError(f"clip_high must be >= 0, got {clip_high}")


def clipped_objective(
    ratio: torch.Tensor, adv: torch.Tensor, clip_low: float, clip_high: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(-min(r A, clip(r, 1 - clip_low, 1 + clip_high) A), True where the clipped term is the smaller).

    The min is a pessimistic bound: once r has moved past the clip range in the
    direction A rewards, the clipped (constant) term wins and the gradient stops.
    """
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv
    return -torch.minimum(unclipped, clipped), clipped < unclipped
