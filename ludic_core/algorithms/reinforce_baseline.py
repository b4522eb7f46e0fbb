"""REINFORCE with a baseline: the batch-mean return is subtracted, same expectation, less variance."""

from __future__ import annotations

from typing import Literal

from ludic_core import losses
from ludic_core.algorithms.base import AlgorithmBase, preset
from ludic_core.algorithms.rl_algorithm import RLAlgorithm
from ludic_core.credit import EpisodicReturn

__all__ = ["ReinforceBaselineConfig", "make_reinforce_baseline"]


class ReinforceBaselineConfig(AlgorithmBase):
    """REINFORCE minus the batch-mean return: same expectation, less variance."""

    type: Literal["reinforce_baseline"] = "reinforce_baseline"

    def build(self) -> RLAlgorithm:
        # the loss subtracts the step's mean weight (`batch_mean_advantage`): the credit stays the raw return
        return RLAlgorithm(self.type, EpisodicReturn(), losses.ReinforceBaselineLoss())


make_reinforce_baseline = preset(ReinforceBaselineConfig)
