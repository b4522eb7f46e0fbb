"""SFT as an algorithm: every completion token weighted 1, masked cross-entropy (behaviour cloning)."""

from __future__ import annotations

from typing import Literal

from ludic_core import losses
from ludic_core.algorithms.base import AlgorithmBase, preset
from ludic_core.algorithms.rl_algorithm import RLAlgorithm
from ludic_core.credit import ConstantCredit

__all__ = ["SFTConfig", "make_sft"]


class SFTConfig(AlgorithmBase):
    """Masked cross-entropy on the completion tokens (behaviour cloning)."""

    type: Literal["sft"] = "sft"

    def build(self) -> RLAlgorithm:
        return RLAlgorithm(self.type, ConstantCredit(1.0), losses.MaskedCrossEntropyLoss())


make_sft = preset(SFTConfig)
