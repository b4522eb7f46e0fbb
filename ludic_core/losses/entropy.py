"""`EntropyBonus`: reward the policy for keeping its token distribution spread.

Policy-gradient training tends to collapse entropy early (the model commits to
its first successful patterns and stops exploring); a small bonus slows that.
`token_entropy` computes the entropies from logits for the trainer.
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
    masked_mean,
    reduce_tokens,
)

__all__ = ["EntropyBonus", "token_entropy"]


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) over the last dim, in fp32: [..., V] -> [...].

    Computed from log_softmax (no log of an underflowed probability); terms with
    p = 0 (e.g. -inf logits) count as 0 in value and gradient. Shape-preserving:
    to align with `token_logprobs`, pass `logits[:, :-1]`.
    """
    logp = torch.log_softmax(logits.float(), dim=-1)
    p = logp.exp()
    logp = logp.masked_fill(~torch.isfinite(logp), 0.0)
    return -(p * logp).sum(-1)


@dataclass
class EntropyBonus:
    """Per-token value -coef * entropy (minimising the loss raises entropy).
    Not inert at A = 0: it ignores the advantage, every scored token counts."""

    coef: float = 0.01
    reduction: Reduction = "token"
    needs_entropy: ClassVar[bool] = True
    needs_actor_logprobs: ClassVar[bool] = False
    inert_at_zero_advantage: ClassVar[bool] = False

    def __call__(self, inputs: LossInputs) -> LossOutputs:
        if inputs.entropy is None:
            raise ValueError(
                "EntropyBonus needs inputs.entropy (needs_entropy=True); the trainer must set it"
            )
        check_inputs(inputs)
        return LossOutputs(
            loss=-self.coef * reduce_tokens(inputs.entropy, inputs, self.reduction),
            metrics={"entropy": masked_mean(inputs.entropy, inputs.mask)},
        )
