"""`ClippedSurrogateLoss`: PPO's clipped objective at token level (as in GRPO).

The ratio r = pi_theta / pi_old corrects for tokens sampled by older weights.
Taking min(r A, clip(r) A) is a pessimistic bound: once a token's ratio has
moved past 1 +/- eps in the direction the advantage rewards, it gets no more
gradient, which keeps each update near the behaviour policy. Separate low/high
bounds allow DAPO's "clip-higher" (more room for unlikely tokens to grow).

Sampler correction. The log-probs a sampler reports (vLLM in bf16, other
kernels) are not the trainer's, even at the same weights, so pi_old taken from
the sampler puts that mismatch into every ratio and the clip acts on noise.
With `sampler_correction` set, the ratio is taken against the trainer's own
log-probs (`logprobs.detach()`: exact in synchronous RL, where the weights that
sampled are the weights being trained) and each token is weighted by the
importance weight w = pi_trainer / pi_sampler, truncated at `sampler_cap`
(`*_tis`, as in TRL and verl) or zeroed above it (`*_mis`, masked), per token
or per sequence (w = exp of the summed log difference). On stale batches
(pipeline RL) w also carries the staleness, so the cap bounds both. The
mismatch is logged every step as `sampler_k3` (k3 of sampler vs trainer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import torch

from ludic_core.losses.base import (
    LossInputs,
    LossOutputs,
    Reduction,
    check_inputs,
    masked_extreme,
    masked_log_ratio,
    masked_mean,
    reduce_tokens,
    sequence_advantages,
)
from ludic_core.losses.clip import check_clip_range, clipped_objective

__all__ = ["ClippedSurrogateLoss", "SamplerCorrection", "sampler_weights"]

SamplerCorrection = Literal["none", "token_tis", "token_mis", "seq_tis", "seq_mis"]


def sampler_weights(inputs: LossInputs, correction: SamplerCorrection, cap: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(w [B, T] detached, 1.0 where the cap changed w) for `correction` (see the module docstring)."""
    log_w = torch.where(inputs.mask > 0, inputs.logprobs.detach() - inputs.old_logprobs,
                        torch.zeros_like(inputs.logprobs))
    if correction.startswith("seq"):
        log_w = log_w.sum(-1, keepdim=True).expand_as(log_w)
    w = torch.exp(log_w)
    over = w > cap
    if correction.endswith("tis"):
        w = torch.clamp(w, max=cap)
    elif correction.endswith("mis"):
        w = torch.where(over, torch.zeros_like(w), w)
    else:
        raise ValueError(f"unknown sampler_correction {correction!r}")
    return w, over.float()


@dataclass
class ClippedSurrogateLoss:
    """Per-token value -w * min(r A, clip(r, 1 - clip_low, 1 + clip_high) A)
    (w = 1 and r against the sampler's log-probs unless `sampler_correction` is set).

    Inert at A = 0: both branches of the min are r * 0, so value and gradient are 0
    (w is detached), whatever the reduction.
    """

    clip_low: float = 0.2
    clip_high: float = 0.2
    reduction: Reduction = "token"
    sampler_correction: SamplerCorrection = "none"
    sampler_cap: float = 2.0
    needs_entropy: ClassVar[bool] = False
    needs_actor_logprobs: ClassVar[bool] = True
    inert_at_zero_advantage: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_clip_range(self.clip_low, self.clip_high)
        if self.sampler_correction not in ("none", "token_tis", "token_mis", "seq_tis", "seq_mis"):
            raise ValueError(f"sampler_correction must be none, token_tis, token_mis, seq_tis or seq_mis, "
                             f"got {self.sampler_correction!r}")
        if self.sampler_cap <= 0.0:
            raise ValueError(f"sampler_cap must be > 0, got {self.sampler_cap}")

    def __call__(self, inputs: LossInputs) -> LossOutputs:
        check_inputs(inputs)
        mask = inputs.mask
        to_sampler = masked_log_ratio(inputs)  # log pi_theta - log pi_sampler
        d = -to_sampler.detach()
        metrics: dict[str, torch.Tensor | float] = {"sampler_k3": masked_mean(torch.exp(d) - d - 1.0, mask)}
        if self.sampler_correction == "none":
            log_ratio, w = to_sampler, None
        else:
            lp = inputs.logprobs
            log_ratio = torch.where(mask > 0, lp - lp.detach(), torch.zeros_like(lp))
            w, capped = sampler_weights(inputs, self.sampler_correction, self.sampler_cap)
            metrics.update({"is_weight_mean": masked_mean(w, mask), "is_capped_frac": masked_mean(capped, mask)})
        ratio = torch.exp(log_ratio)
        values, clipped = clipped_objective(ratio, sequence_advantages(inputs), self.clip_low, self.clip_high)
        if w is not None:
            values = w * values
        metrics.update({
            "clip_frac": masked_mean(clipped.float(), mask),
            "ratio_mean": masked_mean(ratio, mask),
            "ratio_max": masked_extreme(ratio, mask, "max"),
            "ratio_min": masked_extreme(ratio, mask, "min"),
            "approx_kl": masked_mean(-log_ratio, mask),
        })
        return LossOutputs(loss=reduce_tokens(values, inputs, self.reduction), metrics=metrics)
