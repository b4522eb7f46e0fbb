"""Token-budget micro-batching: length-sorted packing with little padding.

Sorting items by length before cutting micro-batches puts similar lengths
together, so padding waste stays small; the budget bounds the padded tokens
(rows x longest row) of each micro-batch, hence peak activation memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from ludic_core.batching.saw import SAWItem

__all__ = ["MicroBatch", "collate_micro_batches", "padding_waste"]


@dataclass
class MicroBatch:
    input_ids: torch.Tensor  # [B, T] long, right-padded
    attention_mask: torch.Tensor  # [B, T] long
    action_mask: torch.Tensor  # [B, T] float
    actor_logprobs: torch.Tensor  # [B, T] float (zeros where unknown)
    weights: torch.Tensor  # [B] float
    meta: list[dict[str, Any]] = field(default_factory=list)

    @property
    def real_tokens(self) -> int:
        return int(self.attention_mask.sum())

    @property
    def padded_tokens(self) -> int:
        return int(self.input_ids.numel())

    @property
    def action_tokens(self) -> float:
        # position 0 is never predicted, so it is never an action token
        return float(self.action_mask[:, 1:].sum())


def _pack(items: Sequence[SAWItem], pad_id: int) -> MicroBatch:
    width = max(len(i) for i in items)
    n = len(items)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    attn = torch.zeros((n, width), dtype=torch.long)
    act = torch.zeros((n, width), dtype=torch.float32)
    lps = torch.zeros((n, width), dtype=torch.float32)
    for row, it in enumerate(items):
        k = len(it)
        ids[row, :k] = torch.tensor(it.input_ids, dtype=torch.long)
        attn[row, :k] = torch.tensor(it.attention_mask, dtype=torch.long)
        act[row, :k] = torch.tensor(it.action_mask, dtype=torch.float32)
        if it.actor_logprobs is not None:
            lps[row, :k] = torch.tensor(it.actor_logprobs, dtype=torch.float32)
    weights = torch.tensor([it.weight for it in items], dtype=torch.float32)
    return MicroBatch(ids, attn, act, lps, weights, [it.meta for it in items])


def collate_micro_batches(
    items: Sequence[SAWItem], *, micro_token_budget: int, pad_id: int
) -> list[MicroBatch]:
    """Cut `items` into micro-batches of at most `micro_token_budget` padded tokens.

    An item longer than the budget gets a micro-batch of its own (the budget is a
    packing target; `max_seq_len` is what bounds single items).
    """
    if micro_token_budget < 1:
        raise ValueError(f"micro_token_budget must be >= 1, got {micro_token_budget}")
    order = sorted(items, key=len, reverse=True)
    batches: list[list[SAWItem]] = []
    current: list[SAWItem] = []
    for it in order:
        width = len(current[0]) if current else len(it)  # longest first: row 0 sets the width
        if current and (len(current) + 1) * width > micro_token_budget:
            batches.append(current)
            current = []
        current.append(it)
    if current:
        batches.append(current)
    return [_pack(b, pad_id) for b in batches]


def padding_waste(batches: Sequence[MicroBatch]) -> float:
    """Fraction of computed token positions that are padding."""
    padded = sum(b.padded_tokens for b in batches)
    return 0.0 if padded == 0 else 1.0 - sum(b.real_tokens for b in batches) / padded
