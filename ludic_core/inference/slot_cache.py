"""`SlotCache`: a pre-allocated KV cache where every batch row (slot) writes at its own position.

transformers' `StaticCache` writes all rows at one shared column, so a row can
only join a running batch where its prompt happens to fit left of that column.
Here slot b holds its sequence in columns [0, length_b): a finished row's slot
takes a new prompt at once (continuous batching), and the buffers never move,
so a compiled decode step (a CUDA graph on a GPU) replays on them unchanged.

Prompts are not written through `update`: the caller prefills them with an
ordinary cache and copies the keys and values in (`write_prompt`). `update`
serves decode steps only (one new token per row), at `write_at[b]`, a tensor
the caller owns and advances. Attention reads the whole buffer under a compiled
step (static shapes) and otherwise only the slots that step and the columns in use
(`set_view`): on a CPU, reading the keys and values is most of a small model's
decode step. The attention mask is the caller's 4-D one (it
short-cuts transformers' mask building), so the size queries below exist for
completeness only.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

__all__ = ["SlotCache"]


class _SlotLayer(CacheLayerMixin):
    is_compileable = True
    is_sliding = False

    def __init__(self, slots: int, columns: int, write_at: torch.Tensor) -> None:
        super().__init__()
        self.slots, self.columns, self.write_at = slots, columns, write_at
        self.rows = torch.arange(slots, device=write_at.device)
        self.view: int | None = None  # None: all columns (the static shape a compiled step needs)
        self.active: int | None = None  # None: all slots; else only slots [0, active) step

    def allocate(self, heads: int, head_dim: int, dtype: torch.dtype, device: torch.device) -> None:
        shape = (self.slots, heads, self.columns, head_dim)
        self.keys = torch.zeros(shape, dtype=dtype, device=device)
        self.values = torch.zeros(shape, dtype=dtype, device=device)
        self.device = device
        if not torch.compiler.is_compiling():
            torch._dynamo.mark_static_address(self.keys)  # fixed addresses: no copies in a CUDA graph
            torch._dynamo.mark_static_address(self.values)
        self.is_initialized = True

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        raise RuntimeError("SlotCache is allocated up front (SlotCache.write_prompt)")

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if key_states.shape[-2] != 1:
            raise RuntimeError("SlotCache.update takes one decode token per row; prompts go through write_prompt")
        n = self.active  # None: every slot ([:None] is the whole tensor)
        at = self.write_at[:n].clamp_max(self.columns - 1)
        self.keys[self.rows[:n], :, at] = key_states[:, :, 0]
        self.values[self.rows[:n], :, at] = value_states[:, :, 0]
        if self.view is not None:  # eager steps read only the rows that step and the columns they reached
            return self.keys[:self.active, :, :self.view], self.values[:self.active, :, :self.view]
        return self.keys, self.values

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.columns, 0

    def get_seq_length(self) -> int:
        return 0  # per-row lengths live in write_at; callers pass position_ids

    def get_max_length(self) -> int:
        return self.columns


class SlotCache(Cache):
    """[slots, heads, columns, head_dim] keys and values per layer; row b writes at `write_at[b]`."""

    def __init__(self, num_layers: int, slots: int, columns: int, write_at: torch.Tensor) -> None:
        super().__init__(layers=[_SlotLayer(slots, columns, write_at) for _ in range(num_layers)])
        self.slots, self.columns, self.write_at = slots, columns, write_at
        self.allocated = False

    def set_view(self, columns: int | None, active: int | None = None) -> None:
        """Let a step write only slots [0, `active`) and attention read only those slots' first `columns`
        columns (None: all)."""
        for layer in self.layers:
            layer.view, layer.active = columns, active

    def move(self, src: list[int], dst: list[int], columns: int) -> None:
        """Copy slots `src`' first `columns` columns of keys and values into slots `dst`."""
        for layer in self.layers:  # slot by slot: a step frees a row or two, and a copy beats indexing
            for s, d in zip(src, dst):
                layer.keys[d, :, :columns].copy_(layer.keys[s, :, :columns])
                layer.values[d, :, :columns].copy_(layer.values[s, :, :columns])

    def write_prompt(self, source: Cache, src_rows: list[int], src_cols: list[tuple[slice, ...]],
                     slots: list[int]) -> None:
        """Copy prefilled keys/values: source row src_rows[i], the column pieces src_cols[i] one after
        another -> slot slots[i], from column 0."""
        for mine, theirs in zip(self.layers, source.layers):
            if not self.allocated:
                _, heads, _, head_dim = theirs.keys.shape
                mine.allocate(heads, head_dim, theirs.keys.dtype, theirs.keys.device)
            for r, pieces, s in zip(src_rows, src_cols, slots):
                at = 0
                for cols in pieces:
                    n = cols.stop - cols.start
                    mine.keys[s, :, at:at + n] = theirs.keys[r, :, cols]
                    mine.values[s, :, at:at + n] = theirs.values[r, :, cols]
                    at += n
        self.allocated = True
