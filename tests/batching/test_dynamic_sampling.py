"""DAPO dynamic sampling: a step draws request batches until enough groups carry signal."""

import pytest

from ludic_core.algorithms import build_algorithm, make_grpo
from ludic_core.batching.sources import RolloutBatchSource, group_signal, signal_groups
from ludic_core.config import DynamicSampling, GRPOConfig
from ludic_core.credit import drop_zero_variance_groups
from ludic_core.types import Rollout, Step, TokenTrace

# Per schedule index: the returns of each group of that request batch (two episodes per group).
SCHEDULE = {
    0: [(1.0, 1.0), (0.0, 0.0)],  # no signal
    1: [(1.0, 0.0), (0.0, 0.0)],  # one group with a spread
    2: [(1.0, -1.0), (0.5, 0.0)],  # two
    3: [(1.0, 0.0), (1.0, 0.0)],
}


def _episode(reward: float, group: str) -> Rollout:
    trace = TokenTrace([1, 2, 3], [100, 101], [-0.5, -0.5], "stop", 0)
    return Rollout(steps=[Step(0, "o", "a", None, reward, terminated=True, trace=trace)], meta={"group_id": group})


class _ScheduleEngine:
    """Plays the schedule above: a pure-logic stand-in for the rollout engine."""

    def __init__(self):
        self.calls: list[int] = []

    async def generate_rollouts(self, requests, *, max_steps, strategy=None):
        (index,) = requests
        self.calls.append(index)
        return [_episode(r, f"b{index}g{g}") for g, rewards in enumerate(SCHEDULE[index]) for r in rewards]


def _source(dynamic):
    engine = _ScheduleEngine()
    return engine, RolloutBatchSource(engine, lambda i: [i], make_grpo(dynamic_sampling=dynamic), max_steps=1)


def test_signal_groups_counts_groups_with_a_return_spread():
    assert signal_groups([_episode(r, f"g{g}") for g, rs in enumerate(SCHEDULE[2] + SCHEDULE[0]) for r in rs]) == 2


def test_draws_until_enough_groups_carry_signal():
    engine, source = _source(DynamicSampling(min_groups=2, max_draws=5))
    batch = source.next_batch()
    assert engine.calls == [0, 1, 2]  # signal after each draw: 0, 1, 3
    assert batch.meta["draws"] == 3 and batch.meta["signal_groups"] == 3
    assert batch.meta["groups_filtered"] == 3  # the three groups without a spread are not trained on
    assert len(batch.items) == 6 and {i.meta["group_id"] for i in batch.items} == {"b1g0", "b2g0", "b2g1"}
    assert batch.meta["rollouts"] == 12
    # the next step continues the schedule where this one stopped (resumable: batch_index is the state)
    assert source.state_dict() == {"batch_index": 3}
    assert source.next_batch().meta["draws"] == 1 and engine.calls == [0, 1, 2, 3]


def test_the_cap_stops_drawing_and_the_shortfall_is_counted():
    engine, source = _source(DynamicSampling(min_groups=4, max_draws=2))
    batch = source.next_batch()
    assert engine.calls == [0, 1]
    assert batch.meta["draws"] == 2 and batch.meta["signal_groups"] == 1 and len(batch.items) == 2


def test_off_means_one_draw_and_every_group_trained_on():
    engine, source = _source(None)
    batch = source.next_batch()
    assert engine.calls == [0] and "draws" not in batch.meta and len(batch.items) == 4
    # still counted, so a run shows how much of each batch carries signal: none of schedule 0's two groups
    assert batch.meta["groups"] == 2 and batch.meta["signal_groups"] == 0


def test_group_signal_counts_groups_and_those_with_a_spread():
    batch = [_episode(r, f"g{g}") for g, rs in enumerate(SCHEDULE[1] + SCHEDULE[2]) for r in rs]
    assert group_signal(batch) == {"groups": 4, "signal_groups": 3}
    # a failed episode is left out: g0's remaining episode alone has no spread
    batch[0].meta["failed"] = True
    assert group_signal(batch) == {"groups": 4, "signal_groups": 2}
    # not grouped (no group ids, or every id once): nothing to report rather than a misleading 0
    assert group_signal([_episode(1.0, f"solo{i}") for i in range(3)]) == {}
    assert group_signal([Rollout(steps=b.steps) for b in batch]) == {}
    assert group_signal([]) == {}


def test_named_in_the_algorithm_config():
    cfg = GRPOConfig.model_validate({"dynamic_sampling": {"min_groups": 8}})
    alg = build_algorithm(cfg)
    assert alg.dynamic_sampling == DynamicSampling(min_groups=8, max_draws=4)
    assert alg.rollout_filters == [drop_zero_variance_groups]
    assert build_algorithm(GRPOConfig()).rollout_filters == []
    with pytest.raises(ValueError, match="min_groups"):
        GRPOConfig.model_validate({"dynamic_sampling": {"min_groups": 0}})


def test_the_group_size_is_the_algorithms_stated_once():
    """Without a strategy the source draws the algorithm's groups; a strategy of another size is refused."""
    from ludic_core.rollout import GRPORequestStrategy

    grpo = make_grpo(group_size=4)
    drawn = RolloutBatchSource(_ScheduleEngine(), lambda i: [i], grpo, max_steps=1, strategy_seed=3).strategy
    assert isinstance(drawn, GRPORequestStrategy) and drawn.group_size == 4
    assert RolloutBatchSource(_ScheduleEngine(), lambda i: [i], make_grpo(), max_steps=1).strategy is None
    with pytest.raises(ValueError, match="groups of 8 but algorithm 'grpo' has group_size=4: leave strategy out"):
        RolloutBatchSource(_ScheduleEngine(), lambda i: [i], grpo, max_steps=1, strategy=GRPORequestStrategy(8))
