"""`TokenKLLoss`: a per-token KL penalty keeping pi_theta near a reference.

The reference is either the frozen model the run started from (`to=
"reference"`, as in RLHF and DeepSeekMath's GRPO: it bounds how far the whole
run drifts) or the behaviour policy that sampled the batch (`to="behaviour"`:
with one optimiser step per fresh batch the two policies coincide, so this
penalty is exactly 0 in synchronous training; it bites only on reused or stale
batches).

Uses the "k3" estimator (Schulman, "Approximating KL divergence"), in the form
DeepSeekMath's GRPO uses: with d = log pi_ref - log pi_theta,
k3 = exp(d) - d - 1. It is >= 0 for every token (e^d >= 1 + d), so unlike the
naive -d it never rewards moving away, and it is 0 exactly where the two
policies agree. Strictly, k3 in this form is unbiased for KL(pi_theta || pi_old)
when tokens are drawn from pi_theta; our tokens come from the sampler, which is
the same up to second order while the policies stay close (the regime a penalty is for).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

import torch

from ludic_core.losses.base import (
    LossInputs,
    LossOutputs,
    Reduction,
    check_inputs,
    masked_log_ratio,
    masked_mean,
    masked_reference_log_ratio,
    reduce_tokens,
)

__all__ = ["TokenKLLoss"]


@dataclass
class TokenKLLoss:
    """Per-token value coef * (exp(d) - d - 1), d = ref_logprobs - logprobs
    (`to="reference"`) or old_logprobs - logprobs (`to="behaviour"`).
    Metric "kl" is the unweighted masked mean of k3. Not inert at A = 0: the
    penalty ignores the advantage and binds on every scored token."""

    coef: float = 0.1
    reduction: Reduction = "token"
    to: Literal["reference", "behaviour"] = "behaviour"
    needs_entropy: ClassVar[bool] = False
    inert_at_zero_advantage: ClassVar[bool] = False
    needs_actor_logprobs: bool = field(init=False)
    needs_reference_logprobs: bool = field(init=False)

    def __post_init__(self) -> None:
        if self.to not in ("reference", "behaviour"):
            raise ValueError(f"TokenKLLoss.to must be 'reference' or 'behaviour', got {self.to!r}")
        self.needs_actor_logprobs = self.to == "behaviour"
        self.needs_reference_logprobs = self.to == "reference"

    def __call__(self, inputs: LossInputs) -> LossOutputs:
        check_inputs(inputs)
        d = -(masked_reference_log_ratio(inputs) if self.to == "reference" else masked_log_ratio(inputs))
        k3 = torch.exp(d) - d - 1.0
        return LossOutputs(
            loss=self.coef * reduce_tokens(k3, inputs, self.reduction),
            metrics={"kl": masked_mean(k3, inputs.mask)},
        )
