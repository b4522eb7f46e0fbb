"""`GSPOLoss`: Group Sequence Policy Optimization (Zheng et al. 2025).

The reward is given to a whole sequence, so GSPO clips and weights at the
sequence level too: s_i = (pi_theta(y_i) / pi_old(y_i))^(1/|y_i|), the
length-normalised (geometric-mean) ratio. Token-level ratios are noisy and
their noise accumulates over long sequences; one ratio per sequence is not.
Because s_i is a geometric mean its deviations from 1 are small, hence
clip ranges around 3e-4 / 4e-4 rather than PPO's 0.2.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from ludic_core.losses.base import (
    LossInputs,
    LossOutputs,
    check_inputs,
    masked_log_ratio,
    reduce_tokens,
    sequence_advantages,
)
from ludic_core.losses.clip import check_clip_range, clipped_objective

__all__ = ["GSPOLoss"]


@dataclass
class GSPOLoss:
    """Per-token value -min(s_it A, clip(s_it, 1 - clip_low, 1 + clip_high) A), with
    s_it = sg(s_i) * exp(logprobs_t - sg(logprobs_t)) (numerically s_i).

    Reduced per SEQUENCE (token mean within each sequence, then / num_sequences):
    the mean over a sequence's tokens of grad s_it is exactly s_i * mean_t grad
    log pi_t = grad s_i, so the loss equals the paper's (1/G) sum_i min(s_i A_i,
    clip(s_i) A_i) in value and gradient, with every sequence weighted equally.
    Inert at A_i = 0: both branches of the min are s_it * 0.
    """

    clip_low: float = 3e-4
    clip_high: float = 4e-4
    needs_entropy: ClassVar[bool] = False
    needs_actor_logprobs: ClassVar[bool] = True
    inert_at_zero_advantage: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_clip_range(self.clip_low, self.clip_high)

    def __call__(self, inputs: LossInputs) -> LossOutputs:
        check_inputs(inputs)
        mask = inputs.mask
        lengths = mask.sum(-1)
        seq_log_ratio = masked_log_ratio(inputs).sum(-1) / lengths.clamp_min(1.0)
        seq_ratio = torch.exp(seq_log_ratio.detach())  # s_i, [B]
        lp = inputs.logprobs
        grad_carrier = torch.where(mask > 0, lp - lp.detach(), torch.zeros_like(lp))
        s_tok = seq_ratio[:, None] * torch.exp(grad_carrier)  # value s_i, grad s_i * grad lp
        adv = sequence_advantages(inputs)
        values, _ = clipped_objective(s_tok, adv, self.clip_low, self.clip_high)
        return LossOutputs(
            loss=reduce_tokens(values, inputs, "sequence"),
            metrics=self._metrics(seq_ratio, adv[:, 0], lengths > 0),
        )

    def _metrics(
        self, s: torch.Tensor, a: torch.Tensor, has_tokens: torch.Tensor
    ) -> dict[str, torch.Tensor | float]:
        """clip_frac: share of sequences (with action tokens) whose clipped term wins;
        0 for both when no sequence has any (masked sums: no host sync)."""
        has = has_tokens.float()
        n = has.sum().clamp_min(1.0)
        _, clipped = clipped_objective(s, a, self.clip_low, self.clip_high)
        return {
            "clip_frac": (clipped.float() * has).sum() / n,
            "seq_ratio_mean": (s * has).sum() / n,
        }
