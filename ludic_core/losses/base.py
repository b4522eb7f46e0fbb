"""Loss seam: a loss is a pure function of per-token tensors from ONE forward pass.

The trainer runs the model once per micro-batch and hands every loss term the
same `LossInputs`; `CompositeLoss` sums terms without a second forward pass.

Normalisation is explicit so that gradient accumulation and data parallelism
give exactly the full-batch gradient: a loss divides its *sum* over the
micro-batch by `num_tokens` (token reduction) or `num_sequences` (sequence
reduction), which the trainer sets to the totals over the WHOLE optimizer step
(all micro-batches, all ranks), not the micro-batch's own counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

import torch

from ludic_core.losses.flags import declared, is_inert, wants_reference, wants_teacher

__all__ = ["LossInputs", "LossOutputs", "Loss", "Reduction", "reduce_tokens"]

Reduction = Literal["token", "sequence"]


@dataclass
class LossInputs:
    """Aligned per-token tensors, shape [B, T] (T = sequence length - 1, i.e.
    position t scores token t+1 of the input)."""

    logprobs: torch.Tensor  # log pi_theta(token) under the current weights, fp32, with grad
    old_logprobs: torch.Tensor  # the actor's sampling log-probs (behaviour policy), no grad
    mask: torch.Tensor  # 1.0 on action (completion) tokens, 0.0 elsewhere, float
    advantages: torch.Tensor  # [B] one credit weight per sequence (SAWItem.weight)
    num_tokens: float  # action tokens in the whole optimizer step (all micro-batches, ranks)
    num_sequences: float  # sequences in the whole optimizer step
    entropy: torch.Tensor | None = None  # [B, T] token entropy, when a term needs it
    batch_mean_advantage: float = 0.0  # mean SAWItem.weight over the whole optimizer step
    ref_logprobs: torch.Tensor | None = None  # [B, T] under the frozen reference model, when a term needs it
    teacher_logprobs: torch.Tensor | None = None  # [B, T] under a distillation teacher, when a term needs it
    # [B, T, K] under a loss declaring `teacher_top_k` K: the teacher's log-probs of its K likeliest
    # tokens at each position, and the student's log-probs of the same tokens (with grad)
    teacher_top_logprobs: torch.Tensor | None = None
    student_top_logprobs: torch.Tensor | None = None


@dataclass
class LossOutputs:
    loss: torch.Tensor  # scalar; already normalised by the step totals
    # For logging: 0-d tensors on the loss's device, so that no micro-batch waits
    # for the accelerator (the trainer converts once per step). Floats are accepted too.
    metrics: dict[str, torch.Tensor | float] = field(default_factory=dict)


@runtime_checkable
class Loss(Protocol):
    # Read-only flags: a class attribute (`needs_entropy: ClassVar[bool] = False`), a
    # dataclass field or a property all satisfy them.
    @property
    def needs_entropy(self) -> bool:
        """True when `inputs.entropy` must be computed by the trainer."""
        ...

    @property
    def needs_actor_logprobs(self) -> bool:
        """True when the loss reads `old_logprobs` (ratios, KL to the behaviour
        policy): the trainer then refuses items without the sampler's log-probs
        and scores at the sampling temperature, instead of comparing against zeros."""
        ...

    # Optional: `needs_reference_logprobs = True` makes the trainer keep a frozen
    # copy of the starting model and fill `inputs.ref_logprobs` (read with
    # `wants_reference`: undeclared means False; a loss that forgets it fails
    # loudly in `masked_reference_log_ratio`).
    # Optional: `needs_teacher_logprobs = True` makes the trainer score every item with the
    # distillation teacher it was given (`Trainer(teacher=...)`) and fill `inputs.teacher_logprobs`
    # (read with `wants_teacher`; undeclared means False). `teacher_top_k = K` (an int) also fills
    # `inputs.teacher_top_logprobs` and `inputs.student_top_logprobs`: both distributions over the
    # teacher's K likeliest tokens at each position (read with `teacher_top_k`; undeclared means None).
    # Optional: `inert_at_zero_advantage = True` promises that an item whose
    # advantage is exactly 0 adds exactly 0 to the loss and its gradient, given the
    # step totals (`num_tokens`, `num_sequences`, `batch_mean_advantage`) that still
    # count it. The trainer then runs no forward or backward pass for such items
    # (read with `is_inert`: undeclared means not inert, so user losses stay exact).

    def __call__(self, inputs: LossInputs) -> LossOutputs: ...


def reduce_tokens(values: torch.Tensor, inputs: LossInputs, reduction: Reduction) -> torch.Tensor:
    """Sum masked per-token `values` [B, T] and normalise by the step totals.

    token: sum over all action tokens / num_tokens (every token counts equally).
    sequence: each sequence's token mean, summed / num_sequences (every sequence
    counts equally, whatever its length).
    """
    masked = values * inputs.mask
    if reduction == "token":
        return masked.sum() / max(inputs.num_tokens, 1.0)
    if reduction == "sequence":
        per_seq = masked.sum(-1) / inputs.mask.sum(-1).clamp_min(1.0)
        return per_seq.sum() / max(inputs.num_sequences, 1.0)
    raise ValueError(f"unknown reduction {reduction!r}; use 'token' or 'sequence'")


# --- helpers shared by the loss terms (appended; the contract above is fixed) ---

__all__ += ["check_inputs", "masked_mean", "masked_log_ratio", "masked_reference_log_ratio", "sequence_advantages",
            "declared", "is_inert", "wants_reference", "wants_teacher", "masked_extreme"]


def check_inputs(inputs: LossInputs) -> None:
    """Raise ValueError on misaligned shapes, which would otherwise broadcast
    into a silently wrong loss (e.g. [B, T] advantages against [B, T] logprobs)."""
    shape = tuple(inputs.logprobs.shape)
    if len(shape) != 2:
        raise ValueError(f"logprobs must be [B, T], got {shape}")
    optional = tuple(n for n in ("entropy", "ref_logprobs", "teacher_logprobs") if getattr(inputs, n) is not None)
    for name in ("old_logprobs", "mask") + optional:
        other = tuple(getattr(inputs, name).shape)
        if other != shape:
            raise ValueError(f"{name} has shape {other}, logprobs has {shape}")
    for name in ("teacher_top_logprobs", "student_top_logprobs"):
        top = getattr(inputs, name)
        if top is not None and (top.dim() != 3 or tuple(top.shape[:2]) != shape):
            raise ValueError(f"{name} must be [B, T, K] with [B, T]={shape}, got {tuple(top.shape)}")
    if tuple(inputs.advantages.shape) != shape[:1]:
        raise ValueError(
            f"advantages must be [B]={shape[:1]} (one per sequence), "
            f"got {tuple(inputs.advantages.shape)}"
        )


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of `values` over mask == 1 as a detached 0-d tensor (0 if nothing is
    masked in), computed without a host sync. For metrics only: it uses the
    micro-batch's own token count."""
    picked = torch.where(mask > 0, values.detach(), torch.zeros_like(values))
    return picked.sum().double() / (mask > 0).sum().clamp_min(1)  # the division in float64, as on the host


