"""`CISPOLoss`: Clipped IS-weight Policy Optimization (MiniMax-M1, 2025).

PPO's clip zeroes the gradient of tokens whose ratio left the trust region,
and those are disproportionately the rare "fork" tokens (e.g. "Wait",
"However") that reasoning needs. CISPO instead keeps every token's REINFORCE
gradient and only bounds its importance weight: the weight is clipped and
detached, so it scales the gradient but never removes it.
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

__all__ = ["CISPOLoss"]


@dataclass
class CISPOLoss:
    """Per-token value -sg(clip(r, 1 - eps_low, 1 + eps_high)) * A * logprobs.

    MiniMax-M1's form: r = pi_theta / pi_old, weight capped at 1 + eps_high.
    `eps_low=None` (the default) sets no lower bound, as the paper does ("we
    did not impose a lower bound ... we only tuned eps_high"). Token reduction
    matches the paper's 1 / sum_i |o_i| normaliser. Inert at A = 0 (every
    token's value is a multiple of A).
    """

    eps_high: float = 2.0
    eps_low: float | None = None
    reduction: Reduction = "token"
    needs_entropy: ClassVar[bool] = False
    needs_actor_logprobs: ClassVar[bool] = True
    inert_at_zero_advantage: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if self.eps_high < 0.0:
            raise ValueError(f"eps_high must be >= 0, got {self.eps_high}")
        if self.eps_low is not None and not 0.0 <= self.eps_low <= 1.0:
            raise ValueError(f"eps_low must be in [0, 1] or None, got {self.eps_low}")

    def __call__(self, inputs: LossInputs) -> LossOutputs:
        check_inputs(inputs)
        ratio = torch.exp(masked_log_ratio(inputs)).detach()
        low = None if self.eps_low is None else 1.0 - self.eps_low
        weight = torch.clamp(ratio, min=low, max=1.0 + self.eps_high)
        values = -weight * sequence_advantages(inputs) * inputs.logprobs
        return LossOutputs(
            loss=reduce_tokens(values, inputs, self.reduction),
            metrics={
                "is_weight_mean": masked_mean(weight, inputs.mask),
                "clip_frac": masked_mean((weight != ratio).float(), inputs.mask),
            },
        )
