"""Training batches: SAW items (State, Action, Weight), where batches come from
(`BatchSource`s), and how they are packed into padded micro-batches.

Exports are resolved lazily (PEP 562) so that importing a torch-free submodule
such as `ludic_core.batching.saw` (used by `ludic_core.rejection`) does not pull
in torch via `collate`, nor the rollout engine via `sources`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ludic_core.lazy import lazy_exports

if TYPE_CHECKING:
    from ludic_core.batching.branching import BranchingBatchSource
    from ludic_core.batching.chat import chat_items, chat_to_item, read_chat_examples
    from ludic_core.batching.collate import MicroBatch, collate_micro_batches, padding_waste
    from ludic_core.batching.packing import PackedRows, pack_micro_batches
    from ludic_core.batching.saw import SAWBatch, SAWItem, build_saw_batch
    from ludic_core.batching.sources import (
        BatchSource,
        OfflineBatchSource,
        RolloutBatchSource,
        chat_example_to_item,
        rollout_stats,
    )

__all__ = [
    "SAWItem",
    "SAWBatch",
    "build_saw_batch",
    "MicroBatch",
    "collate_micro_batches",
    "pack_micro_batches",
    "PackedRows",
    "padding_waste",
    "BatchSource",
    "RolloutBatchSource",
    "BranchingBatchSource",
    "OfflineBatchSource",
    "chat_example_to_item",
    "rollout_stats",
    "chat_to_item",
    "read_chat_examples",
    "chat_items",
]

_SOURCE = {
    "SAWItem": "saw",
    "SAWBatch": "saw",
    "build_saw_batch": "saw",
    "MicroBatch": "collate",
    "collate_micro_batches": "collate",
    "padding_waste": "collate",
    "pack_micro_batches": "packing",
    "PackedRows": "packing",
    "BatchSource": "sources",
    "RolloutBatchSource": "sources",
    "BranchingBatchSource": "branching",
    "OfflineBatchSource": "sources",
    "chat_example_to_item": "sources",
    "rollout_stats": "sources",
    "chat_to_item": "chat",
    "read_chat_examples": "chat",
    "chat_items": "chat",
}


__getattr__, __dir__ = lazy_exports(__name__, _SOURCE)
