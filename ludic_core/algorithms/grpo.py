"""GRPO: group-normalised returns + a token-level clipped surrogate (+ optional KL and entropy).

With one optimiser step per fresh batch (`reuse` 1 x 1, the default) the
behaviour and current policies coincide, the ratio is exactly 1 and clipping
never fires, so GRPO reduces to REINFORCE with a group-mean baseline (and std
scaling). The clipped form acts once a batch is reused (`reuse`: several updates
per batch, `training/rollout_reuse.py`) or arrives stale (pipeline RL).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from ludic_core import losses
from ludic_core.algorithms.base import GroupAlgorithmBase, preset
from ludic_core.algorithms.rl_algorithm import RLAlgorithm
from ludic_core.credit import CreditAssigner, GroupNormalizedReturn, TurnNormalizedReturn

__all__ = ["GRPOConfig", "make_grpo"]


class GRPOConfig(GroupAlgorithmBase):
    """Group-normalised returns + token-level clipped surrogate (+ optional KL)."""

    type: Literal["grpo"] = "grpo"
    normalize_std: bool = Field(True, description="divide by the group std (Dr.GRPO sets False)")
    credit: Literal["episode", "turn"] = Field(
        "episode", description="episode: every turn gets its episode's group-relative return; turn: each turn's "
        "reward-to-go against its siblings' at the same turn index (multi-turn games; see README)")
    gamma: float = Field(1.0, ge=0.0, le=1.0, description="discount of the reward-to-go (credit=turn only)")
    clip_low: float = Field(0.2, ge=0.0, lt=1.0)
    clip_high: float = Field(0.2, ge=0.0, description="DAPO's clip-higher raises this (e.g. 0.28)")
    loss_reduction: Literal["token", "sequence"] = Field(
        "token", description="token: mean over all tokens of the batch (long replies weigh more, DAPO); "
        "sequence: mean per reply, then over replies (the GRPO paper)")
    sampler_correction: Literal["none", "token_tis", "token_mis", "seq_tis", "seq_mis"] = Field(
        "none", description="none: ratios against the sampler's log-probs; else ratios against the trainer's own "
        "and an importance weight trainer/sampler, truncated (tis) or masked (mis) above sampler_cap, per token "
        "or per sequence")
    sampler_cap: float = Field(2.0, gt=0.0, description="cap of the sampler importance weight")
    kl_coef: float = Field(0.0, ge=0.0, description="weight of a k3 KL penalty (0 = off)")
    kl_to: Literal["reference", "behaviour"] = Field(
        "reference", description="reference: the frozen model the run started from (kept by the trainer, bf16 on "
        "GPU); behaviour: the sampler's policy (0 in synchronous training: it bites only on stale batches)")
    entropy_coef: float = Field(0.0, ge=0.0)

    @model_validator(mode="after")
    def _gamma_needs_turn_credit(self) -> GRPOConfig:
        if self.gamma != 1.0 and self.credit != "turn":
            raise ValueError(f"gamma={self.gamma} discounts per-turn returns: it needs credit='turn'")
        if self.sampler_correction != "none" and self.reuse.updates > 1:
            raise ValueError(f"sampler_correction={self.sampler_correction!r} takes the ratio against the trainer's "
                             "current log-probs, which only equal the behaviour policy's on a batch's first update: "
                             "use it with reuse 1 x 1, or reuse with sampler_correction 'none'")
        return self

    def build(self) -> RLAlgorithm:
        pg = losses.ClippedSurrogateLoss(self.clip_low, self.clip_high, reduction=self.loss_reduction,
                                         sampler_correction=self.sampler_correction, sampler_cap=self.sampler_cap)
        terms: list[tuple[str, Any, float]] = [("pg", pg, 1.0)]
        if self.kl_coef > 0:
            terms.append(("kl", losses.TokenKLLoss(coef=self.kl_coef, to=self.kl_to), 1.0))
        if self.entropy_coef > 0:
            terms.append(("entropy", losses.EntropyBonus(coef=self.entropy_coef), 1.0))
        return self.assemble(self._credit(), pg if len(terms) == 1 else losses.CompositeLoss(terms))

    def _credit(self) -> CreditAssigner:
        if self.credit == "turn":
            return TurnNormalizedReturn(gamma=self.gamma, normalize_std=self.normalize_std,
                                        expected_group_size=self.group_size)
        return GroupNormalizedReturn(normalize_std=self.normalize_std, expected_group_size=self.group_size)


make_grpo = preset(GRPOConfig)
