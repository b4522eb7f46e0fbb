"""REINFORCE: the return itself is the weight of every token that earned it (no baseline).

With `gamma` < 1 each turn is weighted by its discounted reward-to-go instead of
the whole episode's return: a turn is not credited for rewards that came before it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ludic_core import losses
from ludic_core.algorithms.base import AlgorithmBase, preset
from ludic_core.algorithms.rl_algorithm import RLAlgorithm
from ludic_core.credit import EpisodicReturn, MonteCarloReturn

__all__ = ["ReinforceConfig", "make_reinforce"]


class ReinforceConfig(AlgorithmBase):
    """Plain REINFORCE on the episode return (no baseline)."""

    type: Literal["reinforce"] = "reinforce"
    gamma: float = Field(1.0, ge=0.0, le=1.0, description="discount for per-step returns")

    def build(self) -> RLAlgorithm:
        credit = MonteCarloReturn(self.gamma) if self.gamma < 1.0 else EpisodicReturn()
        return RLAlgorithm(self.type, credit, losses.ReinforceLoss())


make_reinforce = preset(ReinforceConfig)
