"""SAW items on the wire: exact round trip, and every malformed entry named."""

import json
import math
import pickle

import pytest

from ludic_core.batching.saw import SAWItem
from ludic_core.queue import FORMAT, MalformedItem, decode_item, encode_item


def item(**kw):
    base = dict(input_ids=[5, 6, 7, 8], attention_mask=[1, 1, 1, 1], action_mask=[0, 0, 1, 1], weight=-0.75,
                meta={"group_id": "g1", "rollout_id": "r1", "step_index": 2, "policy_version": 3},
                actor_logprobs=[0.0, 0.0, -0.5, -1.25])
    base.update(kw)
    return SAWItem(**base)


def test_round_trip_keeps_every_field_and_stamp():
    fields = encode_item(item(), item_id="r1:2", env="tic_tac_toe", policy_version=3, tokenizer="fp1")
    assert set(fields) == {"header", "tensors"} and all(isinstance(v, bytes) for v in fields.values())
    got = decode_item({k.encode(): v for k, v in fields.items()})  # redis hands back bytes keys
    assert (got.item_id, got.group_id, got.env, got.policy_version, got.tokenizer) == ("r1:2", "g1", "tic_tac_toe",
                                                                                      3, "fp1")
    it = got.item
    assert it.input_ids == [5, 6, 7, 8] and it.action_mask == [0, 0, 1, 1] and it.attention_mask == [1] * 4
    assert it.weight == -0.75 and it.actor_logprobs == [0.0, 0.0, -0.5, -1.25]  # exact in float32
    assert it.meta == {"group_id": "g1", "rollout_id": "r1", "step_index": 2, "policy_version": 3, "item_id": "r1:2"}
    no_lp = decode_item(encode_item(item(actor_logprobs=None), item_id="x", env="e", policy_version=0))
    assert no_lp.item.actor_logprobs is None


def test_meta_that_is_not_json_is_refused_at_the_actor():
    with pytest.raises(ValueError, match="item bad: header is not plain JSON"):
        encode_item(item(meta={"obj": object()}), item_id="bad", env="e", policy_version=0)


def good_fields():
    return encode_item(item(), item_id="r1:2", env="e", policy_version=3)


def with_header(**changes):
    f = good_fields()
    head = json.loads(f["header"])
    head.update(changes)
    return {**f, "header": json.dumps(head).encode()}


@pytest.mark.parametrize("fields, reason", [
    ({"tensors": b"x"}, "entry has no 'header' field"),
    ({"header": b"{not json", "tensors": b""}, "header is not JSON"),
    ({"header": b"[1, 2]", "tensors": b""}, "header is a JSON list"),
    (with_header(format="other/9"), "format 'other/9' is not 'ludic.saw/1'"),
    (with_header(policy_version="3"), "header field 'policy_version' is '3'"),
    (with_header(weight=None), "header field 'weight' is None"),
    ({**good_fields(), "tensors": b"garbage bytes"}, "tensors are not safetensors"),
    ({**good_fields(), "tensors": pickle.dumps({"input_ids": [1]})}, "tensors are not safetensors"),
])
def test_malformed_entries_name_the_problem(fields, reason):
    with pytest.raises(MalformedItem, match=reason.replace("(", r"\(").replace("[", r"\[")):
        decode_item(fields)


def test_non_finite_weight_and_foreign_vocabulary():
    f = good_fields()
    head = json.loads(f["header"])
    head["weight"] = math.inf
    with pytest.raises(MalformedItem, match="header holds Infinity, which JSON does not allow"):
        decode_item({**f, "header": json.dumps(head).encode()})
    with pytest.raises(MalformedItem, match="token id 8 is outside the trainer's vocabulary of 8"):
        decode_item(good_fields(), vocab_size=8)
    assert decode_item(good_fields(), vocab_size=9).item.input_ids[-1] == 8
    assert FORMAT == "ludic.saw/1"


def test_mismatched_lengths_are_malformed_not_a_crash():
    from safetensors.numpy import save
    import numpy as np

    f = good_fields()
    f["tensors"] = save({"input_ids": np.array([1, 2, 3]), "attention_mask": np.array([1, 1], dtype=np.int8),
                         "action_mask": np.array([0, 1, 1], dtype=np.int8)})
    with pytest.raises(MalformedItem, match="masks must match input_ids length 3"):
        decode_item(f)
