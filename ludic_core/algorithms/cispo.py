"""CISPO: group-normalised returns + clipped, detached importance weights (MiniMax-M1).

It clips the importance weight, not the update: every token keeps a gradient,
where PPO-style clipping drops the tokens whose ratio left the trust region.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ludic_core import losses
from ludic_core.algorithms.base import GroupAlgorithmBase, preset
from ludic_core.algorithms.rl_algorithm import RLAlgorithm
from ludic_core.credit import GroupNormalizedReturn

__all__ = ["CISPOConfig", "make_cispo"]


class CISPOConfig(GroupAlgorithmBase):
    """Group-normalised returns + clipped, detached importance weights (CISPO)."""

    type: Literal["cispo"] = "cispo"
    eps_high: float = Field(2.0, gt=0.0, description="IS weight capped at 1 + eps_high")

    def build(self) -> RLAlgorithm:
        credit = GroupNormalizedReturn(expected_group_size=self.group_size)
        return self.assemble(credit, losses.CISPOLoss(eps_high=self.eps_high))


make_cispo = preset(CISPOConfig)
