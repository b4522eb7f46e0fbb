"""ScaleRL's recipe: the CISPO loss, group-mean centring scaled by the batch's std, and the
groups without a return spread filtered out before credit (they carry no signal)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ludic_core import losses
from ludic_core.algorithms.base import GroupAlgorithmBase, preset
from ludic_core.algorithms.rl_algorithm import RLAlgorithm
from ludic_core.credit import HybridNormalizedReturn, drop_zero_variance_groups

__all__ = ["ScaleRLConfig", "make_scalerl"]


class ScaleRLConfig(GroupAlgorithmBase):
    """ScaleRL recipe: CISPO loss, group-mean centring with batch-level std, and
    zero-variance groups filtered out (they carry no signal)."""

    type: Literal["scalerl"] = "scalerl"
    eps_high: float = Field(2.0, gt=0.0)

    def build(self) -> RLAlgorithm:
        credit = HybridNormalizedReturn(expected_group_size=self.group_size)
        return self.assemble(credit, losses.CISPOLoss(eps_high=self.eps_high), filters=[drop_zero_variance_groups])


make_scalerl = preset(ScaleRLConfig)
