"""ScaleRL-style hybrid normalisation (group mean, batch std) by hand."""

import math

import pytest

from ludic_core.credit import GroupNormalizedReturn, HybridNormalizedReturn
from ludic_core.types import Rollout, Step


def rollout(rewards, group=None, rid=None, **meta):
    steps = [
        Step(index=i, prev_obs="o", action="a", next_obs="o", reward=r)
        for i, r in enumerate(rewards)
    ]
    if group is not None:
        meta["group_id"] = group
    return Rollout(steps=steps, meta=meta, **({"id": rid} if rid else {}))


def test_two_groups_by_hand():
    # group a: R = [1, 0]    mean 0.5 -> c = [0.5, -0.5]
    # group b: R = [2, 2, 5] mean 3   -> c = [-1, -1, 2]
    # batch of c: mean (0.5 - 0.5 - 1 - 1 + 2) / 5 = 0
    # population var = (0.25 + 0.25 + 1 + 1 + 4) / 5 = 6.5 / 5 = 1.3; std = sqrt(1.3) = 1.140175
    # A = c / (1.140175 + eps) = [0.438529, -0.438529, -0.877058, -0.877058, 1.754116]
    rs = [rollout([1], "a"), rollout([2], "b"), rollout([0], "a"), rollout([2], "b"), rollout([1, 4], "b")]
    out = HybridNormalizedReturn().compute(rs)
    s = math.sqrt(1.3) + 1e-6
    assert s == pytest.approx(1.140176, abs=1e-6)
    assert out == [
        [pytest.approx(0.5 / s)],
        [pytest.approx(-1 / s)],
        [pytest.approx(-0.5 / s)],
        [pytest.approx(-1 / s)],
        [pytest.approx(2 / s)] * 2,
    ]
    assert out[0][0] == pytest.approx(0.438529, abs=1e-5)
    assert out[4][0] == pytest.approx(1.754116, abs=1e-5)


def test_differs_from_per_group_std():
    # per-group std gives group a +/-1 whatever its spread; hybrid keeps relative scale:
    # a: R = [0, 0.1] -> c = [-0.05, 0.05];  b: R = [0, 10] -> c = [-5, 5]
    # batch std = sqrt((2 * 0.0025 + 2 * 25) / 4) = sqrt(12.50125) = 3.535709
    rs = [rollout([0], "a"), rollout([0.1], "a"), rollout([0], "b"), rollout([10], "b")]
    hybrid = HybridNormalizedReturn(eps=0.0).compute(rs)
    grpo = GroupNormalizedReturn(eps=0.0).compute(rs)
    assert grpo == [[pytest.approx(-1)], [pytest.approx(1)], [-1.0], [1.0]]
    std = math.sqrt(12.50125)
    assert [a for (a,) in hybrid] == pytest.approx([-0.05 / std, 0.05 / std, -5 / std, 5 / std])


def test_all_groups_constant_gives_zeros():
    rs = [rollout([1], "a"), rollout([1], "a"), rollout([0], "b"), rollout([0], "b")]
    assert HybridNormalizedReturn().compute(rs) == [[0.0]] * 4


def test_same_group_checks():
    with pytest.raises(ValueError, match="rollout x has no meta"):
        HybridNormalizedReturn().compute([rollout([1], "a"), rollout([1], rid="x")])
    with pytest.raises(ValueError, match="group 'a' has a single rollout"):
        HybridNormalizedReturn().compute([rollout([1], "a"), rollout([1], "b"), rollout([2], "b")])
    with pytest.raises(ValueError, match="mismatched group sizes"):
        HybridNormalizedReturn(expected_group_size=3).compute([rollout([1], "a"), rollout([0], "a")])
    with pytest.raises(ValueError, match=r"failed rollouts \['f'\]"):
        HybridNormalizedReturn().compute([rollout([1], "a"), rollout([0], "a", rid="f", failed=True)])
    with pytest.raises(ValueError, match="rollout n step 0 has non-finite"):
        HybridNormalizedReturn().compute([rollout([1], "a"), rollout([math.inf], "a", rid="n")])


def test_empty_batch():
    assert HybridNormalizedReturn().compute([]) == []
