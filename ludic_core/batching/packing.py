"""Packed micro-batches: several items per row, no padding between them.

Length-sorted cutting (`collate_micro_batches`) still pads each row to the
longest of its micro-batch, or cuts more, smaller micro-batches to avoid it.
Here items are laid end to end in rows as wide as the micro-batch's longest
item (first fit, longest first), and each item's `position_ids` restart at 0. An HF model given
`position_ids` and no `attention_mask` reads the restarts as document
boundaries and masks attention block-diagonally (`transformers.masking_utils`:
a dense mask under sdpa, a block-sparse one under `flex_attention`), so each
item sees only itself: the same log-probs as its padded row. The trainer checks
that once per model and falls back to padding where it does not hold.

The micro-batch keeps its per-item view (action mask, actor log-probs, weights,
one row per item) for the losses; `PackedRows.index` maps the packed rows'
log-probs back onto it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from ludic_core.batching.collate import MicroBatch, _pack, sampling_temperature
from ludic_core.batching.saw import SAWItem

__all__ = ["PackedRows", "pack_micro_batches", "unpack"]


@dataclass
class PackedRows:
    """The rows a packed micro-batch runs through the model."""

    input_ids: torch.Tensor  # [R, W] long
    position_ids: torch.Tensor  # [R, W] long, restarting at 0 at each item (and at the padded tail)
    temperatures: torch.Tensor  # [R, W] float: each position's item's sampling temperature
    index: torch.Tensor  # [B, W-1] long, into the flattened [R, W-1] log-probs of the rows


def pack_micro_batches(items: Sequence[SAWItem], *, micro_token_budget: int, pad_id: int) -> list[MicroBatch]:
    """Micro-batches of at most `micro_token_budget` row positions, items packed into rows.

    First fit decreasing: a micro-batch's rows are as wide as the longest item
    left, and each item in turn (longest first) goes in the first row with room,
    or a new row while the budget allows; items that fit nowhere wait for the
    next micro-batch. An item longer than the budget gets a micro-batch of its own.
    """
    if micro_token_budget < 1:
        raise ValueError(f"micro_token_budget must be >= 1, got {micro_token_budget}")
    left = sorted(items, key=len, reverse=True)
    out = []
    while left:
        width = len(left[0])
        rows = _first_fit([len(it) for it in left], width, max_rows=max(1, micro_token_budget // width))
        placed = sorted(i for row in rows for i in row)
        slot = {i: b for b, i in enumerate(placed)}
        out.append(_packed([left[i] for i in placed], [[slot[i] for i in row] for row in rows], width, pad_id))
        taken = set(placed)
        left = [it for i, it in enumerate(left) if i not in taken]
    return out


def unpack(values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """[R, W-1] per-position values of packed rows -> [B, W-1], one row per item, by
    `PackedRows.index` (position t of item b scores its token t+1; positions past
    its end hold filler, which the action mask drops)."""
    return values.reshape(-1)[index]


def _first_fit(lengths: list[int], width: int, max_rows: int) -> list[list[int]]:
    """Rows of `width` (at most `max_rows`) filled from descending `lengths`: the
    indices each row holds. Stops once no row has room for the shortest length."""
    rows: list[list[int]] = []
    free: list[int] = []
    shortest = lengths[-1]
    for i, n in enumerate(lengths):
        spot = next((r for r, room in enumerate(free) if n <= room), None)
        if spot is None and len(rows) < max_rows:
            rows.append([])
            free.append(width)
            spot = len(rows) - 1
        if spot is not None:
            rows[spot].append(i)
            free[spot] -= n
        elif max(free) < shortest:
            break
    return rows


def _packed(items: Sequence[SAWItem], rows: list[list[int]], width: int, pad_id: int) -> MicroBatch:
    mb = _pack(items, pad_id)  # the per-item view the losses read; its width is `width`
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    pos = torch.zeros((len(rows), width), dtype=torch.long)
    temps = torch.ones((len(rows), width), dtype=torch.float32)
    index = torch.zeros((len(items), width - 1), dtype=torch.long)
    for r, members in enumerate(rows):
        at = 0
        for b in members:
            n = len(items[b])
            ids[r, at:at + n] = mb.input_ids[b, :n]
            pos[r, at:at + n] = torch.arange(n)
            temps[r, at:at + n] = sampling_temperature(items[b].meta)
            index[b] = r * (width - 1) + at  # filler past the item's end stays in its row
            index[b, :n - 1] += torch.arange(n - 1)
            at += n
        pos[r, at:] = torch.arange(width - at)  # the tail is one more (ignored) document
    mb.packed = PackedRows(ids, pos, temps, index)
    return mb
