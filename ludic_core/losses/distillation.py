"""`OnPolicyDistillLoss`: the student learns from a teacher's score of every token it wrote.

On-policy distillation (GKD's on-policy variant; Thinking Machines, "On-Policy
Distillation", 2025): the student samples, a frozen teacher scores the sampled
tokens, and each token's credit is the negative reverse KL at that token,

    A_t = teacher_coef * (log pi_teacher(y_t) - log pi_sampler(y_t))
          + reward_coef * A_env,

where `A_env` is the item's credit from the env's reward (`SAWItem.weight`, 0
when the algorithm mixes in no reward). The student's log-prob in `A_t` is the
sampler's, fixed when the batch was drawn (as a reward is): the credit is a
property of the sample, not of the weights being trained, so reuse and stale
batches do not move it. Minimising -A_t pushes the student's mass toward tokens the
teacher likes, in the states the student itself reaches; its expectation over
the student's samples is the reverse KL KL(pi_student || pi_teacher).

The objective is PPO's clipped surrogate with these per-token advantages, so with
one update per batch (ratio 1) its gradient is sum_t A_t grad log pi(y_t), and
reused batches are kept near the sampler.
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
    masked_extreme,
    masked_log_ratio,
    masked_mean,
    reduce_tokens,
    sequence_advantages,
)
from ludic_core.losses.clip import check_clip_range, clipped_objective

__all__ = ["OnPolicyDistillLoss", "distillation_advantages"]


def distillation_advantages(inputs: LossInputs, teacher_coef: float, reward_coef: float) -> torch.Tensor:
    """Per-token credit [B, T] (detached): teacher_coef * (teacher - sampler log-prob) on action
    tokens plus reward_coef * the item's weight, and exactly 0 off the action mask."""
    if inputs.teacher_logprobs is None:
        raise ValueError("on-policy distillation scores the student's tokens with a teacher, but "
                         "inputs.teacher_logprobs is None: the trainer needs a teacher (Trainer(teacher=...))")
    on = inputs.mask > 0
    gap = inputs.teacher_logprobs.detach() - inputs.old_logprobs.detach()
    credit = teacher_coef * gap + reward_coef * sequence_advantages(inputs)
    return torch.where(on, credit.to(inputs.logprobs.dtype), torch.zeros_like(inputs.logprobs))


@dataclass
class OnPolicyDistillLoss:
    """Per-token value -min(r A_t, clip(r, 1 - clip_low, 1 + clip_high) A_t), A_t from
    `distillation_advantages`, r = pi_theta / pi_sampler. Metric `teacher_kl` is the masked
    mean of log pi_sampler - log pi_teacher: a per-token estimate of KL(student || teacher) on
    the batch's own samples, the quantity distillation drives down.

    Not inert at A = 0: an item without env credit still has the teacher's per-token credit."""

    teacher_coef: float = 1.0
    reward_coef: float = 0.0
    clip_low: float = 0.2
    clip_high: float = 0.2
    reduction: Reduction = "token"
    needs_entropy: ClassVar[bool] = False
    needs_actor_logprobs: ClassVar[bool] = True
    needs_teacher_logprobs: ClassVar[bool] = True
    inert_at_zero_advantage: ClassVar[bool] = False

    def __post_init__(self) -> None:
        check_clip_range(self.clip_low, self.clip_high)
        if self.teacher_coef < 0.0 or self.reward_coef < 0.0:
            raise ValueError(f"teacher_coef and reward_coef must be >= 0, got {self.teacher_coef} and "
                             f"{self.reward_coef}")
        if self.teacher_coef == 0.0 and self.reward_coef == 0.0:
            raise ValueError("teacher_coef and reward_coef are both 0: the loss would be 0 everywhere")

    def __call__(self, inputs: LossInputs) -> LossOutputs:
        check_inputs(inputs)
        mask = inputs.mask
        adv = distillation_advantages(inputs, self.teacher_coef, self.reward_coef)
        log_ratio = masked_log_ratio(inputs)
        ratio = torch.exp(log_ratio)
        values, clipped = clipped_objective(ratio, adv, self.clip_low, self.clip_high)
        assert inputs.teacher_logprobs is not None  # distillation_advantages checked it
        reverse_kl = torch.where(mask > 0, inputs.old_logprobs - inputs.teacher_logprobs,
                                 torch.zeros_like(inputs.old_logprobs))
        metrics: dict[str, torch.Tensor | float] = {
            "teacher_kl": masked_mean(reverse_kl, mask),
            "teacher_logprob": masked_mean(inputs.teacher_logprobs, mask),
            "token_advantage": masked_mean(adv, mask),
            "clip_frac": masked_mean(clipped.float(), mask),
            "ratio_mean": masked_mean(ratio, mask),
            "ratio_max": masked_extreme(ratio, mask, "max"),
            "ratio_min": masked_extreme(ratio, mask, "min"),
        }
        return LossOutputs(loss=reduce_tokens(values, inputs, self.reduction), metrics=metrics)
