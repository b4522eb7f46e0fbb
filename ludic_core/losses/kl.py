"""`TokenKLLoss`: a per-token KL penalty keeping pi_theta near pi_old.

Uses the "k3" estimator (Schulman, "Approximating KL divergence"), in the form
DeepSeekMath's GRPO uses: with d = log pi_old - log pi_theta,
k3 = exp(d) - d - 1. It is >= 0 for every token (e^d >= 1 + d), so unlike the
naive -d it never rewards moving away, and it is 0 exactly where the two
policies agree. Strictly, k3 in this form is unbiased for KL(pi_theta || pi_old)
when tokens are drawn from pi_theta; our tokens come from pi_old, which is the
same up to second order while the policies stay close (the regime a penalty is for).
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
)

__all__ = ["TokenKLLoss"]


@dataclass
class TokenKLLoss:
    """Per-token value coef * (exp(d) - d - 1), d = old_logprobs - logprobs.
    Metric "kl" is the unweighted masked mean of k3."""

    coef: float = 0.1
    reduction: Reduction = "token"
    needs_entropy: ClassVar[bool] = False
    needs_actor_logprobs: ClassVar[bool] = True

    def __call__(self, inputs: LossInputs) -> LossOutputs:
        check_inputs(inputs)
        d = -masked_log_ratio(inputs)
        k3 = torch.exp(d) - d - 1.0
        return LossOutputs(
            loss=self.coef * reduce_tokens(k3, inputs, self.reduction),
            metrics={"kl": masked_mean(k3, inputs.mask)},
        )
