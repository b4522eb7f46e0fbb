"""Hostile stream entries against a real redis-server.

Each case in `POISON` (len(POISON) is the count to report) is pushed twice: once
left pending by a consumer that died while decoding it (the old poison loop:
a restarted consumer reclaimed it and crashed again), once as a fresh entry.
Both copies must be dead-lettered with a reason naming the problem, and the
consumer, restarted in between, must go on to yield the valid items pushed
after them. Then the "fails twice" rule: an entry whose trainers keep dying is
dead-lettered after two deliveries instead of looping forever.
"""

from __future__ import annotations

import json
import pickle
import random
import tracemalloc
from typing import Any, NamedTuple

import numpy as np
import pytest
from safetensors.numpy import save as st_save

from ludic_core.batching.saw import SAWItem
from ludic_core.queue import MalformedItem, SAWStream, StreamBatchSource, connect, decode_item, encode_item
from ludic_core.queue.validate import load_json, nesting_depth

VOCAB = 64
MAX_TOKENS = 32
FP = "fp-test"


# --- building entries ------------------------------------------------------------------------------

def good_item(n: int = 4) -> SAWItem:
    return SAWItem(input_ids=[1 + i % 9 for i in range(n)], attention_mask=[1] * n, action_mask=[0] * (n // 2)
                   + [1] * (n - n // 2), weight=0.5, meta={"group_id": "g"}, actor_logprobs=[0.0] * n)


def good(item_id: str = "poison") -> dict[str, bytes]:
    return encode_item(good_item(), item_id=item_id, env="e", policy_version=0, tokenizer=FP)


def header_dict(**changes: Any) -> dict[str, Any]:
    head = json.loads(good()["header"])
    head.update(changes)
    return head


def with_header(**changes: Any) -> dict[str, bytes]:
    return {**good(), "header": json.dumps(header_dict(**changes)).encode()}


def with_header_text(text: bytes) -> dict[str, bytes]:
    return {**good(), "header": text}


def header_replacing(placeholder: Any, raw: bytes, **changes: Any) -> dict[str, bytes]:
    """A header whose `placeholder` value is replaced by raw JSON text (what json.dumps will not write)."""
    text = json.dumps(header_dict(**changes)).encode()
    return with_header_text(text.replace(json.dumps(placeholder).encode(), raw, 1))


def arrays(**overrides: Any) -> dict[str, np.ndarray]:
    base = {"input_ids": np.array([1, 2, 3, 4], dtype=np.int64), "attention_mask": np.ones(4, dtype=np.int8),
            "action_mask": np.array([0, 0, 1, 1], dtype=np.int8),
            "actor_logprobs": np.array([0, 0, -0.5, -1.25], dtype=np.float32)}
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def with_arrays(**overrides: Any) -> dict[str, bytes]:
    return {**good(), "tensors": st_save(arrays(**overrides))}


def st_raw(header: Any, body: bytes) -> bytes:
    """Hand-written safetensors: an 8-byte length, the JSON header, the body."""
    head = header if isinstance(header, bytes) else json.dumps(header).encode()
    return len(head).to_bytes(8, "little") + head + body


def with_tensors(raw: bytes) -> dict[str, bytes]:
    return {**good(), "tensors": raw}


def declared(**specs: Any) -> dict[str, Any]:
    """A safetensors header for the good arrays, some entries replaced."""
    head, off = {}, 0
    for name, arr in arrays().items():
        dtype = {"int64": "I64", "int8": "I8", "float32": "F32"}[str(arr.dtype)]
        head[name] = {"dtype": dtype, "shape": [arr.size], "data_offsets": [off, off + arr.nbytes]}
        off += arr.nbytes
    head.update(specs)
    return head


GOOD_BODY = b"".join(a.tobytes() for a in arrays().values())
GOOD_ST = st_save(arrays())


class Case(NamedTuple):
    name: str
    fields: dict[Any, bytes]
    reason: str  # the dead-letter reason must contain this
    decoder: bool = True  # False: refused by the source (tokenizer), not by decode_item


DEEP = 10_000
POISON: list[Case] = [
    # --- the header: parsing -----------------------------------------------------------------------
    Case("json_nested_100k_deep", with_header_text(b"[" * 100_000 + b"]" * 100_000),
         "header is 200000 bytes, more than the cap of 65536"),
    Case("json_nested_10k_deep", header_replacing("DEEP", b"[" * DEEP + b"]" * DEEP, meta={"x": "DEEP"}),
         f"header nests {DEEP + 2} levels deep, more than 16"),
    Case("json_nested_17_deep_meta", header_replacing("DEEP", b"[" * 16 + b"]" * 16, meta={"x": "DEEP"}),
         "header nests 18 levels deep, more than 16"),
    Case("int_5000_digits", header_replacing(777, b"9" * 5000, policy_version=777),
         "header holds an integer of 5000 digits (at most 20)"),
    Case("int_5000_digits_in_meta", header_replacing(777, b"-" + b"1" * 5000, meta={"n": 777}),
         "header holds an integer of 5000 digits"),
    Case("nan_item_id", with_header(item_id=float("nan")), "header holds NaN, which JSON does not allow"),
    Case("nan_weight", with_header(weight=float("nan")), "header holds NaN, which JSON does not allow"),
    Case("infinity_weight", with_header(weight=float("inf")), "header holds Infinity, which JSON does not allow"),
    Case("minus_infinity_in_meta", with_header(meta={"reward": float("-inf")}), "header holds -Infinity"),
    Case("float_beyond_range", header_replacing(1.5, b"1e400", weight=1.5),
         "header holds the number '1e400', beyond float range"),
    Case("header_not_utf8", with_header_text(b'{"format": "\xff\xfe"}'),
         "header is not UTF-8 (invalid start byte: byte 0xff at offset 12)"),
    Case("header_utf16le", with_header_text(json.dumps(header_dict()).encode("utf-16-le")),
         "header holds a NUL byte at offset 1 (UTF-16 or UTF-32 text? expected UTF-8 JSON)"),
    Case("header_lone_surrogate_item_id", header_replacing("SURR", b'"\\ud800"', item_id="SURR"),
         "header holds a lone UTF-16 surrogate '\\ud800' in a string"),
    Case("header_repeated_key", header_replacing(0.5, b'0.5, "weight": 1e300', weight=0.5),
         "header repeats the key 'weight'"),
    Case("header_not_json", with_header_text(b"{not json"), "header is not JSON: JSONDecodeError"),
    Case("header_json_list", with_header_text(b"[1, 2]"), "header is a JSON list, not an object"),
    Case("header_json_string", with_header_text(b'"ludic.saw/1"'), "header is a JSON str, not an object"),
    Case("header_empty", with_header_text(b""), "header is not JSON: JSONDecodeError: Expecting value"),
    Case("header_over_cap", with_header(meta={"blob": "x" * 70_000}), "more than the cap of 65536"),
    # --- the header: fields ------------------------------------------------------------------------
    Case("no_header_field", {"tensors": GOOD_ST}, "entry has no 'header' field (fields: ['tensors'])"),
    Case("no_tensors_field", {"header": good()["header"]}, "entry has no 'tensors' field (fields: ['header'])"),
    Case("no_fields_but_junk", {"junk": b"\x80\x81 not an item"}, "entry has no 'header' field (fields: ['junk'])"),
    Case("non_utf8_field_name", {b"\xff\xfe": b"x"}, "entry has no 'header' field (fields: [b'\\xff\\xfe'])"),
    Case("a_thousand_fields", {f"junk{i:04d}": b"x" for i in range(1000)},
         "entry has no 'header' field (fields: ['junk0000', "),
    Case("wrong_format", with_header(format="ludic.saw/2"), "format 'ludic.saw/2' is not 'ludic.saw/1'"),
    Case("no_format", {**good(), "header": json.dumps({"item_id": "x"}).encode()}, "format None is not"),
    Case("missing_item_id", with_header_text(json.dumps({k: v for k, v in header_dict().items()
                                                         if k != "item_id"}).encode()),
         "header misses fields ['item_id']"),
    Case("unexpected_header_field", with_header(extra=1), "header has unexpected fields ['extra']"),
    Case("item_id_int", with_header(item_id=7), "header field 'item_id' is 7, expected a string of 1 to 1024"),
    Case("item_id_empty", with_header(item_id=""), "header field 'item_id' is '', expected a string"),
    Case("item_id_huge", with_header(item_id="i" * 5000), "header field 'item_id' is 'iiii"),
    Case("group_id_list", with_header(group_id=[1]), "header field 'group_id' is [1], expected a string of 1 to "
         "1024 characters or null"),
    Case("env_null", with_header(env=None), "header field 'env' is None"),
    Case("tokenizer_int", with_header(tokenizer=3), "header field 'tokenizer' is 3"),
    Case("policy_version_str", with_header(policy_version="3"), "header field 'policy_version' is '3', expected "
         "an integer in [0, 2**63)"),
    Case("policy_version_bool", with_header(policy_version=True), "header field 'policy_version' is True"),
    Case("policy_version_float", with_header(policy_version=3.0), "header field 'policy_version' is 3.0"),
    Case("policy_version_negative", with_header(policy_version=-1), "header field 'policy_version' is -1"),
    Case("policy_version_2_64", with_header(policy_version=2**64), "header field 'policy_version' is "
         "18446744073709551616"),
    Case("weight_1e308", with_header(weight=1e308), "header field 'weight' is 1e+308, expected a finite number "
         "within +-1e+06"),
    Case("weight_bool", with_header(weight=True), "header field 'weight' is True"),
    Case("weight_str", with_header(weight="1"), "header field 'weight' is '1'"),
    Case("weight_null", with_header(weight=None), "header field 'weight' is None"),
    Case("meta_list", with_header(meta=[1]), "header field 'meta' is [1], expected an object"),
    Case("meta_reserved_pad", with_header(meta={"_pad": True}), "meta uses the trainer's reserved keys ['_pad']"),
    Case("meta_temperature_str", with_header(meta={"sampling_temperature": "hot"}),
         "meta sampling_temperature is 'hot', expected 0 (greedy) or a number in [1e-05, 100]"),
    Case("meta_temperature_tiny", with_header(meta={"sampling_temperature": 1e-300}),
         "meta sampling_temperature is 1e-300"),
    Case("foreign_tokenizer", encode_item(good_item(), item_id="x", env="e", policy_version=0, tokenizer="other"),
         "tokenizer other is not the trainer's fp-test", decoder=False),
    # --- the tensors: safetensors framing ----------------------------------------------------------
    Case("tensors_garbage", with_tensors(b"garbage bytes"), "tensors are not safetensors: the first 8 bytes "
         "declare a 2334385649822622055-byte header (cap 16384)"),
    Case("tensors_pickle", with_tensors(pickle.dumps({"input_ids": [1]})), "tensors are not safetensors"),
    Case("tensors_empty", with_tensors(b""), "tensors are not safetensors: 0 bytes, too short for a header"),
    Case("tensors_truncated_body", with_tensors(GOOD_ST[:-5]), "tensors are truncated: the arrays need 56 bytes, "
         "51 follow the header"),
    Case("tensors_truncated_header", with_tensors(GOOD_ST[:40]), "tensors are truncated: the safetensors header "
         "declares"),
    Case("tensors_trailing_bytes", with_tensors(GOOD_ST + b"abc"), "tensors carry 3 bytes beyond their declared "
         "arrays"),
    Case("tensors_header_not_json", with_tensors(st_raw(b"{nope", b"")), "tensors are not safetensors: its header "
         "is not JSON"),
    Case("tensors_header_list", with_tensors(st_raw([1], b"")), "tensors are not safetensors: the header is a JSON "
         "list"),
    Case("tensors_header_deep", with_tensors(st_raw(b"[" * 5000 + b"]" * 5000, b"")),
         "tensors are not safetensors: its header nests 5000 levels deep"),
    Case("tensors_header_nan", with_tensors(st_raw(b'{"input_ids": NaN}', b"")),
         "tensors are not safetensors: its header holds NaN"),
    Case("claims_10_to_12_elements", with_tensors(st_raw(declared(input_ids={
        "dtype": "I64", "shape": [10**12], "data_offsets": [0, 8 * 10**12]}), GOOD_BODY)),
        "input_ids has 1000000000000 entries, more than the cap of 32 tokens (the trainer's max_seq_len)"),
    Case("over_token_cap_100k", {**good(), "tensors": encode_item(good_item(100_000), item_id="x", env="e",
                                                                  policy_version=0)["tensors"]},
         "input_ids has 100000 entries, more than the cap of 32 tokens"),
    Case("offsets_lie", with_tensors(st_raw(declared(input_ids={"dtype": "I64", "shape": [4],
                                                                  "data_offsets": [0, 8]}), GOOD_BODY)),
         "input_ids declares 8 bytes for 4 I64 values (32 needed)"),
    Case("offsets_overlap", with_tensors(st_raw(declared(attention_mask={"dtype": "I8", "shape": [4],
                                                                           "data_offsets": [0, 4]}), GOOD_BODY)),
         "tensors are not safetensors: "),
    Case("entry_missing_offsets", with_tensors(st_raw(declared(input_ids={"dtype": "I64", "shape": [4]}),
                                                      GOOD_BODY)),
         "tensors entry input_ids is {'dtype': 'I64', 'shape': [4]}, not a safetensors array"),
    Case("unknown_dtype", with_tensors(st_raw(declared(input_ids={"dtype": "X99", "shape": [4],
                                                                    "data_offsets": [0, 32]}), GOOD_BODY)),
         "input_ids has dtype 'X99', expected an integer type"),
    Case("negative_shape", with_tensors(st_raw(declared(input_ids={"dtype": "I64", "shape": [-4],
                                                                     "data_offsets": [0, 32]}), GOOD_BODY)),
         "input_ids has shape [-4], expected a vector"),
    Case("bool_shape", with_tensors(st_raw(declared(input_ids={"dtype": "I64", "shape": [True],
                                                                 "data_offsets": [0, 32]}), GOOD_BODY)),
         "input_ids has shape [True], expected a vector"),
    # --- the tensors: arrays -----------------------------------------------------------------------
    Case("float_ids", with_arrays(input_ids=np.array([1.0, 2.5, 3.0, 4.0], dtype=np.float32)),
         "input_ids has dtype 'F32', expected an integer type"),
    Case("nan_float_ids", with_arrays(input_ids=np.array([1, np.nan, 3, 4], dtype=np.float64)),
         "input_ids has dtype 'F64', expected an integer type"),
    Case("bool_ids", with_arrays(input_ids=np.array([True, False, True, True])), "input_ids has dtype 'BOOL'"),
    Case("bool_attention_mask", with_arrays(attention_mask=np.ones(4, dtype=bool)),
         "attention_mask has dtype 'BOOL', expected an integer type"),
    Case("float_action_mask", with_arrays(action_mask=np.array([0, 0, 0.5, 1], dtype=np.float32)),
         "action_mask has dtype 'F32', expected an integer type"),
    Case("int_logprobs", with_arrays(actor_logprobs=np.zeros(4, dtype=np.int64)),
         "actor_logprobs has dtype 'I64', expected a float type"),
    Case("attention_mask_2d", with_arrays(attention_mask=np.ones((2, 2), dtype=np.int8)),
         "attention_mask has shape [2, 2], expected a vector"),
    Case("scalar_ids", with_arrays(input_ids=np.array(3, dtype=np.int64)), "input_ids has shape [], expected a "
         "vector"),
    Case("action_mask_7", with_arrays(action_mask=np.array([0, 7, 1, 1], dtype=np.int8)),
         "action_mask holds 7 at position 1, expected 0 or 1"),
    Case("action_mask_minus_3", with_arrays(action_mask=np.array([0, 0, 1, -3], dtype=np.int8)),
         "action_mask holds -3 at position 3, expected 0 or 1"),
    Case("attention_mask_2", with_arrays(attention_mask=np.array([1, 2, 1, 1], dtype=np.int8)),
         "attention_mask holds 2 at position 1, expected 0 or 1"),
    Case("action_on_hidden_token", with_arrays(attention_mask=np.array([1, 1, 1, 0], dtype=np.int8)),
         "action_mask marks token 3, which attention_mask hides"),
    Case("token_id_minus_5", with_arrays(input_ids=np.array([3, -5, 3, 3], dtype=np.int64)),
         "token id -5 is outside the trainer's vocabulary of 64 (position 1; an item from another model?)"),
    Case("token_id_vocab", with_arrays(input_ids=np.array([3, 3, 3, VOCAB], dtype=np.int64)),
         "token id 64 is outside the trainer's vocabulary of 64 (position 3"),
    Case("token_id_u64_max", with_arrays(input_ids=np.array([2**64 - 1, 1, 1, 1], dtype=np.uint64)),
         "token id 18446744073709551615 is outside"),
    Case("nan_logprobs", with_arrays(actor_logprobs=np.array([0, 0, np.nan, -1], dtype=np.float32)),
         "actor_logprobs holds nan at position 2 (not finite)"),
    Case("inf_logprobs", with_arrays(actor_logprobs=np.array([0, 0, -1, np.inf], dtype=np.float32)),
         "actor_logprobs holds inf at position 3 (not finite)"),
    Case("minus_inf_logprobs", with_arrays(actor_logprobs=np.array([0, 0, -np.inf, -1], dtype=np.float64)),
         "actor_logprobs holds -inf at position 2 (not finite)"),
    Case("positive_logprobs", with_arrays(actor_logprobs=np.array([0, 0, 0.5, -1], dtype=np.float32)),
         "actor_logprobs holds 0.5 at position 2 (above 0: a log-probability is <= 0)"),
    Case("huge_negative_logprobs", with_arrays(actor_logprobs=np.array([0, 0, -1e30, -1], dtype=np.float64)),
         "actor_logprobs holds -1e+30 at position 2 (below -10000)"),
    Case("mask_length_mismatch", with_arrays(attention_mask=np.ones(3, dtype=np.int8)),
         "masks must match input_ids length 4: attention_mask 3, action_mask 4"),
    Case("logprobs_length_mismatch", with_arrays(actor_logprobs=np.zeros(3, dtype=np.float32)),
         "actor_logprobs has 3 entries for 4 tokens"),
    Case("empty_arrays", with_arrays(**{k: np.zeros(0, dtype=v.dtype) for k, v in arrays().items()}),
         "input_ids is empty"),
    Case("missing_action_mask", with_arrays(action_mask=None), "tensors miss ['action_mask']"),
    Case("extra_array", with_arrays(evil=np.zeros(4, dtype=np.int64)), "tensors hold unexpected arrays ['evil']"),
]


def test_the_poison_list_is_what_we_report():
    names = [c.name for c in POISON]
    assert len(names) == len(set(names))
    print(f"\n{len(POISON)} poison entries: {', '.join(names)}")


# --- the decoder alone -----------------------------------------------------------------------------

@pytest.mark.parametrize("case", [c for c in POISON if c.decoder], ids=lambda c: c.name)
def test_decoder_names_each_poison(case):
    with pytest.raises(MalformedItem) as info:
        decode_item(case.fields, vocab_size=VOCAB, max_tokens=MAX_TOKENS)
    assert case.reason in str(info.value)


def test_good_entries_still_decode_with_every_bound_in_force():
    got = decode_item(good(), vocab_size=VOCAB, max_tokens=4)
    assert got.item.input_ids == [1, 2, 3, 4] and got.item.actor_logprobs == [0.0] * 4
    hand = decode_item(with_tensors(st_raw(declared(), GOOD_BODY)), vocab_size=VOCAB, max_tokens=MAX_TOKENS)
    assert hand.item.action_mask == [0, 0, 1, 1] and hand.item.actor_logprobs == [0, 0, -0.5, -1.25]
    meta = decode_item(with_header(meta={"sampling_temperature": 0, "reward": 1e300, "deep": [[[1]]]}))
    assert meta.item.meta["deep"] == [[[1]]]


def test_nesting_is_measured_without_recursion():
    deep = b"[" * 100_000 + b"]" * 100_000
    assert nesting_depth(deep) == 100_000
    assert nesting_depth(b'{"a": "[[[[", "b": "\\"[[["}') == 1  # brackets inside strings do not count
    with pytest.raises(MalformedItem, match="header nests 100000 levels deep, more than 16"):
        load_json(deep, what="header", max_bytes=10**7)


def test_decoding_is_total_under_random_corruption():
    """Random byte edits of a good entry: an item or `MalformedItem`, never another exception."""
    rng = random.Random(0)
    base = good()
    outcomes = {"item": 0, "malformed": 0}
    for _ in range(3000):
        fields = dict(base)
        key = rng.choice(["header", "tensors"])
        raw = bytearray(fields[key])
        for _ in range(rng.randint(1, 4)):
            op, pos = rng.random(), rng.randrange(len(raw) + 1)
            if op < 0.5 and raw:
                raw[min(pos, len(raw) - 1)] = rng.randrange(256)
            elif op < 0.75:
                raw[pos:pos] = bytes([rng.choice(b'[]{}"\\:,0e-9\xff\x00')])
            else:
                del raw[pos:]
        fields[key] = bytes(raw)
        try:
            decode_item(fields, vocab_size=VOCAB, max_tokens=MAX_TOKENS)
            outcomes["item"] += 1
        except MalformedItem:
            outcomes["malformed"] += 1
    assert outcomes["malformed"] > 2000 and sum(outcomes.values()) == 3000


def test_an_oversized_entry_is_refused_before_its_arrays_are_read():
    """A 2M-token entry (20 MB) against a 1024-token cap: refused from the
    safetensors header, allocating far less than the arrays would take."""
    n = 2_000_000
    raw = st_save({"input_ids": np.ones(n, dtype=np.int64), "attention_mask": np.ones(n, dtype=np.int8),
                   "action_mask": np.ones(n, dtype=np.int8)})
    fields = {**good(), "tensors": raw}
    tracemalloc.start()
    try:
        with pytest.raises(MalformedItem, match="input_ids has 2000000 entries, more than the cap of 1024 tokens"):
            decode_item(fields, vocab_size=VOCAB, max_tokens=1024)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, peak


# --- against a real redis-server -------------------------------------------------------------------

PW = "s3cret-test-pw"


@pytest.fixture(scope="module")
def rclient(tmp_path_factory):
    from ludic_core.queue.redis_server import LocalRedis

    server = LocalRedis(tmp_path_factory.mktemp("redis"), password=PW, appendonly=False).start()
    c = connect(server.url, password=PW, retries=5)
    yield c
    c.close()
    server.kill()


def source(stream: SAWStream, n: int = 1, **kw: Any) -> StreamBatchSource:
    return StreamBatchSource(stream, items_per_step=n, tokenizer=FP, vocab_size=VOCAB, max_tokens=MAX_TOKENS,
                             timeout_s=5, block_ms=50, **kw)


def ids(batch) -> list[str]:
    return [it.meta["item_id"] for it in batch.items]


def dead(client, stream: SAWStream) -> list[dict[bytes, bytes]]:
    return [f for _, f in client.xrange(stream.dead_key)]


@pytest.mark.redis
@pytest.mark.parametrize("case", POISON, ids=lambda c: c.name)
def test_each_poison_is_dead_lettered_and_a_restarted_consumer_goes_on(rclient, case):
    stream = SAWStream(rclient, key=f"poison:{case.name}")
    stream.ensure_group()
    first = rclient.xadd(stream.key, case.fields)
    # the old failure: a consumer read it, died decoding it, and left it pending for its successor
    rclient.xreadgroup(stream.group, "crashed-trainer", {stream.key: ">"}, count=1)
    rclient.xadd(stream.key, good("ok-1"))
    second = rclient.xadd(stream.key, case.fields)
    rclient.xadd(stream.key, good("ok-2"))

    a = source(stream)
    assert ids(a.next_batch()) == ["ok-1"]  # the pending poison is claimed, dead-lettered, passed
    del a  # killed before its checkpoint: ok-1 stays pending
    b = source(stream, 2)
    batch = b.next_batch()
    assert ids(batch) == ["ok-1", "ok-2"] and batch.meta["queue_dead_lettered"] == 1
    b.checkpoint_committed()
    assert stream.pending() == 0

    records = dead(rclient, stream)
    assert [r[b"source_id"] for r in records] == [first, second]  # 100% of the poison, each once
    for r in records:
        assert case.reason in r[b"reason"].decode(), r[b"reason"]


@pytest.mark.redis
def test_a_dead_letter_keeps_small_raw_fields_and_the_size_of_huge_ones(rclient):
    stream = SAWStream(rclient, key="poison:raw")
    stream.ensure_group()
    rclient.xadd(stream.key, {**good(), "header": b"x" * (2 << 20)})
    rclient.xadd(stream.key, good("ok"))
    assert ids(source(stream).next_batch()) == ["ok"]
    (record,) = dead(rclient, stream)
    assert record[b"reason"].startswith(b"header is 2097152 bytes, more than the cap of 65536")
    assert record[b"omitted:header"] == b"2097152 bytes" and record[b"raw:tensors"] == good()["tensors"]


@pytest.mark.redis
def test_valid_entries_around_poison_in_one_batch_all_train(rclient):
    stream = SAWStream(rclient, key="poison:batch")
    stream.ensure_group()
    for fields in (good("ok-1"), POISON[0].fields, good("ok-2"), with_header(weight=1e308), good("ok-3")):
        rclient.xadd(stream.key, fields)
    batch = source(stream, 3).next_batch()
    assert ids(batch) == ["ok-1", "ok-2", "ok-3"] and batch.meta["queue_dead_lettered"] == 2


# --- the "fails twice" rule ------------------------------------------------------------------------

@pytest.mark.redis
def test_an_entry_whose_trainers_keep_failing_is_dead_lettered_after_two_deliveries(rclient):
    """A batch that crashes the trainer (a gap no decoder check covers): two
    trainers try it, the third dead-letters it with the recorded error, and the
    run goes on with the next items."""
    stream = SAWStream(rclient, key="poison:twice")
    stream.ensure_group()
    stream.put_round("r0", [good("bad-1"), good("bad-2")])
    for attempt in range(2):
        trainer = source(stream, 2)
        assert ids(trainer.next_batch()) == ["bad-1", "bad-2"]
        trainer.record_failure(RuntimeError(f"CUDA error: device-side assert triggered (try {attempt + 1})"))
        del trainer  # the process dies; nothing is committed
    stream.put_round("r1", [good("ok-1")])
    third = source(stream)
    assert ids(third.next_batch()) == ["ok-1"]
    third.checkpoint_committed()
    assert stream.pending() == 0 and not rclient.exists(stream.failures_key)
    reasons = [r[b"reason"].decode() for r in dead(rclient, stream)]
    assert reasons == ["delivered 2 times without being trained (last error: RuntimeError: CUDA error: "
                       "device-side assert triggered (try 2))"] * 2
    assert third.totals["dead_lettered"] == 2


@pytest.mark.redis
def test_a_killed_trainer_leaves_no_error_and_the_reason_says_so(rclient):
    stream = SAWStream(rclient, key="poison:killed")
    stream.ensure_group()
    stream.put_round("r0", [good("a"), good("b")])
    for _ in range(2):
        assert ids(source(stream, 2).next_batch()) == ["a", "b"]  # kill -9 after reading: no record_failure
    stream.put_round("r1", [good("c")])
    assert ids(source(stream).next_batch()) == ["c"]
    assert [r[b"reason"].decode() for r in dead(rclient, stream)] == [
        "delivered 2 times without being trained (last error: unknown: each trainer that read it stopped before "
        "a checkpoint holding it committed)"] * 2


@pytest.mark.redis
def test_only_entries_handed_to_a_trainer_count_a_delivery(rclient):
    """Pending entries are claimed a batch at a time, so a restarted trainer
    that dies early does not use up the tries of the entries it never reached;
    items its checkpoint already holds are acked, never dead-lettered."""
    stream = SAWStream(rclient, key="poison:lazy")
    stream.ensure_group()
    stream.put_round("r0", [good(f"i{k}") for k in range(6)])
    a = source(stream, 2)
    assert ids(a.next_batch()) == ["i0", "i1"]
    state = a.state_dict()  # a checkpoint holding i0, i1 is written; the ack never happens
    assert ids(a.next_batch()) == ["i2", "i3"] and ids(a.next_batch()) == ["i4", "i5"]
    del a
    b = source(stream, 2)
    b.load_state_dict(state)
    assert ids(b.next_batch()) == ["i2", "i3"]  # i0, i1 acked as committed
    del b  # dies at once: i4, i5 were never claimed again
    counts = {r["message_id"]: r["times_delivered"] for r in
              rclient.xpending_range(stream.key, stream.group, min="-", max="+", count=10)}
    assert sorted(counts.values()) == [1, 1, 2, 2]
    c = source(stream, 2)
    assert ids(c.next_batch()) == ["i4", "i5"]
    assert all(r[b"reason"].startswith(b"delivered 2 times without being trained") for r in dead(rclient, stream))
    assert c.totals["skipped_committed"] == 0 and c.totals["dead_lettered"] == 2


@pytest.mark.redis
def test_a_timeout_says_the_actors_items_went_stale(rclient):
    """Actors that do deliver, but only items max_lag drops: the timeout says so,
    instead of only asking whether the actors run."""
    stream = SAWStream(rclient, key="poison:stale-timeout")
    stream.ensure_group()
    stream.put_round("r0", [good("a"), good("b")])  # policy version 0
    trainer = StreamBatchSource(stream, items_per_step=2, vocab_size=VOCAB, timeout_s=0.1, block_ms=20,
                                max_lag=1, trainer_version=lambda: 3)
    with pytest.raises(TimeoutError, match="0 of 2 items after 0 s; meanwhile 2 dropped as stale "
                                           r"\(max_lag 1\) and 0 dead-lettered; 2 entries added"):
        trainer.next_batch()


def test_a_batch_given_up_on_a_timeout_spends_no_tries_and_loses_nothing(rclient):
    """Actors down: trainers time out with half a batch, again and again. The
    half they collected is neither lost nor dead-lettered."""
    stream = SAWStream(rclient, key="poison:timeout")
    stream.ensure_group()
    stream.put_round("r0", [good("a")])
    for _ in range(3):  # three trainers in a row give up (a fresh one reclaims "a" each time)
        trainer = StreamBatchSource(stream, items_per_step=2, vocab_size=VOCAB, timeout_s=0.1, block_ms=20)
        with pytest.raises(TimeoutError, match="1 of 2 items after 0 s") as info:
            trainer.next_batch()
    assert "0 dropped as stale (max_lag None) and 0 dead-lettered; 1 entries added" in str(info.value)
    stream.put_round("r1", [good("b")])
    batch = trainer.next_batch()  # the same trainer asked again: the half batch it kept is still there
    assert ids(batch) == ["a", "b"] and not dead(rclient, stream)
