"""`ClippedSurrogateLoss`: PPO's clipped objective at token level (as in GRPO).

The ratio r = pi_theta / pi_old corrects for tokens sampled by older weights.
Taking min(r A, clip(r) A) is a pessimistic bound: once a token's ratio has
moved past 1 +/- eps in the direction the advantage rewards, it gets no more
gradient, which keeps each update near the behaviour policy. Separate low/high
bounds allow DAPO's "clip-higher" (more room for unlikely tokens to grow).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from ludic_core.losses.base import (
    LossInputs,
    LossOutputs,
    Reduction,
    check_inputs,
    masked_log_ratio,
    masked_mean,
    reduce_tokens,
    sequence_advantages,
)

__all__ = ["ClippedSurrogateLoss"]


@dataclass
class ClippedSurrogateLoss:
    """Per-token value -min(r A, clip(r, 1 - clip_low, 1 + clip_high) A)."""

    clip_low: float = 0.2
    clip_high: float = 0.2
    reduction: Reduction = "token"
    needs_entropy: ClassVar[bool] = False
    needs_actor_logprobs: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if not 0.0 <= self.clip_low < 1.0:
            raise ValueError(f"clip_low must be in [0, 1), got {self.clip_low}")
        if self.clip_high < 0.0:
            raise ValueError(f"clip_high must be >= 0, got {self.clip_high}")

    def __call__(self, inputs: LossInputs) -> LossOutputs:
        check_inputs(inputs)
        mask = inputs.mask
        log_ratio = masked_log_ratio(inputs)
        ratio = torch.exp(log_ratio)
        adv = sequence_advantages(inputs)
        unclipped = ratio * adv
        clipped = torch.clamp(ratio, 1.0 - self.clip_low, 1.0 + self.clip_high) * adv
        values = -torch.minimum(unclipped, clipped)
        on = mask > 0
        ratios = ratio.detach()[on]
        return LossOutputs(
            loss=reduce_tokens(values, inputs, self.reduction),
            metrics={
                "clip_frac": masked_mean((clipped < unclipped).float(), mask),
                "ratio_mean": masked_mean(ratio, mask),
                "ratio_max": float(ratios.max()) if ratios.numel() else 0.0,
                "ratio_min": float(ratios.min()) if ratios.numel() else 0.0,
                "approx_kl": masked_mean(-log_ratio, mask),
            },
        )