def masked_extreme(values: torch.Tensor, mask: torch.Tensor, how: Literal["max", "min"]) -> torch.Tensor:
    """Max or min of `values` over mask == 1 as a detached 0-d tensor (0 if nothing
    is masked in). Masking by `where`, not boolean indexing, whose data-dependent
    shape would make the host wait for the accelerator."""
    if values.numel() == 0:
        return values.new_zeros(())
    on = mask > 0
    fill = -math.inf if how == "max" else math.inf
    picked = torch.where(on, values.detach(), torch.full_like(values, fill))
    extreme = picked.amax() if how == "max" else picked.amin()
    return torch.where(on.any(), extreme, torch.zeros_like(extreme))


def sequence_advantages(inputs: LossInputs) -> torch.Tensor:
    """Advantages as a detached [B, 1] column in the logprobs' dtype/device,
    ready to broadcast over tokens."""
    return inputs.advantages.detach().to(inputs.logprobs)[:, None]


def masked_log_ratio(inputs: LossInputs) -> torch.Tensor:
    """log pi_theta - log pi_old on action tokens, exactly 0 elsewhere.

    `torch.where` (not `* mask`) so that padding positions, whose old log-probs
    are arbitrary (even -inf), can never turn into inf * 0 = NaN in a ratio,
    a loss or a gradient.
    """
    diff = inputs.logprobs - inputs.old_logprobs.detach()
    return torch.where(inputs.mask > 0, diff, torch.zeros_like(diff))


def masked_reference_log_ratio(inputs: LossInputs) -> torch.Tensor:
    """log pi_theta - log pi_ref on action tokens, exactly 0 elsewhere."""
    if inputs.ref_logprobs is None:
        raise ValueError("this loss compares with the reference model, but inputs.ref_logprobs is None: "
                         "the loss must declare needs_reference_logprobs = True so the trainer keeps one")
    diff = inputs.logprobs - inputs.ref_logprobs.detach()
    return torch.where(inputs.mask > 0, diff, torch.zeros_like(diff))
