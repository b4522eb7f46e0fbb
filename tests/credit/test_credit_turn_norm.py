"""Per-turn group baselines (`TurnNormalizedReturn`, GRPO credit='turn') by hand."""

import math

import pytest

from ludic_core.algorithms import build_algorithm
from ludic_core.config import GRPOConfig
from ludic_core.credit import GroupNormalizedReturn, TurnNormalizedReturn
from ludic_core.types import Rollout, Step


def rollout(rewards, group="g", rid=None):
    steps = [Step(index=i, prev_obs="o", action="a", next_obs="o", reward=r) for i, r in enumerate(rewards)]
    return Rollout(steps=steps, meta={"group_id": group}, **({"id": rid} if rid else {}))


def test_turn_baselines_by_hand():
    # a game of 3 turns won (+1 at the end), one of 2 turns lost (-1), one of 3 turns drawn (0).
    # rewards-to-go (gamma 1): a = [1, 1, 1], b = [-1, -1], c = [0, 0, 0]
    # turn 0: {1, -1, 0} mean 0 -> centred [1, -1, 0]; turn 1: same
    # turn 2: only a and c reached it: {1, 0} mean 0.5 -> [0.5, -0.5]
    rs = [rollout([0, 0, 1]), rollout([0, -1]), rollout([0, 0, 0])]
    out = TurnNormalizedReturn(normalize_std=False).compute(rs)
    assert out == [[1.0, 1.0, 0.5], [-1.0, -1.0], [0.0, 0.0, -0.5]]


def test_discount_and_std_by_hand():
    # gamma 0.5: a = [0, 0, 1] -> G = [0.25, 0.5, 1]; b = [0, 1] -> G = [0.5, 1]
    # turn 0: {0.25, 0.5} mean 0.375, pop std 0.125 -> [-1, +1]
    # turn 1: {0.5, 1}    mean 0.75,  pop std 0.25  -> [-1, +1]
    # turn 2: only a reached it -> no baseline, weight 0
    rs = [rollout([0, 0, 1]), rollout([0, 1])]
    out = TurnNormalizedReturn(gamma=0.5, eps=0.0).compute(rs)
    assert out == [[-1.0, -1.0, 0.0], [1.0, 1.0]]


def test_one_turn_episodes_match_episode_credit():
    rs = [rollout([r], g) for r, g in ((1, "x"), (0, "x"), (0.5, "x"), (2, "y"), (-1, "y"))]
    assert TurnNormalizedReturn().compute(rs) == GroupNormalizedReturn().compute(rs)


def test_groups_are_independent_and_checked():
    rs = [rollout([1], "a"), rollout([5, 0], "b"), rollout([0], "a"), rollout([3, 0], "b")]
    assert TurnNormalizedReturn(normalize_std=False).compute(rs) == [[0.5], [1.0, 0.0], [-0.5], [-1.0, 0.0]]
    with pytest.raises(ValueError, match="mismatched group sizes: expected 3"):
        TurnNormalizedReturn(expected_group_size=3).compute(rs)
    with pytest.raises(ValueError, match="non-finite reward"):
        TurnNormalizedReturn().compute([rollout([math.nan]), rollout([0])])
    with pytest.raises(ValueError, match="gamma must be in"):
        TurnNormalizedReturn(gamma=1.5)


def test_grpo_config_selects_the_credit():
    turn = build_algorithm(GRPOConfig(credit="turn", gamma=0.9, normalize_std=False, loss_reduction="sequence"))
    assert isinstance(turn.credit_assigner, TurnNormalizedReturn)
    assert (turn.credit_assigner.gamma, turn.credit_assigner.normalize_std) == (0.9, False)
    assert turn.loss.reduction == "sequence"
    assert isinstance(build_algorithm(GRPOConfig()).credit_assigner, GroupNormalizedReturn)
    with pytest.raises(ValueError, match="gamma=0.9 discounts per-turn returns: it needs credit='turn'"):
        GRPOConfig(gamma=0.9)
