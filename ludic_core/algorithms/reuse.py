"""Rollout reuse: how many optimiser updates one generated batch makes (the trainer's side:
`training/rollout_reuse.py`)."""

from __future__ import annotations

from ludic_core.bounds import MAX_BATCH, MAX_DRAWS, bounded
from ludic_core.frozen import FrozenModel

__all__ = ["RolloutReuse"]


class RolloutReuse(FrozenModel):
    """Several optimiser updates per generated batch (`training/rollout_reuse.py`): `epochs` passes
    over it, each cut into `mini_batches` updates, against the sampler's log-probs. From the second
    update on the ratio departs from 1 and clipping acts. Each update is one policy version, so a
    batch makes `mini_batches x epochs` versions: `trainer.max_lag` counts them."""

    mini_batches: int = bounded(1, ge=1, le=MAX_BATCH, description="optimiser updates per pass over a batch "
                                                                   "(a group stays in one mini-batch)")
    epochs: int = bounded(1, ge=1, le=MAX_DRAWS, description="passes over each generated batch")

    @property
    def updates(self) -> int:
        """Optimiser updates (policy versions) per generated batch."""
        return self.mini_batches * self.epochs
