"""GSPO: group-normalised returns + a clipped ratio of whole sequences (the length-normalised
sequence likelihood ratio), so one token's ratio cannot swing its reply's update."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ludic_core import losses
from ludic_core.algorithms.base import GroupAlgorithmBase, preset
from ludic_core.algorithms.rl_algorithm import RLAlgorithm
from ludic_core.credit import GroupNormalizedReturn

__all__ = ["GSPOConfig", "make_gspo"]


class GSPOConfig(GroupAlgorithmBase):
    """Group-normalised returns + sequence-level clipped ratio (GSPO)."""

    type: Literal["gspo"] = "gspo"
    clip_low: float = Field(3e-4, ge=0.0, lt=1.0)
    clip_high: float = Field(4e-4, ge=0.0)

    def build(self) -> RLAlgorithm:
        credit = GroupNormalizedReturn(expected_group_size=self.group_size)
        return self.assemble(credit, losses.GSPOLoss(self.clip_low, self.clip_high))


make_gspo = preset(GSPOConfig)
