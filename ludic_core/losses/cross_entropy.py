"""`MaskedCrossEntropyLoss`: supervised fine-tuning on the action tokens.

SFT is REINFORCE with A = 1 on teacher tokens: -1 * log pi(token) pushes up
every demonstrated token equally, with no notion of better or worse. So the
advantages are ignored here, and SFT runs through the same trainer, masks and
normalisation as RL (see also `ConstantCredit`).
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
)

__all__ = ["MaskedCrossEntropyLoss"]


@dataclass
class MaskedCrossEntropyLoss:
    """Per-token value -logprobs. Metric "nll": masked mean negative log-likelihood.

    Not inert at A = 0: the advantage is ignored, so an item of weight 0 is trained
    on like any other (SFT sets 1 everywhere; drop an item to leave it out).
    """

    reduction: Reduction = "token"
    needs_entropy: ClassVar[bool] = False
    needs_actor_logprobs: ClassVar[bool] = False
    inert_at_zero_advantage: ClassVar[bool] = False

    def __call__(self, inputs: LossInputs) -> LossOutputs:
        check_inputs(inputs)
        return LossOutputs(
            loss=reduce_tokens(-inputs.logprobs, inputs, self.reduction),
            metrics={"nll": masked_mean(-inputs.logprobs, inputs.mask)},
        )
