"""`ReinforceLoss`: the vanilla policy gradient, -A * log pi(token).

No importance ratio and no clipping: correct only for on-policy data (the
weights that sampled the tokens are the ones being trained). Its gradient is
A * grad log pi, the score-function estimator everything else here refines.
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

__all__ = ["ReinforceLoss"]


@dataclass
class ReinforceLoss:
    """Per-token value -A_i * logprobs_{i,t}, reduced by `reduction` (inert at A_i = 0)."""

    reduction: Reduction = "token"
    needs_entropy: ClassVar[bool] = False
    needs_actor_logprobs: ClassVar[bool] = False
    inert_at_zero_advantage: ClassVar[bool] = True

    def __call__(self, inputs: LossInputs) -> LossOutputs:
        check_inputs(inputs)
        values = -sequence_advantages(inputs) * inputs.logprobs
        return LossOutputs(
            loss=reduce_tokens(values, inputs, self.reduction),
            metrics={
                "logp_mean": masked_mean(inputs.logprobs, inputs.mask),
                "adv_mean": inputs.advantages.detach().float().mean(),
            },
        )
