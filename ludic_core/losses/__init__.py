"""Loss terms: pure functions of the per-token tensors of one forward pass.

Exports are resolved lazily (PEP 562): every term needs torch, but an algorithm
config, which must load without it, names its loss through this package
(`losses.ClippedSurrogateLoss`) and builds it only when the algorithm is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ludic_core.lazy import lazy_exports

if TYPE_CHECKING:
    from ludic_core.losses.base import (
        Loss,
        LossInputs,
        LossOutputs,
        Reduction,
        check_inputs,
        declared,
        is_inert,
        masked_extreme,
        masked_log_ratio,
        masked_mean,
        masked_reference_log_ratio,
        reduce_tokens,
        sequence_advantages,
        wants_teacher,
    )
    from ludic_core.losses.cispo import CISPOLoss
    from ludic_core.losses.clipped_surrogate import ClippedSurrogateLoss
    from ludic_core.losses.composite import CompositeLoss
    from ludic_core.losses.cross_entropy import MaskedCrossEntropyLoss
    from ludic_core.losses.distillation import (
        OnPolicyDistillLoss,
        TopKDistillLoss,
        distillation_advantages,
        top_k_forward_kl,
        top_k_reverse_kl,
    )
    from ludic_core.losses.entropy import EntropyBonus, token_entropy
    from ludic_core.losses.gspo import GSPOLoss
    from ludic_core.losses.kl import TokenKLLoss
    from ludic_core.losses.linear_logprobs import linear_token_logprobs
    from ludic_core.losses.logprobs import token_logprobs
    from ludic_core.losses.reinforce import ReinforceLoss
    from ludic_core.losses.reinforce_baseline import ReinforceBaselineLoss

__all__ = [
    "Loss",
    "LossInputs",
    "LossOutputs",
    "Reduction",
    "declared",
    "is_inert",
    "masked_extreme",
    "reduce_tokens",
    "check_inputs",
    "masked_log_ratio",
    "masked_reference_log_ratio",
    "masked_mean",
    "sequence_advantages",
    "wants_teacher",
    "CISPOLoss",
    "ClippedSurrogateLoss",
    "CompositeLoss",
    "EntropyBonus",
    "GSPOLoss",
    "MaskedCrossEntropyLoss",
    "OnPolicyDistillLoss",
    "ReinforceBaselineLoss",
    "ReinforceLoss",
    "TokenKLLoss",
    "TopKDistillLoss",
    "distillation_advantages",
    "top_k_reverse_kl",
    "linear_token_logprobs",
    "token_entropy",
    "token_logprobs",
]

_SOURCE = {
    **dict.fromkeys(["Loss", "LossInputs", "LossOutputs", "Reduction", "declared", "is_inert", "masked_extreme",
                     "reduce_tokens", "check_inputs", "masked_log_ratio", "masked_reference_log_ratio", "masked_mean",
                     "sequence_advantages", "wants_teacher"], "base"),
    "CISPOLoss": "cispo",
    "ClippedSurrogateLoss": "clipped_surrogate",
    "CompositeLoss": "composite",
    "EntropyBonus": "entropy",
    "token_entropy": "entropy",
    "GSPOLoss": "gspo",
    "MaskedCrossEntropyLoss": "cross_entropy",
    "OnPolicyDistillLoss": "distillation",
    "distillation_advantages": "distillation",
    "TopKDistillLoss": "distillation",
    "top_k_reverse_kl": "distillation",
    "top_k_forward_kl": "distillation",
    "ReinforceBaselineLoss": "reinforce_baseline",
    "ReinforceLoss": "reinforce",
    "TokenKLLoss": "kl",
    "linear_token_logprobs": "linear_logprobs",
    "token_logprobs": "logprobs",
}

__getattr__, __dir__ = lazy_exports(__name__, _SOURCE)
