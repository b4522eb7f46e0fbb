"""Branching: after each draw, one group per state the drawn episodes reached,
restarted there through the env's `branch_kwargs` (real engine, env and credit;
a scripted policy)."""

import json
import random

import pytest

from ludic_core.algorithms import make_grpo, make_reinforce
from ludic_core.batching.branching import BranchingBatchSource
from ludic_core.compose.configs import AgentConfig, BranchConfig, ComponentConfig, EnvConfig, SeedSchedule
from ludic_core.compose.source import rollout_source
from ludic_core.envs.tic_tac_toe.env import TicTacToeEnv, legal_moves, parse_observation
from ludic_core.inference import ScriptedChatClient
from ludic_core.models.tiny import build_byte_tokenizer

ENV = EnvConfig(name="tic_tac_toe", kwargs={"agent_mark": "alternate", "move_shaping": 0.4, "outcome_weight": 0.0})
AGENT = AgentConfig(system_prompt="", max_turns=9, max_parse_failures=1,
                    parser=ComponentConfig(name="xml_tag", kwargs={"tag": "move"}),
                    context=ComponentConfig(name="sliding_window", kwargs={"keep_last": 1}))


def _first_free(messages):
    board, _ = parse_observation(messages[-1]["content"])
    return f"<move>{legal_moves(board)[0]}</move>"


def _any_free(seed):
    rng = random.Random(seed)

    def policy(messages):
        board, _ = parse_observation(messages[-1]["content"])
        return f"<move>{rng.choice(legal_moves(board))}</move>"
    return policy


def _source(states=3, algorithm=None, env=ENV, policy=_first_free):
    client = ScriptedChatClient(policy, build_byte_tokenizer())
    return rollout_source(env, AGENT, SeedSchedule(start=40), algorithm or make_grpo(group_size=2), client,
                          requests_per_draw=2, max_seq_len=256, branch=BranchConfig(states=states))


def test_branch_kwargs_restart_a_one_move_game_at_the_board_shown():
    obs = "Board:\nX23\n4O6\n789\nYou are X. Your move."
    assert TicTacToeEnv.branch_kwargs(obs) == {"start_board": "X...O....", "agent_moves": 1, "random_start": 0}
    assert TicTacToeEnv.branch_kwargs("no board here") is None
    assert TicTacToeEnv.branch_kwargs("Board:\nXXX\nOO6\n789\nYou are O. You lost.") is None  # over


def test_one_group_per_distinct_state_the_draw_reached():
    source = _source(states=3, policy=_any_free(0))
    assert isinstance(source, BranchingBatchSource)
    batch = source.next_batch()
    trunk, branches = source.last_rollouts[:4], source.last_rollouts[4:]  # 2 requests x group of 2, then branches
    assert all(len(r.steps) >= 2 for r in trunk)  # whole games
    reached = {parse_observation(s.prev_obs)[0] for r in trunk for s in r.steps}
    assert len(branches) == 3 * 2 and batch.meta["branch_states"] == 3.0
    starts = {}
    for r in branches:
        assert len(r.steps) == 1 and r.steps[0].terminated  # one move: cut there, or the game it ended
        starts.setdefault(r.meta["group_id"], set()).add(parse_observation(r.steps[0].prev_obs)[0])
    assert len(starts) == 3 and all(len(b) == 1 for b in starts.values())  # a group: one board
    boards = {b for s in starts.values() for b in s}
    assert len(boards) == 3 and boards <= reached  # distinct boards, each one the draw reached
    # stats: the drawn episodes' as without branching, the branches' apart
    assert batch.meta["rollouts"] == 4.0 and batch.meta["branch_rollouts"] == 6.0
    assert batch.meta["branch_rollouts_failed"] == 0.0
    assert batch.meta["branch_groups"] == 3.0
    # both are prepared together: a branch group whose moves differ in regret is trained on
    spread = {g for g in starts if len({r.total_reward for r in branches if r.meta["group_id"] == g}) > 1}
    trained = {i.meta["group_id"] for i in batch.items}
    assert spread and spread <= trained and trained <= {r.meta["group_id"] for r in source.last_rollouts}


def test_the_states_depend_only_on_the_draw_and_the_step():
    a, b = _source(), _source()
    starts = []
    for source in (a, b):
        source.next_batch()
        starts.append(sorted(r.steps[0].prev_obs for r in source.last_rollouts[4:]))
    assert starts[0] == starts[1]
    resumed = _source()
    resumed.load_state_dict(json.loads(json.dumps(a.state_dict())))  # as a checkpoint holds it
    resumed.next_batch()
    a.next_batch()
    assert sorted(r.steps[0].prev_obs for r in resumed.last_rollouts[4:]) == \
        sorted(r.steps[0].prev_obs for r in a.last_rollouts[4:])
    # and the same group ids, drawn and branched: not the first step's again
    assert [r.meta["group_id"] for r in resumed.last_rollouts] == [r.meta["group_id"] for r in a.last_rollouts]


def test_fewer_states_than_asked_branches_them_all():
    batch = _source(states=1000).next_batch()
    assert 1 <= batch.meta["branch_states"] < 1000


class BadKwargsEnv(TicTacToeEnv):
    """Restarts with a kwarg the env refuses: every branched episode would fail."""

    @staticmethod
    def branch_kwargs(obs):
        return {"agent_moves": 99}


class InstanceMethodEnv(TicTacToeEnv):
    def branch_kwargs(self, obs):  # needs an env: branching asks the class
        return None


class NotJSONEnv(TicTacToeEnv):
    @staticmethod
    def branch_kwargs(obs):
        return {"start_board": {1, 2}}


def test_an_env_that_cannot_branch_and_an_algorithm_without_groups_are_refused():
    with pytest.raises(ValueError, match="'arithmetic' cannot branch.*branch_kwargs"):
        _source(env=EnvConfig(name="arithmetic"))
    with pytest.raises(ValueError, match="draws no groups"):
        _source(algorithm=make_reinforce())
    with pytest.raises(ValueError, match="states"):
        BranchConfig(states=0)
    with pytest.raises(ValueError, match="must be a staticmethod"):
        _source(env=EnvConfig(name=f"{__name__}:InstanceMethodEnv"))


def test_branches_that_all_fail_stop_the_step_naming_the_env_error():
    source = _source(env=EnvConfig(name=f"{__name__}:BadKwargsEnv", kwargs={"agent_mark": "alternate"}))
    with pytest.raises(ValueError, match=r"every branched episode failed.*'agent_moves': 99.*agent_moves must be"):
        source.next_batch()
    with pytest.raises(TypeError, match="branch_kwargs must return JSON values"):
        _source(env=EnvConfig(name=f"{__name__}:NotJSONEnv")).next_batch()


def test_exploring_starts_in_the_env_config_are_switched_off_in_the_branches():
    env = ENV.model_copy(update={"kwargs": {**ENV.kwargs, "random_start": 2}})
    batch = _source(env=env).next_batch()
    assert batch.meta["branch_rollouts_failed"] == 0.0 and batch.meta["branch_episode_len_mean"] == 1.0

