"""`StreamBatchSource`: the trainer's side of the stream, exactly once per
committed checkpoint, and never stuck on a poison entry.

Items read since the last checkpoint stay pending in Redis. The checkpoint
records their item ids; once it is committed the source acknowledges them
(`checkpoint_committed`, called by the Trainer). After a crash the restarted
source claims what is pending, a batch's worth at a time: items the restored
checkpoint already holds (crash between commit and ack) are acknowledged
without training, the rest are trained again, since their gradients died with
the process.

Poison: decoding is total (`codec.decode_item`), so an entry that cannot be
trained goes to `key:dead` with its reason the first time it is read. An entry
that stops the trainer some other way (a crash while training it) is caught by
Redis's delivery counter: one already delivered `max_deliveries` times without
reaching a committed checkpoint is dead-lettered instead of handed to another
trainer, so a restarted trainer cannot loop on it.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any, Callable, Mapping

from ludic_core.batching.saw import SAWBatch, SAWItem, is_stale
from ludic_core.batching.sources import BatchSource
from ludic_core.queue.codec import MalformedItem, decode_header, decode_item
from ludic_core.queue.stream import Entry, SAWStream

__all__ = ["StreamBatchSource"]

log = logging.getLogger(__name__)

_NO_ERROR = "unknown: each trainer that read it stopped before a checkpoint holding it committed"


class StreamBatchSource(BatchSource):
    """`BatchSource` over a `SAWStream`: `items_per_step` items per batch.

    `trainer_version()` is the trainer's current policy version: items more
    than `max_lag` versions older go to `key:dropped` instead of the batch.
    Entries that do not decode (`decode_item`: bounded by `max_tokens`, the
    trainer's max_seq_len, and `vocab_size`), come from another tokenizer
    (`tokenizer`, a fingerprint) or were delivered `max_deliveries` times
    without being committed go to `key:dead` with the reason. Both are copied
    before their ack, so a crash in between duplicates a record rather than
    losing one. `timeout_s` bounds the wait for a full batch (None = wait for
    the actors forever).
    """

    def __init__(self, stream: SAWStream, *, items_per_step: int, trainer_version: Callable[[], int] = lambda: 0,
                 max_lag: int | None = None, tokenizer: str | None = None, vocab_size: int | None = None,
                 max_tokens: int | None = None, max_deliveries: int = 2, block_ms: int = 500,
                 timeout_s: float | None = None) -> None:
        if items_per_step < 1 or max_deliveries < 1:
            raise ValueError(f"items_per_step and max_deliveries must be >= 1, got {items_per_step}, "
                             f"{max_deliveries}")
        self.stream = stream
        self.items_per_step = items_per_step
        self.trainer_version = trainer_version
        self.max_lag = max_lag
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.max_tokens = max_tokens
        self.max_deliveries = max_deliveries
        self.block_ms = block_ms
        self.timeout_s = timeout_s
        self._window: dict[str, str] = {}  # item id -> entry id, read since the last commit
        self._committed: set[str] = set()  # item ids the restored checkpoint holds
        self._backlog: deque[tuple[str, Mapping[bytes, bytes]]] = deque()
        self._pending_after: str | None = "-"  # claiming pending entries after this id; None once done
        self._ready: list[tuple[str, SAWItem]] = []  # (entry id, item) collected for the next batch
        self._prior: dict[str, int] = {}  # reclaimed entry id -> deliveries before this trainer's claim
        self._handed: list[str] = []  # entry ids of the last batch (for `record_failure`)
        self.totals = {"trained": 0, "stale_dropped": 0, "dead_lettered": 0, "reclaimed": 0,
                       "skipped_committed": 0, "duplicates": 0, "wait_s": 0.0}
        self.lag_histogram: dict[str, int] = {}  # trainer version - item version -> items trained

    # --- BatchSource -----------------------------------------------------

    def next_batch(self) -> SAWBatch:
        self.stream.ensure_group()
        counts = {"stale_dropped": 0, "dead_lettered": 0, "duplicates": 0}
        start = time.monotonic()
        while len(self._ready) < self.items_per_step:
            if not self._backlog:
                self._backlog = deque(self._fetch(self.items_per_step - len(self._ready), counts))
                if not self._backlog:
                    self._check_timeout(start, counts)
                    continue
            entry_id, fields = self._backlog.popleft()
            item = self._accept(entry_id, fields, counts)
            if item is not None:
                self._ready.append((entry_id, item))
        ready, self._ready = self._ready, []
        self._handed = [entry_id for entry_id, _ in ready]
        self._prior.clear()  # the backlog is empty here: every claimed entry was taken or dropped
        waited = time.monotonic() - start
        self.totals["trained"] += len(ready)
        self.totals["wait_s"] += waited
        self._add_totals(counts)
        return SAWBatch([item for _, item in ready],
                        meta={**{f"queue_{k}": v for k, v in counts.items()}, "queue_wait_s": waited})

    def record_failure(self, error: BaseException | str) -> None:
        """The trainer failed on the last batch (call it in an `except` before
        re-raising): should its entries fail again, their dead-letter reason
        quotes this error."""
        text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        self.stream.note_failure(self._handed, text[:500])

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

    def _fetch(self, need: int, counts: dict[str, int]) -> list[Entry]:
        """Pending entries first (ours from before a crash, or a dead trainer's),
        claimed `need` at a time so only entries handed on count a delivery;
        then new ones."""
        if self._pending_after is None:
            return self.stream.read(need, block_ms=self.block_ms)
        claimed, self._pending_after = self.stream.claim_pending(self._pending_after, need)
        keep: list[Entry] = []
        skip: list[str] = []
        for entry_id, fields, delivered in claimed:
            if _item_id(fields) in self._committed:
                skip.append(entry_id)
            elif delivered >= self.max_deliveries:
                last = self.stream.last_failure(entry_id) or _NO_ERROR
                self._dead_letter(entry_id, fields, f"delivered {delivered} times without being trained "
                                                    f"(last error: {last})", counts)
            else:
                keep.append((entry_id, dict(fields)))
                self._prior[entry_id] = delivered
        self.stream.ack(skip)
        self.totals["skipped_committed"] += len(skip)
        self.totals["reclaimed"] += len(keep)
        if skip or keep:
            log.info("stream %s: %d pending items already in the checkpoint (acked), %d to train again",
                     self.stream.key, len(skip), len(keep))
        return keep

    def _check_timeout(self, start: float, counts: dict[str, int]) -> None:
        """Past `timeout_s`, give up this batch, keeping what it collected: the
        items wait for the next call, and their delivery counts go back to what
        they were, so a trainer that stops here spends none of their tries."""
        if self.timeout_s is None or time.monotonic() - start <= self.timeout_s:
            return
        self._add_totals(counts)
        self.stream.restore_deliveries({eid: self._prior.get(eid, 0) for eid, _ in self._ready})
        # what the wait saw tells a stalled actor from one whose items all went stale or dead
        raise TimeoutError(f"stream {self.stream.key!r}: {len(self._ready)} of {self.items_per_step} items after "
                           f"{self.timeout_s:.0f} s; meanwhile {counts['stale_dropped']} dropped as stale (max_lag "
                           f"{self.max_lag}) and {counts['dead_lettered']} dead-lettered; "
                           f"{self.stream.entries_added()} entries added to the stream in all (are the actors "
                           "running?)")

    def _add_totals(self, counts: dict[str, int]) -> None:
        for k, v in counts.items():
            self.totals[k] += v

    def _dead_letter(self, entry_id: str, fields: Mapping[bytes, bytes], reason: str, counts: dict[str, int]) -> None:
        log.warning("stream %s entry %s dead-lettered: %s", self.stream.key, entry_id, reason)
        self.stream.dead_letter(entry_id, fields, reason)
        self.stream.ack([entry_id])
        counts["dead_lettered"] += 1

    def _accept(self, entry_id: str, fields: Mapping[bytes, bytes], counts: dict[str, int]) -> SAWItem | None:
        try:
            stamped = decode_item(fields, vocab_size=self.vocab_size, max_tokens=self.max_tokens)
            if self.tokenizer is not None and stamped.tokenizer not in (None, self.tokenizer):
                raise MalformedItem(f"tokenizer {stamped.tokenizer} is not the trainer's {self.tokenizer}")
        except MalformedItem as exc:
            self._dead_letter(entry_id, fields, str(exc), counts)
            return None
        if stamped.item_id in self._window:  # an actor retried a round it had half written
            self.stream.ack([entry_id])
            counts["duplicates"] += 1
            return None
        version = self.trainer_version()
        if is_stale(stamped.policy_version, version, self.max_lag):
            self.stream.drop_stale(entry_id, stamped.item_id, stamped.policy_version, version)
            self.stream.ack([entry_id])
            counts["stale_dropped"] += 1
            return None
        self._window[stamped.item_id] = entry_id
        lag = str(version - stamped.policy_version)
        self.lag_histogram[lag] = self.lag_histogram.get(lag, 0) + 1
        return stamped.item


def _item_id(fields: Mapping[bytes, bytes]) -> str | None:
    try:
        return decode_header(fields)["item_id"]
    except MalformedItem:
        return None
