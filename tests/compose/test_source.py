"""The one rollout-source builder: a synchronous stage and a pipeline actor draw the
seed blocks and groups their configs say, from the same code."""

from ludic_core.algorithms import make_grpo, make_reinforce
from ludic_core.compose.configs import AgentConfig, EnvConfig, SeedSchedule
from ludic_core.compose.source import rollout_source
from ludic_core.inference import ScriptedChatClient
from ludic_core.rollout import GRPORequestStrategy, IdentityStrategy

ENV, AGENT = EnvConfig(name="tic_tac_toe"), AgentConfig(max_turns=9)
SCHEDULE = SeedSchedule(start=1_000, stride=1)


def _source(group_size=1, **kw):
    algorithm = make_grpo(group_size=group_size) if group_size > 1 else make_reinforce()
    return rollout_source(ENV, AGENT, SCHEDULE, algorithm=algorithm, client=ScriptedChatClient(lambda m: "1"),
                          max_seq_len=64, **kw)


def test_draw_i_plays_block_first_draw_plus_i_of_the_schedule():
    stage = _source(group_size=1, requests_per_draw=3)
    assert [r.env_seed for r in stage.make_requests(0)] == [1000, 1001, 1002]
    assert [r.env_seed for r in stage.make_requests(2)] == [1006, 1007, 1008]
    # an actor's round r starts at its own block (first_draw = r * draws per round): no overlap with round r-1
    actor = _source(group_size=1, requests_per_draw=3, first_draw=64)
    assert [r.env_seed for r in actor.make_requests(0)] == [1192, 1193, 1194]
    assert stage.max_steps == AGENT.max_turns and stage.max_seq_len == 64


def test_groups_only_when_the_algorithm_compares_samples_of_one_prompt():
    """The algorithm draws its own groups: the group size is stated once, in its config."""
    assert isinstance(_source(group_size=1, requests_per_draw=2).strategy, IdentityStrategy)
    grouped = _source(group_size=4, requests_per_draw=2, strategy_seed=7).strategy
    assert isinstance(grouped, GRPORequestStrategy) and grouped.group_size == 4
    # the strategy's seed: the schedule's start unless told (an actor passes start + round)
    a, b = _source(group_size=4, requests_per_draw=2).strategy, GRPORequestStrategy(4, seed=SCHEDULE.start)
    assert a._rng.random() == b._rng.random()
