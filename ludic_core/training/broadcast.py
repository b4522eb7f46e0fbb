"""Stream data for several ranks: rank 0 reads, every rank trains its share.

One consumer reads the stream and one checkpoint records what it read, so a
multi-rank stage keeps a single reader: rank 0's `StreamBatchSource`. Each
step its batch goes to every rank as JSON over the process group (no pickle;
the trainer then gives each rank its slice), and only rank 0 records,
restores and acknowledges (after the checkpoint holding the step is committed).
The exactly-once audit is then the single-process one.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Callable, Mapping

from ludic_core.batching.saw import SAWBatch, SAWItem
from ludic_core.batching.sources import BatchSource
from ludic_core.training.distributed import broadcast_object_json

__all__ = ["BroadcastSource"]


class BroadcastSource(BatchSource):
    """`inner` (rank 0's stream source; None on the other ranks) seen by every rank."""

    def __init__(self, inner: Any | None, ctx: Any) -> None:
        if (inner is None) == ctx.is_main:
            raise ValueError("rank 0, and only rank 0, reads the stream")
        self.inner, self.ctx = inner, ctx

    @property
    def trainer_version(self) -> Callable[[], int] | None:
        return None if self.inner is None else self.inner.trainer_version

    @trainer_version.setter
    def trainer_version(self, fn: Callable[[], int]) -> None:
        if self.inner is not None:
            self.inner.trainer_version = fn

    def next_batch(self) -> SAWBatch:
        payload = None
        if self.inner is not None:
            try:
                batch = self.inner.next_batch()
                payload = {"items": [asdict(i) for i in batch.items], "meta": batch.meta}
            except Exception as exc:  # every rank fails with rank 0's reason instead of waiting for it
                payload = {"error": f"{type(exc).__name__}: {exc}"}
                broadcast_object_json(payload, self.ctx)
                raise
        payload = broadcast_object_json(payload, self.ctx)
        if "error" in payload:
            raise RuntimeError(f"rank 0 could not read the stream: {payload['error']}")
        return SAWBatch(items=[SAWItem(**d) for d in payload["items"]], meta=payload["meta"])

    def state_dict(self) -> dict[str, Any]:
        return self.inner.state_dict() if self.inner is not None else {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if self.inner is not None:
            self.inner.load_state_dict(state)

    def checkpoint_committed(self, path: Any = None) -> None:
        if self.inner is not None:
            self.inner.checkpoint_committed(path)

    def record_failure(self, error: BaseException | str) -> None:
        """Rank 0 holds the stream: only it notes which entries a failed step had."""
        if self.inner is not None:
            self.inner.record_failure(error)
