"""A Redis Stream of SAW items with a consumer group: the actor/learner wire.

Why Streams and not a list: a list forgets an item the moment it is popped, so
a trainer that dies after popping loses it. A stream entry read through a
consumer group stays *pending* until acknowledged; the trainer acknowledges
only after the checkpoint holding the item's gradient is committed, and a
restarted trainer claims what it had read (`XPENDING` + `XCLAIM`, which also
count each entry's deliveries: an entry no trainer survives is dead-lettered).

Trimming never drops an unconsumed item: instead of `MAXLEN` (which trims
read and unread alike; Redis 7.0 has no `ACKED` trim) the stream is trimmed by
`MINID` up to the oldest entry still pending or not yet delivered.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

__all__ = ["SAWStream", "connect", "Entry"]

Entry = tuple[str, dict[bytes, bytes]]  # (entry id, fields)


def connect(url: str, *, password: str | None = None, retries: int = 20, socket_timeout_s: float = 10.0) -> Any:
    """A redis-py client that rides out a restarting server: connection errors
    are retried with exponential backoff (capped at 2 s) `retries` times before
    they surface. `url` may be redis://, rediss:// (TLS) or unix://."""
    import redis
    from redis.backoff import ExponentialBackoff
    from redis.exceptions import BusyLoadingError
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError
    from redis.retry import Retry

    return redis.Redis.from_url(
        url, password=password, socket_timeout=socket_timeout_s, socket_connect_timeout=socket_timeout_s,
        retry=Retry(ExponentialBackoff(cap=2.0, base=0.05), retries),
        retry_on_error=[RedisConnectionError, RedisTimeoutError, BusyLoadingError], health_check_interval=30)


