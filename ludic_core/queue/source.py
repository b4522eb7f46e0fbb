"""`StreamBatchSource`: the trainer's side of the stream, exactly once per
committed checkpoint.

Items read since the last checkpoint stay pending in Redis. The checkpoint
records their item ids; once it is committed the source acknowledges them
(`checkpoint_committed`, called by the Trainer). After a crash the restarted
source reclaims everything pending: items the restored checkpoint already
holds (crash between commit and ack) are acknowledged without training, the
rest are trained again, since their gradients died with the process.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any, Callable, Mapping

from ludic_core.batching.saw import SAWBatch, SAWItem
from ludic_core.queue.codec import MalformedItem, decode_item
from ludic_core.queue.stream import SAWStream

__all__ = ["StreamBatchSource"]

log = logging.getLogger(__name__)


class StreamBatchSource:
    """`BatchSource` over a `SAWStream`: `items_per_step` items per batch.

    `trainer_version()` is the trainer's current policy version: items more
    than `max_lag` versions older go to `key:dropped` instead of the batch.
    Entries that do not decode, come from another tokenizer (`tokenizer`, a
    fingerprint) or hold ids beyond `vocab_size` go to `key:dead` with the
    reason. Both are copied before their ack, so a crash in between
    duplicates a record rather than losing one. `timeout_s` bounds the wait
    for a full batch (None = wait for the actors forever).
    """

    def __init__(self, stream: SAWStream, *, items_per_step: int, trainer_version: Callable[[], int] = lambda: 0,
                 max_lag: int | None = None, tokenizer: str | None = None, vocab_size: int | None = None,
                 block_ms: int = 500, timeout_s: float | None = None) -> None:
        if items_per_step < 1:
            raise ValueError(f"items_per_step must be >= 1, got {items_per_step}")
        self.stream = stream
        self.items_per_step = items_per_step
        self.trainer_version = trainer_version
        self.max_lag = max_lag
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.block_ms = block_ms
        self.timeout_s = timeout_s
        self._window: dict[str, str] = {}  # item id -> entry id, read since the last commit
        self._committed: set[str] = set()  # item ids the restored checkpoint holds
        self._backlog: deque[tuple[str, Mapping[bytes, bytes]]] = deque()
        self._reclaimed = False
        self.totals = {"trained": 0, "stale_dropped": 0, "dead_lettered": 0, "reclaimed": 0,
                       "skipped_committed": 0, "duplicates": 0, "wait_s": 0.0}
        self.lag_histogram: dict[str, int] = {}  # trainer version - item version -> items trained

    # --- BatchSource -----------------------------------------------------

    def next_batch(self) -> SAWBatch:
        self.stream.ensure_group()
        if not self._reclaimed:
            self._reclaim()
        items: list[SAWItem] = []
        counts = {"stale_dropped": 0, "dead_lettered": 0, "duplicates": 0}
        start = time.monotonic()
        while len(items) < self.items_per_step:
            if not self._backlog:
                self._backlog = deque(self.stream.read(self.items_per_step - len(items), block_ms=self.block_ms))
                if not self._backlog:
                    if self.timeout_s is not None and time.monotonic() - start > self.timeout_s:
                        raise TimeoutError(f"stream {self.stream.key!r}: {len(items)} of {self.items_per_step} "
                                           f"items after {self.timeout_s:.0f} s (are the actors running?)")
                    continue
            entry_id, fields = self._backlog.popleft()
            item = self._accept(entry_id, fields, counts)
            if item is not None:
                items.append(item)
        waited = time.monotonic() - start
        self.totals["trained"] += len(items)
        self.totals["wait_s"] += waited
        for k, v in counts.items():
            self.totals[k] += v
        return SAWBatch(items, meta={**{f"queue_{k}": v for k, v in counts.items()}, "queue_wait_s": waited})

    def state_dict(self) -> dict[str, Any]:
        """What the checkpoint about to be written holds: the item ids read since the last one."""
        return {"window": sorted(self._window), "totals": dict(self.totals), "lag": dict(self.lag_histogram)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._committed = set(state.get("window", []))
        self.totals.update(state.get("totals", {}))
        self.lag_histogram = {str(k): int(v) for k, v in state.get("lag", {}).items()}

    def checkpoint_committed(self, path: Any = None) -> None:
        """The checkpoint holding every item read so far is on disk: acknowledge them, trim the stream."""
        self.stream.ack(list(self._window.values()))
        self._window.clear()
        self._committed.clear()
        self.stream.trim()

    # --- internals -------------------------------------------------------

    def _reclaim(self) -> None:
        """Take over every pending entry (ours from before a crash, or a dead trainer's)."""
        self._reclaimed = True
        skip: list[str] = []
        for entry_id, fields in self.stream.reclaim():
            item_id = _item_id(fields)
            if item_id is not None and item_id in self._committed:
                skip.append(entry_id)
            else:
                self._backlog.append((entry_id, fields))
        self.stream.ack(skip)
        self.totals["skipped_committed"] += len(skip)
        self.totals["reclaimed"] += len(self._backlog)
        if skip or self._backlog:
            log.info("stream %s: %d pending items already in the checkpoint (acked), %d to train again",
                     self.stream.key, len(skip), len(self._backlog))

    def _accept(self, entry_id: str, fields: Mapping[bytes, bytes], counts: dict[str, int]) -> SAWItem | None:
        try:
            stamped = decode_item(fields, vocab_size=self.vocab_size)
            if self.tokenizer is not None and stamped.tokenizer not in (None, self.tokenizer):
                raise MalformedItem(f"tokenizer {stamped.tokenizer} is not the trainer's {self.tokenizer}")
        except MalformedItem as exc:
            log.warning("stream %s entry %s dead-lettered: %s", self.stream.key, entry_id, exc)
            self.stream.dead_letter(entry_id, fields, str(exc))
            self.stream.ack([entry_id])
            counts["dead_lettered"] += 1
            return None
        if stamped.item_id in self._window:  # an actor retried a round it had half written
            self.stream.ack([entry_id])
            counts["duplicates"] += 1
            return None
        version = self.trainer_version()
        if self.max_lag is not None and version - stamped.policy_version > self.max_lag:
            self.stream.drop_stale(entry_id, stamped.item_id, stamped.policy_version, version)
            self.stream.ack([entry_id])
            counts["stale_dropped"] += 1
            return None
        self._window[stamped.item_id] = entry_id
        lag = str(version - stamped.policy_version)
        self.lag_histogram[lag] = self.lag_histogram.get(lag, 0) + 1
        return stamped.item


def _item_id(fields: Mapping[bytes, bytes]) -> str | None:
    from ludic_core.queue.codec import decode_header

    try:
        return decode_header(fields)["item_id"]
    except MalformedItem:
        return None
