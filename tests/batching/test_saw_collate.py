"""SAW items from rollouts and token-budget micro-batching, with hand-checked numbers."""

import pytest
import torch

from ludic_core.batching.collate import collate_micro_batches, padding_waste
from ludic_core.batching.saw import SAWItem, build_saw_batch
from ludic_core.types import Rollout, Step, TokenTrace


def _rollout(prompt_len: int, comp_len: int, *, reward: float = 1.0, logprobs: bool = True,
             version: int = 0) -> Rollout:
    trace = TokenTrace(list(range(1, prompt_len + 1)), list(range(100, 100 + comp_len)),
                       [-0.5] * comp_len if logprobs else None, "stop", version)
    return Rollout(steps=[Step(0, "o", "a", None, reward, terminated=True, trace=trace)],
                   meta={"group_id": "g"})


def test_item_layout_comes_from_the_trace_not_from_text():
    r = _rollout(3, 2)
    batch = build_saw_batch([r], [[0.7]])
    (item,) = batch.items
    assert item.input_ids == [1, 2, 3, 100, 101]
    assert item.action_mask == [0, 0, 0, 1, 1]
    assert item.attention_mask == [1] * 5
    assert item.actor_logprobs == [0.0, 0.0, 0.0, -0.5, -0.5]
    assert item.weight == 0.7 and item.meta["rollout_id"] == r.id and item.meta["policy_version"] == 0


def test_tool_turns_become_items_with_the_step_weight():
    r = _rollout(2, 1)
    r.steps[0].info["internal_traces"] = [TokenTrace([1], [7, 8], [-1.0, -1.0]).to_dict()]
    batch = build_saw_batch([r], [[2.0]])
    assert [i.input_ids for i in batch.items] == [[1, 7, 8], [1, 2, 100]]
    assert all(i.weight == 2.0 for i in batch.items)


def test_overlong_items_error_or_are_dropped_and_counted():
    rs = [_rollout(3, 2), _rollout(10, 5)]
    with pytest.raises(ValueError, match="15 tokens exceed max_seq_len=8"):
        build_saw_batch(rs, [[1.0], [1.0]], max_seq_len=8)
    batch = build_saw_batch(rs, [[1.0], [1.0]], max_seq_len=8, overlong="drop")
    assert len(batch) == 1 and batch.meta["overlong_dropped"] == 1


def test_steps_without_trace_are_counted():
    r = Rollout(steps=[Step(0, "o", "a", None, 1.0)])
    batch = build_saw_batch([r], [[1.0]])
    assert len(batch) == 0 and batch.meta["steps_without_trace"] == 1


def test_weight_count_mismatch_and_nan_weight_are_errors():
    with pytest.raises(ValueError, match="2 weights for 1 steps"):
        build_saw_batch([_rollout(1, 1)], [[1.0, 2.0]])
    with pytest.raises(ValueError, match="finite"):
        build_saw_batch([_rollout(1, 1)], [[float("nan")]])


def test_saw_item_json_round_trip():
    item = build_saw_batch([_rollout(2, 2)], [[0.25]]).items[0]
    assert SAWItem.from_dict(item.to_dict()) == item


def _item(n: int) -> SAWItem:
    return SAWItem(list(range(n)), [1] * n, [0] + [1] * (n - 1), 1.0)


def test_length_sorted_packing_under_the_budget():
    # lengths 10, 9, 4, 3, 3 with a budget of 20 padded tokens:
    #   [10, 9] -> 2 x 10 = 20   (adding the 4 would make 3 x 10 = 30 > 20)
    #   [4, 3, 3] -> 3 x 4 = 12
    # real tokens 29, padded 32 -> waste 3/32
    mbs = collate_micro_batches([_item(n) for n in (3, 10, 4, 9, 3)], micro_token_budget=20, pad_id=0)
    assert [tuple(mb.input_ids.shape) for mb in mbs] == [(2, 10), (3, 4)]
    assert padding_waste(mbs) == pytest.approx(3 / 32)
    assert mbs[1].attention_mask.tolist() == [[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 0]]
    # position 0 is never predicted: action tokens = sum of (n - 1)
    assert sum(mb.action_tokens for mb in mbs) == 9 + 8 + 3 + 2 + 2


def test_item_longer_than_budget_gets_its_own_micro_batch():
    mbs = collate_micro_batches([_item(50), _item(5)], micro_token_budget=16, pad_id=0)
    assert [tuple(mb.input_ids.shape) for mb in mbs] == [(1, 50), (1, 5)]


def test_padding_is_marked_and_logprobs_default_to_zero():
    mb = collate_micro_batches([_item(2), _item(4)], micro_token_budget=100, pad_id=9)[0]
    assert mb.input_ids[1].tolist() == [0, 1, 9, 9]
    assert mb.action_mask[1].tolist() == [0.0, 1.0, 0.0, 0.0]
    assert torch.equal(mb.actor_logprobs, torch.zeros(2, 4))


def test_cut_points_minimise_padding_not_just_fill_the_budget():
    # lengths 100, 100, 50, 50, 50, 50; budget 400; no per-batch cost.
    # Greedy filling would take [100, 100, 50, 50] (4 x 100 = 400) + [50, 50]: 500 padded for
    # 400 real (20% waste). The optimum is [100, 100] + [50, 50, 50, 50]: 200 + 200, no waste.
    items = [_item(n) for n in (50, 100, 50, 50, 100, 50)]
    mbs = collate_micro_batches(items, micro_token_budget=400, pad_id=0, batch_overhead_tokens=0)
    assert [tuple(mb.input_ids.shape) for mb in mbs] == [(2, 100), (4, 50)]
    assert padding_waste(mbs) == 0.0
    # a per-forward cost larger than the padding saved merges batches instead
    merged = collate_micro_batches([_item(n) for n in (10, 9)], micro_token_budget=400, pad_id=0,
                                   batch_overhead_tokens=5)
    assert [tuple(mb.input_ids.shape) for mb in merged] == [(2, 10)]


@pytest.mark.parametrize("version, current, max_lag, stale", [
    (5, 6, 1, False),     # one behind, one allowed
    (5, 7, 1, True),      # two behind
    (7, 7, 0, False),     # on-policy with max_lag 0
    (6, 7, 0, True),
    (None, 100, 0, False),  # unknown version: never stale
    (0, 100, None, False),  # no max_lag: never stale
])
def test_is_stale_is_the_one_rule_for_trainer_and_queue(version, current, max_lag, stale):
    from ludic_core.batching.saw import is_stale

    assert is_stale(version, current, max_lag) is stale
