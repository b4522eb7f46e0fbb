"""Algorithm presets: an algorithm is a credit assigner + a loss (+ filters).

The trainer knows nothing about REINFORCE vs GRPO: it optimises whatever loss
it is given on SAW items weighted by whatever credit was assigned. So adding an
algorithm means composing existing parts, not editing the trainer.

A note on GRPO here: with one optimiser step per fresh batch (`reuse` 1 x 1, the
default) the behaviour and current policies coincide, the ratio is exactly 1 and
clipping never fires, so GRPO reduces to REINFORCE with a group-mean baseline
(and std scaling). The clipped form acts once a batch is reused (`reuse`:
several updates per batch, `training/rollout_reuse.py`) or arrives stale
(pipeline RL).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ludic_core.batching.saw import SAWBatch, build_saw_batch
from ludic_core.config import (
    AlgorithmConfig,
    CISPOConfig,
    DynamicSampling,
    GRPOConfig,
    GSPOConfig,
    ReinforceBaselineConfig,
    RolloutReuse,
    ReinforceConfig,
    ScaleRLConfig,
    SFTConfig,
)
from ludic_core.credit import (
    ConstantCredit,
    CreditAssigner,
    EpisodicReturn,
    GroupNormalizedReturn,
    HybridNormalizedReturn,
    MonteCarloReturn,
    TurnNormalizedReturn,
    drop_zero_variance_groups,
)
from ludic_core.losses import (
    CISPOLoss,
    ClippedSurrogateLoss,
    CompositeLoss,
    EntropyBonus,
    GSPOLoss,
    Loss,
    MaskedCrossEntropyLoss,
    ReinforceBaselineLoss,
    ReinforceLoss,
    TokenKLLoss,
    declared,
)
from ludic_core.types import Rollout

__all__ = [
    "RLAlgorithm",
    "build_algorithm",
    "make_reinforce",
    "make_reinforce_baseline",
    "make_grpo",
    "make_gspo",
    "make_cispo",
    "make_sft",
    "make_scalerl",
]

RolloutFilter = Callable[[list[Rollout]], tuple[list[Rollout], int]]


@dataclass
class RLAlgorithm:
    name: str
    credit_assigner: CreditAssigner
    loss: Loss
    rollout_filters: list[RolloutFilter] = field(default_factory=list)
    #: read by `RolloutBatchSource`: draw until enough groups carry signal (DAPO)
    dynamic_sampling: DynamicSampling | None = None
    #: read by `Trainer`: optimiser updates per generated batch (mini-batches x epochs)
    reuse: RolloutReuse = field(default_factory=RolloutReuse)

    def __post_init__(self) -> None:
        declared(self.loss, "needs_entropy")
        declared(self.loss, "needs_actor_logprobs")
        if self.dynamic_sampling is not None and drop_zero_variance_groups not in self.rollout_filters:
            # train on the groups that carry signal, as DAPO does
            self.rollout_filters.append(drop_zero_variance_groups)

    @property
    def requires_actor_logprobs(self) -> bool:
        """Whether every item must carry the sampler's log-probs: the loss says
        (ratio and behaviour-KL terms read them), so no preset can get it wrong."""
        return declared(self.loss, "needs_actor_logprobs")

    @property
    def requires_reference(self) -> bool:
        """Whether the trainer must keep a frozen copy of the starting model (a KL-to-reference term)."""
        return bool(getattr(self.loss, "needs_reference_logprobs", False))

    def prepare(self, rollouts: Sequence[Rollout], *, max_seq_len: int | None = None,
                overlong: str = "error") -> SAWBatch:
        """Filter rollouts, assign credit, build SAW items (filter counts in meta)."""
        kept, dropped = list(rollouts), 0
        for f in self.rollout_filters:
            kept, n = f(kept)
            dropped += n
        weights = self.credit_assigner.compute(kept) if kept else []
        batch = build_saw_batch(kept, weights, max_seq_len=max_seq_len, overlong=overlong)  # type: ignore[arg-type]
        batch.meta["groups_filtered"] = dropped
        return batch


def make_reinforce(gamma: float = 1.0) -> RLAlgorithm:
    credit = MonteCarloReturn(gamma) if gamma < 1.0 else EpisodicReturn()
    return RLAlgorithm("reinforce", credit, ReinforceLoss())


def make_reinforce_baseline() -> RLAlgorithm:
    return RLAlgorithm("reinforce_baseline", EpisodicReturn(), ReinforceBaselineLoss())


def make_grpo(*, group_size: int | None = None, normalize_std: bool = True, clip_low: float = 0.2,
              clip_high: float = 0.2, kl_coef: float = 0.0, kl_to: str = "reference", entropy_coef: float = 0.0,
              dynamic_sampling: DynamicSampling | None = None, sampler_correction: str = "none",
              sampler_cap: float = 2.0, credit: str = "episode", gamma: float = 1.0,
              loss_reduction: str = "token", reuse: RolloutReuse | None = None) -> RLAlgorithm:
    pg = ClippedSurrogateLoss(clip_low, clip_high, reduction=loss_reduction,  # type: ignore[arg-type]
                              sampler_correction=sampler_correction,  # type: ignore[arg-type]
                              sampler_cap=sampler_cap)
    terms: list[tuple[str, Any, float]] = [("pg", pg, 1.0)]
    if kl_coef > 0:
        terms.append(("kl", TokenKLLoss(coef=kl_coef, to=kl_to), 1.0))  # type: ignore[arg-type]
    if entropy_coef > 0:
        terms.append(("entropy", EntropyBonus(coef=entropy_coef), 1.0))
    loss = terms[0][1] if len(terms) == 1 else CompositeLoss(terms)
    if credit == "turn":
        assigner: CreditAssigner = TurnNormalizedReturn(gamma=gamma, normalize_std=normalize_std,
                                                        expected_group_size=group_size)
    elif credit == "episode":
        if gamma != 1.0:
            raise ValueError(f"gamma={gamma} discounts per-turn returns: it needs credit='turn'")
        assigner = GroupNormalizedReturn(normalize_std=normalize_std, expected_group_size=group_size)
    else:
        raise ValueError(f"credit must be 'episode' or 'turn', got {credit!r}")
    if reuse is not None and reuse.updates > 1 and sampler_correction != "none":
        raise ValueError("sampler_correction takes the ratio against the trainer's current log-probs: it cannot "
                         "be combined with rollout reuse (several updates per batch)")
    return RLAlgorithm("grpo", assigner, loss, dynamic_sampling=dynamic_sampling, reuse=reuse or RolloutReuse())


def make_gspo(*, group_size: int | None = None, clip_low: float = 3e-4, clip_high: float = 4e-4,
              dynamic_sampling: DynamicSampling | None = None, reuse: RolloutReuse | None = None) -> RLAlgorithm:
    credit = GroupNormalizedReturn(expected_group_size=group_size)
    return RLAlgorithm("gspo", credit, GSPOLoss(clip_low, clip_high), dynamic_sampling=dynamic_sampling,
                       reuse=reuse or RolloutReuse())


def make_cispo(*, group_size: int | None = None, eps_high: float = 2.0,
               dynamic_sampling: DynamicSampling | None = None, reuse: RolloutReuse | None = None) -> RLAlgorithm:
    credit = GroupNormalizedReturn(expected_group_size=group_size)
    return RLAlgorithm("cispo", credit, CISPOLoss(eps_high=eps_high), dynamic_sampling=dynamic_sampling,
                       reuse=reuse or RolloutReuse())


def make_sft() -> RLAlgorithm:
    return RLAlgorithm("sft", ConstantCredit(1.0), MaskedCrossEntropyLoss())


def make_scalerl(*, group_size: int | None = None, eps_high: float = 2.0,
                 dynamic_sampling: DynamicSampling | None = None, reuse: RolloutReuse | None = None) -> RLAlgorithm:
    credit = HybridNormalizedReturn()
    if group_size is not None:
        credit.expected_group_size = group_size  # type: ignore[attr-defined]
    return RLAlgorithm("scalerl", credit, CISPOLoss(eps_high=eps_high),
                       rollout_filters=[drop_zero_variance_groups], dynamic_sampling=dynamic_sampling,
                       reuse=reuse or RolloutReuse())


def build_algorithm(cfg: AlgorithmConfig) -> RLAlgorithm:
    """The torch-side algorithm for a torch-free config."""
    if isinstance(cfg, ReinforceConfig):
        return make_reinforce(cfg.gamma)
    if isinstance(cfg, ReinforceBaselineConfig):
        return make_reinforce_baseline()
    if isinstance(cfg, GRPOConfig):
        return make_grpo(group_size=cfg.group_size, normalize_std=cfg.normalize_std, clip_low=cfg.clip_low,
                         clip_high=cfg.clip_high, kl_coef=cfg.kl_coef, kl_to=cfg.kl_to, entropy_coef=cfg.entropy_coef,
                         dynamic_sampling=cfg.dynamic_sampling, sampler_correction=cfg.sampler_correction,
                         sampler_cap=cfg.sampler_cap, credit=cfg.credit, gamma=cfg.gamma,
                         loss_reduction=cfg.loss_reduction, reuse=cfg.reuse)
    if isinstance(cfg, GSPOConfig):
        return make_gspo(group_size=cfg.group_size, clip_low=cfg.clip_low, clip_high=cfg.clip_high,
                         dynamic_sampling=cfg.dynamic_sampling, reuse=cfg.reuse)
    if isinstance(cfg, CISPOConfig):
        return make_cispo(group_size=cfg.group_size, eps_high=cfg.eps_high, dynamic_sampling=cfg.dynamic_sampling,
                          reuse=cfg.reuse)
    if isinstance(cfg, SFTConfig):
        return make_sft()
    if isinstance(cfg, ScaleRLConfig):
        return make_scalerl(group_size=cfg.group_size, eps_high=cfg.eps_high, dynamic_sampling=cfg.dynamic_sampling,
                            reuse=cfg.reuse)
    raise TypeError(f"unknown algorithm config {type(cfg).__name__}")
