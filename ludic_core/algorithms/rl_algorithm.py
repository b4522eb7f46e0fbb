"""The built algorithm: a credit assigner + a loss (+ filters, groups), as the trainer sees it.

The trainer knows nothing about REINFORCE vs GRPO: it optimises whatever loss
it is given on SAW items weighted by whatever credit was assigned. So adding an
algorithm means composing existing parts, not editing the trainer. An
algorithm's config (one module each in this package) builds one of these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Literal, Sequence

from ludic_core import losses
from ludic_core.algorithms.reuse import RolloutReuse
from ludic_core.batching.saw import SAWBatch, build_saw_batch
from ludic_core.credit import CreditAssigner, RolloutFilter
from ludic_core.losses.flags import teacher_top_k, wants_reference, wants_teacher
from ludic_core.rollout.strategies import GRPORequestStrategy, IdentityStrategy, RequestStrategy
from ludic_core.types import Rollout

if TYPE_CHECKING:
    from ludic_core.algorithms.dynamic_sampling import DynamicSampling
    from ludic_core.losses import Loss

__all__ = ["RLAlgorithm", "RolloutFilter", "samples_per_prompt"]


def samples_per_prompt(name: str, group_size: int | None) -> int:
    """`group_size` of a group algorithm, which must state it (the samples it compares)."""
    if group_size is None:
        raise ValueError(f"algorithm {name!r} compares samples of one prompt: set its group_size")
    return group_size


@dataclass
class RLAlgorithm:
    name: str
    credit_assigner: CreditAssigner
    loss: Loss
    rollout_filters: list[RolloutFilter] = field(default_factory=list)
    #: read by `draw`: draw until enough groups carry signal (DAPO); the config adds its filter
    dynamic_sampling: DynamicSampling | None = None
    #: read by `Trainer`: optimiser updates per generated batch (mini-batches x epochs)
    reuse: RolloutReuse = field(default_factory=RolloutReuse)
    #: episodes per prompt, compared by group-relative credit (1: no groups; None: a group
    #: algorithm whose size was not stated, refused when rollouts are requested)
    group_size: int | None = 1

    def __post_init__(self) -> None:
        losses.declared(self.loss, "needs_entropy")
        losses.declared(self.loss, "needs_actor_logprobs")

    @property
    def requires_actor_logprobs(self) -> bool:
        """Whether every item must carry the sampler's log-probs: the loss says
        (ratio and behaviour-KL terms read them), so no preset can get it wrong."""
        return losses.declared(self.loss, "needs_actor_logprobs")

    @property
    def requires_reference(self) -> bool:
        """Whether the trainer must keep a frozen copy of the starting model (a KL-to-reference term)."""
        return wants_reference(self.loss)

    @property
    def requires_teacher(self) -> bool:
        """Whether the trainer must score every item with a distillation teacher (`Trainer(teacher=...)`)."""
        return wants_teacher(self.loss)

    @property
    def teacher_top_k(self) -> int | None:
        """K when the loss reads the teacher's K likeliest tokens at each position (top-k distillation)."""
        return teacher_top_k(self.loss)

    def request_strategy(self, seed: int | None = None) -> RequestStrategy:
        """How requests become episodes: `group_size` samples of each prompt sharing a group
        id (GRPO groups, seeded by `seed`), or each request once without groups."""
        size = samples_per_prompt(self.name, self.group_size)
        return GRPORequestStrategy(size, seed=seed) if size > 1 else IdentityStrategy()

    def draw(self, draw_batch: Callable[[], list[Rollout]]) -> tuple[list[Rollout], dict[str, float]]:
        """One step's rollouts from `draw_batch` (one request batch each call) and their
        metrics: one batch, or with dynamic sampling as many as it takes (`draws`)."""
        if self.dynamic_sampling is None:
            return draw_batch(), {}
        rollouts, draws = self.dynamic_sampling.draw(draw_batch)
        return rollouts, {"draws": float(draws)}

    def prepare(self, rollouts: Sequence[Rollout], *, max_seq_len: int | None = None,
                overlong: Literal["error", "drop"] = "error") -> SAWBatch:
        """Filter rollouts, assign credit, build SAW items (filter counts in meta)."""
        kept, dropped = list(rollouts), 0
        for f in self.rollout_filters:
            kept, n = f(kept)
            dropped += n
        weights = self.credit_assigner.compute(kept) if kept else []
        batch = build_saw_batch(kept, weights, max_seq_len=max_seq_len, overlong=overlong)
        batch.meta["groups_filtered"] = dropped
        return batch
