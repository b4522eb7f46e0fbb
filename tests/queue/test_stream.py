"""The stream against a real redis-server: exactly once per committed
checkpoint across a crash, dead letters, stale drops, backpressure, trimming,
atomic rounds, a wrong password and a killed server."""

import pytest

from ludic_core.batching.saw import SAWItem
from ludic_core.queue import SAWStream, StreamBatchSource, connect, encode_item

pytestmark = pytest.mark.redis

PW = "s3cret-test-pw"


def entries(n, *, start=0, version=0, tokenizer=None):
    out = []
    for i in range(start, start + n):
        it = SAWItem(input_ids=[1, 2, 3 + i % 5], attention_mask=[1, 1, 1], action_mask=[0, 1, 1], weight=float(i),
                     meta={"group_id": f"g{i // 4}"})
        out.append(encode_item(it, item_id=f"item-{i}", env="e", policy_version=version, tokenizer=tokenizer))
    return out


def ids(batch):
    return [it.meta["item_id"] for it in batch.items]


def test_exactly_once_per_committed_checkpoint_across_crashes(client):
    stream = SAWStream(client, key="t:saw")
    stream.ensure_group()
    assert stream.put_round("r0", entries(12)) == 12

    a = StreamBatchSource(stream, items_per_step=4)
    assert ids(a.next_batch()) == ["item-0", "item-1", "item-2", "item-3"]
    state_1 = a.state_dict()  # checkpoint 1 holds items 0-3 ...
    a.checkpoint_committed()  # ... and is committed: they are acked
    assert stream.pending() == 0
    assert ids(a.next_batch()) == ["item-4", "item-5", "item-6", "item-7"]
    state_2 = a.state_dict()  # checkpoint 2 written, then the trainer dies before its ack
    assert state_2["window"] == ["item-4", "item-5", "item-6", "item-7"]
    ids(a.next_batch())  # items 8-11 read and trained, never checkpointed
    assert stream.pending() == 8
    del a  # kill -9: nothing acked since checkpoint 1

    b = StreamBatchSource(stream, items_per_step=4)
    b.load_state_dict(state_2)  # restart from checkpoint 2
    batch = b.next_batch()
    # 4-7 are in checkpoint 2: acked without training; 8-11 died with the process: trained again
    assert ids(batch) == ["item-8", "item-9", "item-10", "item-11"]
    assert (b.totals["skipped_committed"], b.totals["reclaimed"]) == (4, 4)
    b.checkpoint_committed()
    assert stream.pending() == 0
    assert state_1["window"] == ["item-0", "item-1", "item-2", "item-3"]


def test_garbage_foreign_and_stale_entries_leave_the_run_going(client):
    stream = SAWStream(client, key="t:bad")
    stream.ensure_group()
    client.xadd("t:bad", {"junk": b"\x80\x81 not an item"})  # written by hand
    stream.put_round("foreign", entries(1, start=100, tokenizer="other-fp"))
    stream.put_round("old", entries(2, start=200, version=1))
    stream.put_round("new", entries(3, start=300, version=5))
    src = StreamBatchSource(stream, items_per_step=3, trainer_version=lambda: 5, max_lag=2, tokenizer="my-fp")
    batch = src.next_batch()
    assert ids(batch) == ["item-300", "item-301", "item-302"]
    assert (batch.meta["queue_dead_lettered"], batch.meta["queue_stale_dropped"]) == (2, 2)
    dead = client.xrange("t:bad:dead")
    reasons = [f[b"reason"].decode() for _, f in dead]
    assert reasons[0].startswith("entry has no 'header' field")
    assert reasons[1] == "tokenizer other-fp is not the trainer's my-fp"
    assert dead[0][1][b"raw:junk"] == b"\x80\x81 not an item"  # the raw entry is kept for a person to read
    dropped = client.xrange("t:bad:dropped")
    assert [(f[b"item_id"], f[b"policy_version"], f[b"trainer_version"]) for _, f in dropped] == [
        (b"item-200", b"1", b"5"), (b"item-201", b"1", b"5")]
    # dead-lettered and dropped entries are acked at once; only the trained ones wait for the checkpoint
    assert stream.pending() == 3


def test_a_round_is_written_whole_and_once(client):
    stream = SAWStream(client, key="t:rounds")
    stream.ensure_group()
    assert stream.put_round("actor-1:round-7", entries(5)) == 5
    assert stream.put_round("actor-1:round-7", entries(5)) == 0  # the retried task's second write
    assert client.xlen("t:rounds") == 5


