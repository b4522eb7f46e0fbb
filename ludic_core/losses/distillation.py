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

`TopKDistillLoss` (GKD's full-distribution variant) reads more of the teacher at the
same positions: its K likeliest tokens, and one bucket for the rest of the
vocabulary, and minimises the exact reverse KL between the two distributions over
those K + 1 outcomes,

    KL_t = sum_k p_s(k) (log p_s(k) - log p_t(k)) + r_s (log r_s - log r_t),

r = 1 - sum_k p(k) the mass off the teacher's top K (K = the vocabulary: the full
reverse KL). It is differentiated directly, not through a sampled token, so one
sampled reply teaches the teacher's whole preference at every position, where the
sampled log-ratio gives one noisy number per token (measured on tic-tac-toe:
docs/results.md, "On-policy distillation against SFT"). The bucket keeps the student
from parking mass on tokens the teacher's top K leave out, which a KL renormalised
over the top K alone would not see.
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

__all__ = ["OnPolicyDistillLoss", "TopKDistillLoss", "distillation_advantages", "top_k_forward_kl",
           "top_k_reverse_kl"]


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


#: The smallest off-top-K mass a log is taken of (K = the vocabulary leaves none).
_TAIL_FLOOR = 1e-12


def top_k_reverse_kl(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """KL(student || teacher) [...] over K tokens and the rest of the vocabulary as one more outcome,
    from log-probs [..., K] of the same K tokens (the teacher's: detached). Exact for K = the
    vocabulary (the rest is then empty and adds 0)."""
    teacher = teacher.detach()
    p_s = student.exp()
    rest_s = (1.0 - p_s.sum(-1)).clamp_min(_TAIL_FLOOR)
    rest_t = (1.0 - teacher.exp().sum(-1)).clamp_min(_TAIL_FLOOR)
    return (p_s * (student - teacher)).sum(-1) + rest_s * (rest_s.log() - rest_t.log())


def top_k_forward_kl(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """KL(teacher || student) [...] over the same K + 1 outcomes as `top_k_reverse_kl`: a
    cross-entropy to the teacher's distribution (minus its entropy), whose gradient in the student's
    logits is p_s - p_t, bounded whatever the student wrote."""
    teacher = teacher.detach()
    p_t = teacher.exp()
    rest_s = (1.0 - student.exp().sum(-1)).clamp_min(_TAIL_FLOOR)
    rest_t = (1.0 - p_t.sum(-1)).clamp_min(_TAIL_FLOOR)
    return (p_t * (teacher - student)).sum(-1) + rest_t * (rest_t.log() - rest_s.log())


@dataclass
class TopKDistillLoss:
    """Per-token value teacher_coef * KL_t (`top_k_reverse_kl` over the teacher's `teacher_top_k`
    likeliest tokens, or `top_k_forward_kl` with `divergence` "forward"), minus, with `reward_coef`
    > 0, the clipped surrogate of the env's credit (reward_coef x the item's weight, as in
    `OnPolicyDistillLoss`). Metrics: `teacher_kl` (the mean
    KL_t, the quantity driven down), `sampled_teacher_kl` (the sampled tokens' log-ratio, as
    `OnPolicyDistillLoss` reports it: the two losses' runs compare on it), `teacher_top_mass`."""

    teacher_top_k: int = 64
    #: "reverse": KL(student || teacher), mode-seeking (GKD's on-policy default); "forward":
    #: KL(teacher || student), the teacher's distribution as a soft label on the student's own states
    divergence: Literal["reverse", "forward"] = "reverse"
    teacher_coef: float = 1.0
    reward_coef: float = 0.0
    clip_low: float = 0.2
    clip_high: float = 0.2
    reduction: Reduction = "token"
    needs_entropy: ClassVar[bool] = False
    needs_actor_logprobs: ClassVar[bool] = True  # the student is scored at the temperature it sampled at
    needs_teacher_logprobs: ClassVar[bool] = True
    inert_at_zero_advantage: ClassVar[bool] = False

    def __post_init__(self) -> None:
        check_clip_range(self.clip_low, self.clip_high)
        if self.divergence not in ("reverse", "forward"):
            raise ValueError(f"divergence must be 'reverse' or 'forward', got {self.divergence!r}")
        if isinstance(self.teacher_top_k, bool) or not isinstance(self.teacher_top_k, int) or self.teacher_top_k < 1:
            raise ValueError(f"teacher_top_k must be an int >= 1, got {self.teacher_top_k!r}")
        if self.teacher_coef <= 0.0 or self.reward_coef < 0.0:
            raise ValueError(f"teacher_coef must be > 0 and reward_coef >= 0, got {self.teacher_coef} and "
                             f"{self.reward_coef}")

    def __call__(self, inputs: LossInputs) -> LossOutputs:
        check_inputs(inputs)
        if inputs.teacher_top_logprobs is None or inputs.student_top_logprobs is None:
            raise ValueError("top-k distillation reads the teacher's and the student's log-probs of the teacher's "
                             "top tokens, but inputs.teacher_top_logprobs or inputs.student_top_logprobs is None: "
                             "the trainer fills them for a loss declaring teacher_top_k, given a teacher")
        on = inputs.mask > 0
        divergence = top_k_reverse_kl if self.divergence == "reverse" else top_k_forward_kl
        kl = divergence(inputs.student_top_logprobs, inputs.teacher_top_logprobs)
        values = torch.where(on, self.teacher_coef * kl, torch.zeros_like(kl))
        metrics: dict[str, torch.Tensor | float] = {
            "teacher_kl": masked_mean(kl, inputs.mask),
            "teacher_top_mass": masked_mean(inputs.teacher_top_logprobs.detach().exp().sum(-1), inputs.mask),
        }
        if inputs.teacher_logprobs is not None:
            metrics["sampled_teacher_kl"] = masked_mean(inputs.old_logprobs - inputs.teacher_logprobs, inputs.mask)
        if self.reward_coef > 0.0:
            adv = torch.where(on, (self.reward_coef * sequence_advantages(inputs)).to(kl.dtype), torch.zeros_like(kl))
            ratio = torch.exp(masked_log_ratio(inputs))
            surrogate, clipped = clipped_objective(ratio, adv, self.clip_low, self.clip_high)
            values = values + torch.where(on, surrogate, torch.zeros_like(surrogate))
            metrics["clip_frac"] = masked_mean(clipped.float(), inputs.mask)
        return LossOutputs(loss=reduce_tokens(values, inputs, self.reduction), metrics=metrics)
