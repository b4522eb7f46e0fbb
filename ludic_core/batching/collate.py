"""Token-budget micro-batching: length-sorted packing with little padding.

Sorting items by length puts similar lengths together; the cut points are then
chosen to minimise padding (plus a per-forward cost), and the budget bounds the
padded tokens (rows x longest row) of each micro-batch, hence peak memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import torch

from ludic_core.batching.saw import SAWItem

if TYPE_CHECKING:
    from ludic_core.batching.packing import PackedRows

__all__ = ["MicroBatch", "collate_micro_batches", "padding_waste", "sampling_temperature"]


@dataclass
class MicroBatch:
    input_ids: torch.Tensor  # [B, T] long, right-padded
    attention_mask: torch.Tensor  # [B, T] long
    action_mask: torch.Tensor  # [B, T] float
    actor_logprobs: torch.Tensor  # [B, T] float (zeros where unknown)
    weights: torch.Tensor  # [B] float
    meta: list[dict[str, Any]] = field(default_factory=list)
    # [B] temperature each row was sampled at (1.0 when unknown or greedy), so
    # the trainer's log-probs are of the same distribution as actor_logprobs
    temperatures: torch.Tensor | None = None
    # set by `pack_micro_batches`: the rows the model runs, items end to end
    packed: "PackedRows | None" = None
    # [B, T] a distillation teacher's log-probs, aligned like actor_logprobs (None: no teacher)
    teacher_logprobs: torch.Tensor | None = None
    # [B, T, K] top-k distillation: the teacher's K likeliest ids at each position and their log-probs
    teacher_top_ids: torch.Tensor | None = None
    teacher_top_logprobs: torch.Tensor | None = None

    @property
    def real_tokens(self) -> int:
        return int(self.attention_mask.sum())

    @property
    def padded_tokens(self) -> int:
        """Positions the model computes."""
        return int((self.packed.input_ids if self.packed is not None else self.input_ids).numel())

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
    temps = torch.tensor([sampling_temperature(it.meta) for it in items], dtype=torch.float32)
    teacher = None
    if any(it.teacher_logprobs is not None for it in items):
        teacher = torch.zeros((n, width), dtype=torch.float32)
        for row, it in enumerate(items):
            if it.teacher_logprobs is None:
                raise ValueError(f"item {it.meta} has no teacher log-probs beside items that have them")
            teacher[row, :len(it)] = torch.tensor(it.teacher_logprobs, dtype=torch.float32)
    top_ids, top_lps = _top_k(items, width)
    return MicroBatch(ids, attn, act, lps, weights, [it.meta for it in items], temps, teacher_logprobs=teacher,
                      teacher_top_ids=top_ids, teacher_top_logprobs=top_lps)


def _top_k(items: Sequence[SAWItem], width: int) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The items' teacher top-k ids and log-probs as [B, width, K] tensors (zeros past an item's end)."""
    if all(it.teacher_top_ids is None for it in items):
        return None, None
    if any(it.teacher_top_ids is None for it in items):
        bad = next(it for it in items if it.teacher_top_ids is None)
        raise ValueError(f"item {bad.meta} has no teacher top-k beside items that have them")
    k = len(items[0].teacher_top_ids[0]) if len(items[0]) else 0  # type: ignore[index]
    ids = torch.zeros((len(items), width, k), dtype=torch.long)
    lps = torch.zeros((len(items), width, k), dtype=torch.float32)
    for row, it in enumerate(items):
        assert it.teacher_top_ids is not None and it.teacher_top_logprobs is not None
        if len(it) and len(it.teacher_top_ids[0]) != k:
            raise ValueError(f"item {it.meta} has the teacher's top {len(it.teacher_top_ids[0])} beside items with "
                             f"its top {k}")
        ids[row, :len(it)] = torch.tensor(it.teacher_top_ids, dtype=torch.long)
        lps[row, :len(it)] = torch.tensor(it.teacher_top_logprobs, dtype=torch.float32)
    return ids, lps


def sampling_temperature(meta: dict[str, Any]) -> float:
    """The temperature of an item's log-probs: its sampling temperature, 1 when unknown; greedy (0)
    rows report log-probs at temperature 1, like the samplers."""
    t = meta.get("sampling_temperature")
    return float(t) if t is not None and t > 0 else 1.0


def collate_micro_batches(
    items: Sequence[SAWItem], *, micro_token_budget: int, pad_id: int, batch_overhead_tokens: int = 256
) -> list[MicroBatch]:
    """Cut `items` into micro-batches of at most `micro_token_budget` padded tokens.

    Items are sorted by length (longest first) and cut where it minimises padded
    tokens plus `batch_overhead_tokens` per micro-batch (a forward pass has a
    fixed cost), by dynamic programming over the sorted lengths. An item longer
    than the budget gets a micro-batch of its own (`max_seq_len` is what bounds
    single items).
    """
    if micro_token_budget < 1:
        raise ValueError(f"micro_token_budget must be >= 1, got {micro_token_budget}")
    order = sorted(items, key=len, reverse=True)
    cuts = _best_cuts([len(i) for i in order], micro_token_budget, batch_overhead_tokens)
    return [_pack(order[a:b], pad_id) for a, b in cuts]


def _best_cuts(lengths: list[int], budget: int, overhead: int) -> list[tuple[int, int]]:
    """Optimal contiguous split of descending `lengths`: cost[j] = min over i of
    cost[i] + overhead + (j - i) * lengths[i], subject to (j - i) * lengths[i] <= budget."""
    n = len(lengths)
    best = [0.0] + [float("inf")] * n
    back = [0] * (n + 1)
    for i in range(n):  # a micro-batch starting at item i has width lengths[i]
        if best[i] == float("inf"):
            continue
        rows = max(1, budget // max(lengths[i], 1))
        for j in range(i + 1, min(n, i + rows) + 1):
            cost = best[i] + overhead + (j - i) * lengths[i]
            if cost < best[j]:
                best[j], back[j] = cost, i
    cuts, j = [], n
    while j > 0:
        cuts.append((back[j], j))
        j = back[j]
    return cuts[::-1]


def padding_waste(batches: Sequence[MicroBatch]) -> float:
    """Fraction of computed token positions that are padding."""
    padded = sum(b.padded_tokens for b in batches)
    return 0.0 if padded == 0 else 1.0 - sum(b.real_tokens for b in batches) / padded
