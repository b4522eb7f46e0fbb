"""`ReinforceBaselineLoss`: REINFORCE with the step's mean advantage subtracted.

Subtracting a constant b leaves the expected gradient unchanged (E[grad log pi]
= 0) but can cut its variance a lot: with all-positive rewards plain REINFORCE
pushes every sampled token up and relies on noise to tell them apart. The
baseline is the mean over the WHOLE optimizer step (`batch_mean_advantage`), so
every micro-batch subtracts the same number.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ludic_core.losses.base import (
    LossInputs,
    LossOutputs,
    Reduction,
    check_inputs,
    masked_mean,
    reduce_tokens,
    sequence_advantages,
)

__all__ = ["ReinforceBaselineLoss"]


@dataclass
class ReinforceBaselineLoss:
    """Per-token value -(A_i - b) * logprobs_{i,t}, b = inputs.batch_mean_advantage.

    Not inert at A_i = 0: such an item still gets -(0 - b), a push against the baseline.
    """

    reduction: Reduction = "token"
    needs_entropy: ClassVar[bool] = False
    needs_actor_logprobs: ClassVar[bool] = False
    inert_at_zero_advantage: ClassVar[bool] = False

    def __call__(self, inputs: LossInputs) -> LossOutputs:
        check_inputs(inputs)
        centred = sequence_advantages(inputs) - inputs.batch_mean_advantage
        values = -centred * inputs.logprobs
        return LossOutputs(
            loss=reduce_tokens(values, inputs, self.reduction),
            metrics={
                "logp_mean": masked_mean(inputs.logprobs, inputs.mask),
                "adv_mean": inputs.advantages.detach().float().mean(),
                "baseline": float(inputs.batch_mean_advantage),
            },
        )
