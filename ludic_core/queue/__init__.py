"""The actor/learner queue: SAW items over Redis Streams (plain redis-py, no Prefect)."""

from ludic_core.queue.actor import ActorSpec, actor_round, run_actor_round
from ludic_core.queue.codec import FORMAT, MalformedItem, Stamped, decode_header, decode_item, encode_item
from ludic_core.queue.source import StreamBatchSource
from ludic_core.queue.stream import SAWStream, connect

__all__ = ["ActorSpec", "actor_round", "run_actor_round", "FORMAT", "MalformedItem", "Stamped", "decode_header", "decode_item", "encode_item",
           "StreamBatchSource", "SAWStream", "connect"]