def test_the_tally_adds_up_while_an_actor_writes(client, redis_server):
    """produced == trained + unread + read-but-unacked at every tally, with rounds landing meanwhile
    (separate reads once reported 51 produced against 30 trained and 34 left)."""
    import threading

    stream = SAWStream(client, key="t:tally")
    assert stream.tally() == (0, 0, 0)  # no stream yet
    stream.ensure_group()
    assert stream.tally() == (0, 0, 0)
    stream.put_round("first", entries(6))
    src = StreamBatchSource(stream, items_per_step=3)
    src.next_batch()
    src.checkpoint_committed()  # 3 trained (acked)
    src.next_batch()  # 3 read, pending
    assert stream.tally() == (6, 0, 3)
    writer, stop = connect(redis_server.url, password=redis_server.password), threading.Event()
    producer = SAWStream(writer, key="t:tally")

    def write() -> None:
        n = 0
        while not stop.is_set():
            producer.put_round(f"r{n}", entries(2))
            n += 1

    thread = threading.Thread(target=write)
    thread.start()
    try:
        tallies = [stream.tally() for _ in range(300)]
    finally:
        stop.set()
        thread.join()
        writer.close()
    assert tallies[-1][0] > tallies[0][0]  # rounds landed while it tallied
    assert all(added == 3 + backlog + pending for added, backlog, pending in tallies)


def test_the_tally_of_a_stream_without_the_trainers_group_names_it(client):
    from redis.exceptions import ResponseError

    stream = SAWStream(client, key="t:nogroup")
    stream.put_round("first", entries(2))  # an actor wrote before any trainer made its group
    with pytest.raises(ResponseError, match="NOGROUP"):
        stream.tally()


def test_backpressure_and_trimming_never_drop_unconsumed_items(client):
    stream = SAWStream(client, key="t:bp", max_backlog=4)
    stream.ensure_group()
    stream.put_round("a", entries(6))
    assert stream.backlog() == 6
    with pytest.raises(TimeoutError, match="backlog above 4 for 0 s"):
        stream.wait_for_room(poll_s=0.01, timeout_s=0.05)
    src = StreamBatchSource(stream, items_per_step=3)
    src.next_batch()
    assert stream.backlog() == 3 and stream.wait_for_room(timeout_s=1) < 0.5
    assert stream.trim() == 0  # read but pending: kept
    src.checkpoint_committed()  # acks 0-2 and trims them
    assert client.xlen("t:bp") == 3
    assert ids(src.next_batch()) == ["item-3", "item-4", "item-5"]


def test_a_done_stream_releases_waiting_actors(client):
    from ludic_core.queue import actor_round

    stream = SAWStream(client, key="t:done", max_backlog=1)
    stream.ensure_group()
    stream.put_round("a", entries(3))
    stream.mark_done()  # the trainer finished while an actor waited for room
    assert stream.wait_for_room(poll_s=0.01, timeout_s=5) < 1

    class NoDraw:
        def next_batch(self):
            raise AssertionError("a round after the end must not generate")

    out = actor_round(NoDraw(), stream, round_id="late", env="e", policy_version=0)
    assert (out["stopped"], out["added"]) == (1.0, 0.0) and client.xlen("t:done") == 3
    stream.clear_done()
    assert not stream.is_done()


def test_wrong_password_is_a_clear_error(redis_server):
    from redis.exceptions import AuthenticationError

    bad = connect(redis_server.url, password="wrong", retries=1)
    with pytest.raises(AuthenticationError, match="invalid username-password pair"):
        bad.ping()


def test_a_killed_redis_server_is_ridden_out(redis_server, client):
    """kill -9 mid-run, restart with the same AOF: the client reconnects by
    itself and nothing written before the kill is lost."""
    import threading

    stream = SAWStream(client, key="t:crash")
    stream.ensure_group()
    stream.put_round("before", entries(4))
    src = StreamBatchSource(stream, items_per_step=6)
    redis_server.kill()
    restart = threading.Timer(1.0, redis_server.start)
    restart.start()
    stream.put_round("during", entries(2, start=10))  # retried with backoff until the server is back
    restart.join()
    assert ids(src.next_batch()) == ["item-0", "item-1", "item-2", "item-3", "item-10", "item-11"]
