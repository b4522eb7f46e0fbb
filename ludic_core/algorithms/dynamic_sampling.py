"""DAPO's dynamic sampling, in one place: its settings, the draws of one step and the groups it trains on.

A group whose episodes all end with the same return has zero group-relative
advantage and teaches nothing (most groups, once a policy is good at a game). So
a step draws request batches until enough groups carry a return spread, and the
groups without one are filtered out before credit (`drop_zero_variance_groups`,
the filter ScaleRL applies always). A group algorithm's config holds it
(`dynamic_sampling`); the built `RLAlgorithm` draws through it.
"""

from __future__ import annotations

from typing import Callable, Sequence

from ludic_core.bounds import MAX_BATCH, MAX_DRAWS, bounded
from ludic_core.credit.filters import RolloutFilter, drop_zero_variance_groups, signal_groups
from ludic_core.frozen import FrozenModel
from ludic_core.types import Rollout

__all__ = ["DynamicSampling"]


class DynamicSampling(FrozenModel):
    """DAPO's dynamic sampling. Each step draws request batches until it holds
    `min_groups` groups with a return spread, or `max_draws` batches were drawn,
    and trains on those groups only. The step's metrics count both."""

    min_groups: int = bounded(ge=1, le=MAX_BATCH, description="groups with a return spread each step needs")
    max_draws: int = bounded(4, ge=1, le=MAX_DRAWS,
                             description="request batches drawn at most per step (then train on what there is)")

    def draw(self, draw_batch: Callable[[], list[Rollout]]) -> tuple[list[Rollout], int]:
        """(every rollout drawn, how many request batches): batches until `min_groups` groups
        of the episodes that did not fail carry a return spread, or `max_draws` were drawn."""
        rollouts, draws = draw_batch(), 1
        while signal_groups([r for r in rollouts if not r.failed]) < self.min_groups and draws < self.max_draws:
            rollouts += draw_batch()
            draws += 1
        return rollouts, draws

    def filters(self, filters: Sequence[RolloutFilter]) -> list[RolloutFilter]:
        """`filters`, then the groups without a spread dropped (once): train on those that carry signal."""
        return [*filters, *([] if drop_zero_variance_groups in filters else [drop_zero_variance_groups])]
