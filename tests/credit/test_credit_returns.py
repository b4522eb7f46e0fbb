"""Per-rollout credit (Monte Carlo, episodic, per-step, constant) against
returns computed by hand."""

import math

import pytest

from ludic_core.credit import (
    ConstantCredit,
    CreditAssigner,
    EpisodicReturn,
    MonteCarloReturn,
    PerStepReward,
)
from ludic_core.types import Rollout, Step


def rollout(rewards, rid=None, **meta):
    steps = [
        Step(index=i, prev_obs="o", action="a", next_obs="o", reward=r)
        for i, r in enumerate(rewards)
    ]
    return Rollout(steps=steps, meta=meta, **({"id": rid} if rid else {}))


ALL = [MonteCarloReturn(), MonteCarloReturn(0.9), EpisodicReturn(), PerStepReward(), ConstantCredit()]


def test_monte_carlo_discounted():
    # rewards [0, 0, 1], gamma 0.9:
    # G_2 = 1; G_1 = 0 + 0.9 * 1 = 0.9; G_0 = 0 + 0.9 * 0.9 = 0.81
    out = MonteCarloReturn(gamma=0.9).compute([rollout([0, 0, 1])])
    assert out == [pytest.approx([0.81, 0.9, 1.0])]


def test_monte_carlo_undiscounted_is_reward_to_go():
    # rewards [1, -2, 3]: G = [1 - 2 + 3, -2 + 3, 3] = [2, 1, 3]
    # rewards [0.5]:      G = [0.5]
    out = MonteCarloReturn().compute([rollout([1, -2, 3]), rollout([0.5])])
    assert out == [[2.0, 1.0, 3.0], [0.5]]


def test_monte_carlo_gamma_zero_is_per_step():
    assert MonteCarloReturn(gamma=0.0).compute([rollout([1, 2, 3])]) == [[1.0, 2.0, 3.0]]


@pytest.mark.parametrize("gamma", [-0.1, 1.5])
def test_monte_carlo_rejects_bad_gamma(gamma):
    with pytest.raises(ValueError, match="gamma"):
        MonteCarloReturn(gamma=gamma)


def test_episodic_gives_every_step_the_total():
    # totals: 1 - 2 + 3 = 2 (three steps); 0.5 (one step); empty rollout -> no steps
    out = EpisodicReturn().compute([rollout([1, -2, 3]), rollout([0.5]), rollout([])])
    assert out == [[2.0, 2.0, 2.0], [0.5], []]


def test_per_step_reward():
    assert PerStepReward().compute([rollout([1, -2, 3]), rollout([])]) == [[1.0, -2.0, 3.0], []]


def test_constant_credit_ignores_rewards():
    assert ConstantCredit().compute([rollout([5, -7]), rollout([0])]) == [[1.0, 1.0], [1.0]]
    assert ConstantCredit(value=0.25).compute([rollout([5])]) == [[0.25]]
    with pytest.raises(ValueError, match="finite"):
        ConstantCredit(value=math.inf)


@pytest.mark.parametrize("assigner", ALL, ids=lambda a: type(a).__name__)
def test_is_a_credit_assigner_and_names_non_finite_rewards(assigner):
    assert isinstance(assigner, CreditAssigner)
    bad = [rollout([1.0]), rollout([0.0, math.nan], rid="ep-7")]
    with pytest.raises(ValueError, match=r"rollout ep-7 step 1 has non-finite reward nan"):
        assigner.compute(bad)
    with pytest.raises(ValueError, match=r"rollout ep-8 step 0 .*inf"):
        assigner.compute([rollout([math.inf], rid="ep-8")])


@pytest.mark.parametrize("assigner", ALL, ids=lambda a: type(a).__name__)
def test_empty_batch(assigner):
    assert assigner.compute([]) == []
