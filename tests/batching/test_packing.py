"""Packed micro-batches: hand-checked layouts, the budget, and the map back to items."""

import pytest
import torch

from ludic_core.batching.packing import pack_micro_batches, unpack
from ludic_core.batching.saw import SAWItem


def _item(n: int, tag: int, temperature: float | None = None) -> SAWItem:
    """`n` tokens, all equal to `tag` (so a row's layout reads off its ids)."""
    meta = {} if temperature is None else {"sampling_temperature": temperature}
    return SAWItem([tag] * n, [1] * n, [0] + [1] * (n - 1), float(tag), meta,
                   actor_logprobs=[0.0] + [-float(tag)] * (n - 1))


def test_first_fit_decreasing_by_hand():
    # lengths 6, 4, 3, 2, 2 at budget 12: rows of 6, two of them. 6 -> row 0 (full);
    # 4 -> row 1 (room 2); 3 fits nowhere and waits; 2 -> row 1 (full); nothing has room.
    items = [_item(3, 3), _item(6, 6), _item(2, 2), _item(4, 4), _item(2, 5)]
    mbs = pack_micro_batches(items, micro_token_budget=12, pad_id=0)
    assert [mb.packed.input_ids.tolist() for mb in mbs] == [
        [[6] * 6, [4] * 4 + [2] * 2],
        # what waited: rows of 3, four fit the budget: 3 | 2
        [[3] * 3, [5, 5, 0]],
    ]
    assert mbs[0].packed.position_ids.tolist() == [[0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 0, 1]]
    # the per-item view is the padded one, longest first
    assert mbs[0].input_ids.tolist() == [[6] * 6, [4, 4, 4, 4, 0, 0], [2, 2, 0, 0, 0, 0]]
    assert [mb.padded_tokens for mb in mbs] == [12, 6] and [mb.real_tokens for mb in mbs] == [12, 5]


def test_short_items_share_rows():
    items = [_item(8, 1), _item(5, 2), _item(3, 3), _item(2, 4), _item(2, 5), _item(1, 6)]
    first, second = pack_micro_batches(items, micro_token_budget=16, pad_id=9)
    # two rows of 8: 8 | 5 + 3, full; then 2, 2, 1 start rows of 2 (eight fit the budget)
    assert first.packed.input_ids.tolist() == [[1] * 8, [2] * 5 + [3] * 3]
    assert second.packed.input_ids.tolist() == [[4, 4], [5, 5], [6, 9]]
    assert first.real_tokens == first.padded_tokens == 16


def test_index_maps_each_item_back_to_its_own_positions():
    items = [_item(5, 1), _item(3, 2), _item(2, 3), _item(4, 4), _item(3, 5)]
    [mb] = pack_micro_batches(items, micro_token_budget=100, pad_id=0)
    rows = mb.packed
    # a per-position value that says which token each position predicts: the next id in the row
    nxt = rows.input_ids[:, 1:].float()
    # ... and whose position it is, to tell items apart
    pos = rows.position_ids[:, 1:].float()
    back, back_pos = unpack(nxt, rows.index), unpack(pos, rows.index)
    for b in range(len(mb.meta)):
        n = int(mb.attention_mask[b].sum())
        assert back[b, :n - 1].tolist() == mb.input_ids[b, 1:n].float().tolist()
        assert back_pos[b, :n - 1].tolist() == list(range(1, n))
    assert rows.position_ids.shape[1] == 5 and rows.input_ids.shape[0] <= 4


def test_temperatures_follow_their_items():
    items = [_item(4, 1, 0.7), _item(2, 2, 1.3), _item(2, 3, 0.0)]  # greedy rows score at 1
    [mb] = pack_micro_batches(items, micro_token_budget=8, pad_id=0)
    assert torch.equal(mb.packed.temperatures, torch.tensor([[0.7] * 4, [1.3, 1.3, 1.0, 1.0]]))


def test_item_over_budget_gets_its_own_micro_batch_and_bad_budget_is_refused():
    mbs = pack_micro_batches([_item(10, 1), _item(3, 2)], micro_token_budget=4, pad_id=0)
    assert [tuple(mb.packed.input_ids.shape) for mb in mbs] == [(1, 10), (1, 3)]
    with pytest.raises(ValueError, match="micro_token_budget"):
        pack_micro_batches([_item(3, 1)], micro_token_budget=0, pad_id=0)


def test_every_item_lands_once():
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(2, 60, (200,), generator=g).tolist()
    items = [_item(n, i) for i, n in enumerate(lengths)]
    mbs = pack_micro_batches(items, micro_token_budget=256, pad_id=-1)
    seen = sorted(float(w) for mb in mbs for w in mb.weights)
    assert seen == sorted(float(i) for i in range(200))
    assert all(mb.padded_tokens <= 256 for mb in mbs)
    assert sum(mb.real_tokens for mb in mbs) == sum(lengths)
    assert 1 - sum(lengths) / sum(mb.padded_tokens for mb in mbs) < 0.05  # little padding left
