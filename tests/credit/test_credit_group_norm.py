"""GRPO group-normalised advantages against numbers computed by hand."""

import math

import pytest

from ludic_core.credit import GroupNormalizedReturn
from ludic_core.types import Rollout, Step


def rollout(rewards, group=None, rid=None, **meta):
    steps = [
        Step(index=i, prev_obs="o", action="a", next_obs="o", reward=r)
        for i, r in enumerate(rewards)
    ]
    if group is not None:
        meta["group_id"] = group
    return Rollout(steps=steps, meta=meta, **({"id": rid} if rid else {}))


def test_one_group_population_std():
    # R = [1, 0, 0.5, 0.5]; mean = 2 / 4 = 0.5
    # centred = [0.5, -0.5, 0, 0]; population var = (0.25 + 0.25) / 4 = 0.125
    # std = sqrt(0.125) = 0.353553; A = centred / (std + 1e-6) = [1.414210, -1.414210, 0, 0]
    rs = [rollout([1], "g"), rollout([0], "g"), rollout([0.5], "g"), rollout([0.5], "g")]
    out = GroupNormalizedReturn().compute(rs)
    a = 0.5 / (math.sqrt(0.125) + 1e-6)
    assert a == pytest.approx(1.414210, abs=1e-6)
    assert out == [[pytest.approx(a)], [pytest.approx(-a)], [0.0], [0.0]]


def test_every_step_gets_the_rollout_advantage_and_groups_are_independent():
    # group "a": R = [0 + 1, 0] = [1, 0]; mean 0.5, std 0.5 -> A = [+1, -1] (eps 0)
    # group "b": R = [3, 5];  mean 4,   std 1   -> A = [-1, +1]
    # interleaved order must not matter
    rs = [rollout([0, 1], "a"), rollout([3], "b"), rollout([0, 0, 0], "a"), rollout([5], "b")]
    out = GroupNormalizedReturn(eps=0.0).compute(rs)
    assert out == [[1.0, 1.0], [-1.0], [-1.0, -1.0, -1.0], [1.0]]


def test_without_std_is_mean_centred_only():
    # R = [1, 0, 0.5, 0.5] - 0.5 = [0.5, -0.5, 0, 0]
    rs = [rollout([r], 7) for r in (1, 0, 0.5, 0.5)]
    assert GroupNormalizedReturn(normalize_std=False).compute(rs) == [[0.5], [-0.5], [0.0], [0.0]]


def test_zero_variance_group_gets_zero_advantage_not_nan():
    # R = [1, 1]: centred [0, 0], std 0 -> 0 / (0 + eps) = 0
    assert GroupNormalizedReturn().compute([rollout([1], "g"), rollout([1], "g")]) == [[0.0], [0.0]]


def test_missing_group_id_names_the_rollout():
    with pytest.raises(ValueError, match="rollout lonely has no meta\\['group_id'\\]"):
        GroupNormalizedReturn().compute([rollout([1], "g"), rollout([0], "g"), rollout([1], rid="lonely")])


def test_singleton_group_names_the_group():
    rs = [rollout([1], "g"), rollout([0], "g"), rollout([1], "solo")]
    with pytest.raises(ValueError, match="group 'solo' has a single rollout.*no baseline"):
        GroupNormalizedReturn().compute(rs)


def test_expected_group_size_mismatch_names_group_and_sizes():
    rs = [rollout([1], "a"), rollout([0], "a"), rollout([1], "b"), rollout([0], "b"), rollout([0], "b")]
    with pytest.raises(ValueError, match=r"mismatched group sizes: expected 2, got \{'b': 3\}"):
        GroupNormalizedReturn(expected_group_size=2).compute(rs)
    # unset -> unequal sizes are allowed
    assert len(GroupNormalizedReturn().compute(rs)) == 5


def test_failed_rollouts_are_refused_by_name():
    rs = [rollout([1], "g"), rollout([0], "g", rid="dead", failed=True, error="boom")]
    with pytest.raises(ValueError, match=r"failed rollouts \['dead'\]"):
        GroupNormalizedReturn().compute(rs)


def test_nan_reward_is_named():
    rs = [rollout([1], "g"), rollout([0, math.nan], "g", rid="r2")]
    with pytest.raises(ValueError, match="rollout r2 step 1 has non-finite reward"):
        GroupNormalizedReturn().compute(rs)


def test_bad_config():
    with pytest.raises(ValueError, match="expected_group_size"):
        GroupNormalizedReturn(expected_group_size=1)
    with pytest.raises(ValueError, match="eps"):
        GroupNormalizedReturn(eps=-1.0)


def test_self_play_seats_are_grouped_apart():
    # two games of one group, two seats: X wins game 1, O wins game 2 (returns +1/-1).
    # Per seat: X R = [1, -1] -> A = [+1, -1]; O R = [-1, 1] -> A = [-1, +1] (eps 0).
    # Pooled, the group would hold 4 rollouts of mean 0, and its size check would refuse it.
    rs = [rollout([1], "g", agent_id="X"), rollout([-1], "g", agent_id="O"),
          rollout([-1], "g", agent_id="X"), rollout([1], "g", agent_id="O")]
    out = GroupNormalizedReturn(eps=0.0, expected_group_size=2).compute(rs)
    assert out == [[1.0], [-1.0], [-1.0], [1.0]]
    # one seat alone (single-agent envs name their agent too) keys by the group only
    solo = [rollout([1], "g", agent_id="agent"), rollout([0], "g", agent_id="agent")]
    assert GroupNormalizedReturn(eps=0.0, expected_group_size=2).compute(solo) == [[1.0], [-1.0]]
