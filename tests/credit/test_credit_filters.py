"""drop_zero_variance_groups: groups with identical rewards carry no signal."""

import math

import pytest

from ludic_core.credit import drop_zero_variance_groups
from ludic_core.types import Rollout, Step


def rollout(rewards, group=None, rid=None, **meta):
    steps = [
        Step(index=i, prev_obs="o", action="a", next_obs="o", reward=r)
        for i, r in enumerate(rewards)
    ]
    if group is not None:
        meta["group_id"] = group
    return Rollout(steps=steps, meta=meta, **({"id": rid} if rid else {}))


def test_drops_constant_groups_and_keeps_order():
    # a: totals [1, 1]         -> all equal, dropped
    # b: totals [0, 1]         -> kept
    # c: totals [0 + 1, 1, 1]  -> all equal (per-step rewards differ, totals don't), dropped
    # d: single rollout        -> trivially constant, dropped
    a1, a2 = rollout([1], "a"), rollout([1], "a")
    b1, b2 = rollout([0], "b"), rollout([1], "b")
    c1, c2, c3 = rollout([0, 1], "c"), rollout([1], "c"), rollout([1, 0], "c")
    d1 = rollout([3], "d")
    kept, dropped = drop_zero_variance_groups([a1, b1, c1, a2, d1, b2, c2, c3])
    assert [r.id for r in kept] == [b1.id, b2.id]
    assert dropped == 3


def test_nothing_to_drop():
    rs = [rollout([0], 1), rollout([1], 1)]
    kept, dropped = drop_zero_variance_groups(rs)
    assert kept == rs and dropped == 0
    assert drop_zero_variance_groups([]) == ([], 0)


def test_errors_are_named():
    with pytest.raises(ValueError, match="rollout q has no meta"):
        drop_zero_variance_groups([rollout([1], rid="q")])
    with pytest.raises(ValueError, match=r"failed rollouts \['f'\]"):
        drop_zero_variance_groups([rollout([1], "g"), rollout([1], "g", rid="f", failed=True)])
    # NaN != NaN would otherwise make a group look informative
    with pytest.raises(ValueError, match="rollout n step 0 has non-finite"):
        drop_zero_variance_groups([rollout([math.nan], "g", rid="n"), rollout([1], "g")])
