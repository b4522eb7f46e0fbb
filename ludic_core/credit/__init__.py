"""Credit assignment: one scalar weight per step of each rollout."""

from ludic_core.credit.base import CreditAssigner, check_rewards
from ludic_core.credit.constant import ConstantCredit
from ludic_core.credit.episodic import EpisodicReturn
from ludic_core.credit.filters import RolloutFilter, drop_zero_variance_groups, signal_groups
from ludic_core.credit.group_norm import GroupNormalizedReturn
from ludic_core.credit.groups import group_indices
from ludic_core.credit.hybrid_norm import HybridNormalizedReturn
from ludic_core.credit.monte_carlo import MonteCarloReturn, discounted_returns
from ludic_core.credit.per_step import PerStepReward
from ludic_core.credit.turn_norm import TurnNormalizedReturn

__all__ = [
    "CreditAssigner",
    "check_rewards",
    "ConstantCredit",
    "EpisodicReturn",
    "GroupNormalizedReturn",
    "HybridNormalizedReturn",
    "MonteCarloReturn",
    "PerStepReward",
    "RolloutFilter",
    "TurnNormalizedReturn",
    "discounted_returns",
    "drop_zero_variance_groups",
    "group_indices",
    "signal_groups",
]