@dataclass
class SAWStream:
    """One stream (`key`), its consumer group, and its two side streams:
    `key:dead` (entries that cannot be trained, with the reason) and
    `key:dropped` (items too stale to train, with their versions)."""

    client: Any
    key: str = "ludic:saw"
    group: str = "trainers"
    consumer: str = "trainer-0"
    max_backlog: int = 10_000

    @property
    def dead_key(self) -> str:
        return f"{self.key}:dead"

    @property
    def dropped_key(self) -> str:
        return f"{self.key}:dropped"

    def ensure_group(self) -> None:
        """Create the stream and its group (reading from the first entry, so items
        produced before the trainer starts are trained); idempotent."""
        from redis.exceptions import ResponseError

        try:
            self.client.xgroup_create(self.key, self.group, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    # --- producer side -------------------------------------------------

    def backlog(self) -> int:
        """Entries the group has not been delivered yet (XINFO GROUPS `lag`;
        when Redis cannot tell, the stream length, which over-counts: safe)."""
        return self._lag(self.client.xinfo_groups(self.key), lambda: int(self.client.xlen(self.key)))

    def _lag(self, groups: Sequence[Mapping[str, Any]], length: Callable[[], int]) -> int:
        """The group's lag in XINFO GROUPS' answer, else `length()` (an over-count: safe)."""
        for g in groups:
            if _s(g.get("name")) == self.group and g.get("lag") is not None:
                return int(g["lag"])
        return length()

    def entries_added(self) -> int:
        """Every entry ever appended to the stream (trimmed ones included); 0 before the stream exists."""
        if not self.client.exists(self.key):
            return 0
        return int(self.client.xinfo_stream(self.key)["entries-added"])

    def tally(self) -> tuple[int, int, int]:
        """(entries added, backlog, pending), read in one MULTI/EXEC: an actor's XADD landing
        between separate reads made a report's produced count disagree with what it said was
        left (the trainer's end, with an actor's last round in flight). (0, 0, 0) before the
        stream exists (its existence is read in the same transaction: a stream deleted between a
        separate EXISTS and the reads failed them)."""
        pipe = self.client.pipeline(transaction=True)
        pipe.exists(self.key)
        pipe.xinfo_stream(self.key)
        pipe.xinfo_groups(self.key)
        pipe.xlen(self.key)
        pipe.xpending(self.key, self.group)
        exists, info, groups, length, pending = pipe.execute(raise_on_error=False)
        if not exists:
            return 0, 0, 0
        for reply in (info, groups, length, pending):
            if isinstance(reply, Exception):  # e.g. NOGROUP: the trainer's group was never created
                raise reply
        return int(info["entries-added"]), self._lag(groups, lambda: int(length)), int(pending["pending"])

    @property
    def done_key(self) -> str:
        return f"{self.key}:done"

    def mark_done(self) -> None:
        """Training is over: actors stop (waiting ones give up their round)."""
        self.client.set(self.done_key, 1)

    def clear_done(self) -> None:
        self.client.delete(self.done_key)

    def is_done(self) -> bool:
        return bool(self.client.exists(self.done_key))

    def wait_for_room(self, *, poll_s: float = 0.2, timeout_s: float | None = None) -> float:
        """Block while the backlog exceeds `max_backlog` and training is not over
        (`mark_done`); return the seconds waited."""
        start = time.monotonic()
        while self.backlog() > self.max_backlog and not self.is_done():
            if timeout_s is not None and time.monotonic() - start > timeout_s:
                raise TimeoutError(f"stream {self.key!r}: backlog above {self.max_backlog} for {timeout_s:.0f} s "
                                   "(is the trainer running?)")
            time.sleep(poll_s)
        return time.monotonic() - start

    def put_round(self, round_id: str, entries: Sequence[Mapping[str, bytes]], *, remember_s: int = 7 * 86400) -> int:
        """Append one actor round atomically and at most once: all of its entries
        or none (a killed actor leaves nothing half-written), and a retried round
        whose first attempt did land adds nothing. Returns the entries added (0 for
        a round already written)."""
        args: list[bytes | str | int] = [remember_s]
        for fields in entries:
            args += [fields["header"], fields["tensors"]]
        return int(self.client.eval(_PUT_ROUND, 2, self.key, f"{self.key}:round:{round_id}", *args))

    # --- consumer side -------------------------------------------------

    def read(self, count: int, *, block_ms: int = 1000) -> list[Entry]:
        """Up to `count` entries never delivered to the group before."""
        got = self.client.xreadgroup(self.group, self.consumer, {self.key: ">"}, count=count, block=block_ms)
        return [(_s(eid), fields) for _, entries in (got or []) for eid, fields in entries]

    def claim_pending(self, after: str, count: int) -> tuple[list[tuple[str, dict[bytes, bytes], int]], str | None]:
        """Up to `count` pending entries after entry id `after` ("-": from the
        first), now this consumer's, each with the times it had been delivered
        before this claim (XPENDING's counter, which XCLAIM then raises by one),
        and the cursor for the next call (None once none are left)."""
        rows = self.client.xpending_range(self.key, self.group, min=after if after == "-" else f"({after}",
                                          max="+", count=count)
        if not rows:
            return [], None
        before = {_s(r["message_id"]): int(r["times_delivered"]) for r in rows}
        claimed = {_s(eid): fields for eid, fields in self.client.xclaim(self.key, self.group, self.consumer, 0,
                                                                          list(before))}
        self.ack([eid for eid in before if claimed.get(eid) is None])  # deleted from the stream meanwhile
        entries = [(eid, fields, before[eid]) for eid, fields in claimed.items() if fields is not None]
        return entries, _s(rows[-1]["message_id"])

    def restore_deliveries(self, counts: Mapping[str, int]) -> None:
        """Set pending entries' delivery counters (entry id -> count): entries a
        trainer read but gave back untrained have not been tried."""
        by_count: dict[int, list[str]] = {}
        for eid, n in counts.items():
            by_count.setdefault(n, []).append(eid)
        for n, ids in by_count.items():
            self.client.xclaim(self.key, self.group, self.consumer, 0, ids, retrycount=n, justid=True)

    def pending(self) -> int:
        return int(self.client.xpending(self.key, self.group)["pending"])

    def ack(self, ids: Sequence[str]) -> int:
        return int(self.client.xack(self.key, self.group, *ids)) if ids else 0

    def dead_letter(self, entry_id: str, fields: Mapping[Any, bytes], reason: str, *,
                    max_raw_bytes: int = 1 << 20) -> None:
        """Copy the raw entry with its reason to `key:dead` (before the caller acks
        it). A field over `max_raw_bytes` is recorded by its size only, so a
        200 MB poison entry is not stored twice; odd field names are escaped."""
        record: dict[str, Any] = {"reason": reason.encode("utf-8", "backslashreplace"), "source_id": entry_id}
        for k, v in fields.items():
            name = k.decode("utf-8", "backslashreplace") if isinstance(k, bytes) else str(k)
            if len(v) > max_raw_bytes:
                record[f"omitted:{name}"] = f"{len(v)} bytes"
            else:
                record[f"raw:{name}"] = v
        self.client.xadd(self.dead_key, record)

    @property
    def failures_key(self) -> str:
        return f"{self.key}:failures"

    def note_failure(self, entry_ids: Sequence[str], error: str) -> None:
        """Remember why a trainer holding these entries failed (`key:failures`),
        for the dead-letter reason should they fail again."""
        if entry_ids:
            self.client.hset(self.failures_key, mapping={eid: error for eid in entry_ids})

    def last_failure(self, entry_id: str) -> str | None:
        got = self.client.hget(self.failures_key, entry_id)
        return None if got is None else got.decode("utf-8", "backslashreplace")

    def drop_stale(self, entry_id: str, item_id: str, version: int, trainer_version: int) -> None:
        self.client.xadd(self.dropped_key, {"source_id": entry_id, "item_id": item_id,
                                            "policy_version": version, "trainer_version": trainer_version})

    def side_count(self, side_key: str) -> int:
        """Distinct stream entries recorded in a side stream (`dead_key`,
        `dropped_key`): the durable count, whatever a crashed trainer forgot; an
        entry copied twice (crash between copy and ack) counts once."""
        seen: set[bytes] = set()
        start = "-"
        while True:
            chunk = self.client.xrange(side_key, min=start, max="+", count=1000)
            seen.update(f[b"source_id"] for _, f in chunk)
            if len(chunk) < 1000:
                return len(seen)
            start = "(" + _s(chunk[-1][0])

    def trim(self) -> int:
        """Drop entries (and their failure notes) older than the oldest one pending or not yet delivered."""
        summary = self.client.xpending(self.key, self.group)
        floor = _s(summary["min"]) if summary["pending"] else None
        delivered = next((_s(g["last-delivered-id"]) for g in self.client.xinfo_groups(self.key)
                          if _s(g.get("name")) == self.group), "0-0")
        candidates = [floor] if floor else []
        candidates.append(_next_id(delivered))
        minid = min(candidates, key=_id_key)
        done = [k for k in self.client.hkeys(self.failures_key) if _id_key(_s(k)) < _id_key(minid)]
        if done:  # failure notes of entries acked since (trained or dead-lettered)
            self.client.hdel(self.failures_key, *done)
        return int(self.client.xtrim(self.key, minid=minid, approximate=False))


# KEYS: stream, round marker; ARGV: marker ttl, then header, tensors per entry.
_PUT_ROUND = """
if not redis.call('SET', KEYS[2], '1', 'NX', 'EX', ARGV[1]) then return 0 end
for i = 2, #ARGV, 2 do redis.call('XADD', KEYS[1], '*', 'header', ARGV[i], 'tensors', ARGV[i + 1]) end
return (#ARGV - 1) / 2
"""


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def _next_id(entry_id: str) -> str:
    ms, seq = _id_key(entry_id)
    return f"{ms}-{seq + 1}"
