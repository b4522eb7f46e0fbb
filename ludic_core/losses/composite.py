"""`CompositeLoss`: a weighted sum of loss terms sharing ONE forward pass.

Every term sees the same `LossInputs`, so e.g. a clipped surrogate plus a KL
penalty plus an entropy bonus costs one model call. Each term already
normalises by the step totals, so the weighted sum stays correctly normalised.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ludic_core.losses.base import Loss, LossInputs, LossOutputs, declared, is_inert, wants_reference, wants_teacher
from ludic_core.losses.flags import teacher_top_k

__all__ = ["CompositeLoss"]


@dataclass
class CompositeLoss:
    """loss = sum(weight * term(inputs).loss) over `terms` = [(name, loss, weight)].

    Metrics: every term's metric as "<name>/<metric>" plus "<name>/loss" (the
    term's unweighted loss). `needs_entropy`, `needs_actor_logprobs`,
    `needs_reference_logprobs` and `needs_teacher_logprobs` are true if any term needs it;
    `teacher_top_k` is the terms' one K (two different Ks are refused);
    `inert_at_zero_advantage` only if every term is (a KL or entropy term is not).
    """

    terms: list[tuple[str, Loss, float]]
    needs_entropy: bool = field(init=False)
    needs_actor_logprobs: bool = field(init=False)
    needs_reference_logprobs: bool = field(init=False)
    needs_teacher_logprobs: bool = field(init=False)
    teacher_top_k: int | None = field(init=False)
    inert_at_zero_advantage: bool = field(init=False)

    def __post_init__(self) -> None:
        if not self.terms:
            raise ValueError("CompositeLoss needs at least one term")
        names = [name for name, _, _ in self.terms]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate term names {dupes}: metric keys would collide")
        self.needs_entropy = any(declared(term, "needs_entropy") for _, term, _ in self.terms)
        self.needs_actor_logprobs = any(declared(term, "needs_actor_logprobs") for _, term, _ in self.terms)
        self.needs_reference_logprobs = any(wants_reference(term) for _, term, _ in self.terms)
        self.needs_teacher_logprobs = any(wants_teacher(term) for _, term, _ in self.terms)
        ks = {k for _, term, _ in self.terms if (k := teacher_top_k(term)) is not None}
        if len(ks) > 1:
            raise ValueError(f"terms read the teacher's top K for different K {sorted(ks)}: one scoring serves "
                             "them all")
        self.teacher_top_k = ks.pop() if ks else None
        self.inert_at_zero_advantage = all(is_inert(term) for _, term, _ in self.terms)

    def __call__(self, inputs: LossInputs) -> LossOutputs:
        total = None
        metrics: dict[str, torch.Tensor | float] = {}
        for name, term, weight in self.terms:
            out = term(inputs)
            total = weight * out.loss if total is None else total + weight * out.loss
            metrics[f"{name}/loss"] = out.loss.detach()
            metrics.update({f"{name}/{k}": v for k, v in out.metrics.items()})
        assert total is not None  # __post_init__ refuses a loss without terms
        return LossOutputs(loss=total, metrics=metrics)
