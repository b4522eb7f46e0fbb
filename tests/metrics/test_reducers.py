"""Generic evaluation reducers against numbers computed by hand."""

import itertools
import math
from fractions import Fraction

import pytest

from ludic_core.envs.tic_tac_toe import TicTacToeEnv
from ludic_core.metrics import env_metrics, episode_metrics, pass_at_k
from ludic_core.types import Rollout, Step, TokenTrace


def step(reward=0.0, *, tokens=None, parse_error=False, **info):
    if parse_error:
        info["parse_error"] = True
    trace = None if tokens is None else TokenTrace([0], list(range(tokens)))
    return Step(
        index=0, prev_obs="o", action="a", next_obs="o", reward=reward, info=info, trace=trace
    )


def rollout(*steps, **meta):
    return Rollout(steps=list(steps), meta=meta)


def failed(**meta):
    return Rollout(meta={**meta, "failed": True, "error": "RuntimeError: boom"})


# ------------------------------------------------------------------ pass@k


@pytest.mark.parametrize(
    "n, c, k, expected",
    [
        (5, 2, 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
        (10, 3, 5, 11 / 12),  # 1 - C(7,5)/C(10,5) = 1 - 21/252 = 1 - 1/12
        (4, 0, 2, 0.0),  # no correct sample: 1 - C(4,2)/C(4,2)
        (5, 4, 2, 1.0),  # n-c = 1 < k: every pair holds a correct one
        (3, 1, 3, 1.0),  # k = n: the one draw is everything
        (4, 3, 1, 0.75),  # k = 1 is c/n
        (7, 2, 1, 2 / 7),
    ],
)
def test_pass_at_k_closed_form(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("n, c, k", [(4, 1, 2), (5, 2, 3), (6, 3, 2), (6, 1, 5), (3, 0, 1)])
def test_pass_at_k_matches_brute_force_over_k_subsets(n, c, k):
    # samples 0..c-1 are correct; count the k-subsets holding at least one
    subsets = list(itertools.combinations(range(n), k))
    hits = sum(any(i < c for i in s) for s in subsets)
    assert pass_at_k(n, c, k) == pytest.approx(hits / len(subsets), abs=1e-12)


def test_pass_at_k_is_stable_where_binomials_overflow_floats():
    # C(4000, 200) ~ 1e343 > float max ~ 1.8e308, so the ratio cannot be taken in floats;
    # the exact value comes from Fractions
    with pytest.raises(OverflowError):
        float(math.comb(4000, 200))
    exact = 1 - Fraction(math.comb(3900, 200), math.comb(4000, 200))
    assert pass_at_k(4000, 100, 200) == pytest.approx(float(exact), rel=1e-12)


@pytest.mark.parametrize(
    "args, match",
    [
        ((3, 1, 4), "k=4 exceeds .* n=3"),
        ((3, 4, 1), "c=4 .* n=3"),
        ((-1, 0, 1), "n must be >= 0"),
        ((3, -1, 1), "c must be >= 0"),
        ((3, 1, -2), "k must be >= 0"),
        ((3, 1, 0), "k must be >= 1"),
    ],
)
def test_pass_at_k_bad_arguments(args, match):
    with pytest.raises(ValueError, match=match):
        pass_at_k(*args)


def test_pass_at_k_wants_ints():
    with pytest.raises(TypeError, match="k must be an int"):
        pass_at_k(3, 1, 1.5)


# --------------------------------------------------------- episode_metrics


def two_groups():
    """Group a: success, parse error, failed. Group b: success (no trace), loss, success.

    a1 return 0 + 1 = 1    turns 2  tokens 3 + 2 = 5, and 7 in a tool-calling turn before the first answer;
                                    two tool calls, one of which failed
    a2 return 0            turns 1  tokens 4          1 parse error; one tool call, ok
    a3 failed (no steps)
    b1 return .5 + .5 = 1  turns 2  tokens 0 (no trace)
    b2 return -1           turns 1  tokens 1          1 parse error
    b3 return 1            turns 1  tokens 6
    """
    a = [
        rollout(step(0.0, tokens=3, internal_traces=[TokenTrace([0], list(range(7))).to_dict()],
                     tool_calls=[{"name": "f", "ok": True}, {"name": "f", "ok": False}]),
                step(1.0, tokens=2), group_id="a"),
        rollout(step(0.0, tokens=4, parse_error=True, tool_calls=[{"name": "f", "ok": True}]), group_id="a"),
        failed(group_id="a"),
    ]
    b = [
        rollout(step(0.5), step(0.5), group_id="b"),
        rollout(step(-1.0, tokens=1, parse_error=True), group_id="b"),
        rollout(step(1.0, tokens=6), group_id="b"),
    ]
    return [a[0], b[0], a[1], b[1], a[2], b[2]]  # interleaved: grouping is by id, not order


def test_episode_metrics_every_key_by_hand():
    out = episode_metrics(two_groups(), k=2)
    assert out == {
        "episodes": 6.0,
        "failed": 1.0,
        "failed_rate": pytest.approx(1 / 6),
        # the 5 that ran: returns 1, 0, 1, -1, 1
        "mean_return": pytest.approx(2 / 5),
        "success_rate": pytest.approx(3 / 5),
        # steps 2 + 1 + 2 + 1 + 1 = 7, of which 2 failed to parse
        "parse_error_rate": pytest.approx(2 / 7),
        "mean_turns": pytest.approx(7 / 5),
        # tokens (5 + 7) + 4 + 0 + 1 + 6 = 23
        "mean_completion_tokens": pytest.approx(23 / 5),
        # calls 2 + 1, one failed, over the 5 episodes that ran
        "tool_calls_per_episode": pytest.approx(3 / 5),
        "tool_errors_per_episode": pytest.approx(1 / 5),
        # a: n=3, c=1 (the failed one is a miss) -> 1/3;  b: n=3, c=2 -> 2/3;  mean 1/2
        "pass@1": pytest.approx(0.5),
        # a: 1 - C(2,2)/C(3,2) = 2/3;  b: n-c = 1 < 2 -> 1;  mean 5/6
        "pass@2": pytest.approx(5 / 6),
    }


def test_k1_reports_only_pass_at_1_and_k_equal_group_size_is_allowed():
    assert "pass@2" not in episode_metrics(two_groups())
    assert episode_metrics(two_groups())["pass@1"] == pytest.approx(0.5)
    # k = 3 = group size: each group holds a success, so both score 1
    out = episode_metrics(two_groups(), k=3)
    assert out["pass@3"] == pytest.approx(1.0) and out["pass@1"] == pytest.approx(0.5)


def test_k_larger_than_a_group_names_k_and_the_smallest_group():
    with pytest.raises(ValueError, match="k=4 .* group_id='a' has only 3"):
        episode_metrics(two_groups(), k=4)
    # unequal groups: a has 3, c has 1
    rs = two_groups()[:5:2] + [rollout(step(1.0), group_id="c")]
    with pytest.raises(ValueError, match="pass@2 .* group_id='c' has only 1"):
        episode_metrics(rs, k=2)
    assert episode_metrics(rs)["pass@1"] == pytest.approx((1 / 3 + 1) / 2)  # k=1 still fine


def test_grouping_falls_back_to_request_index_then_to_each_rollout():
    # the engine writes group_id=None when no strategy grouped the requests
    rs = [
        rollout(step(1.0), group_id=None, request_index=0),
        rollout(step(0.0), group_id=None, request_index=0),
        rollout(step(1.0), group_id=None, request_index=1),
    ]
    # request 0: 1/2; request 1: 1/1; mean 3/4 (a flat mean over samples would say 2/3)
    assert episode_metrics(rs)["pass@1"] == pytest.approx(0.75)
    # no lineage at all: every rollout is its own group of 1
    alone = [rollout(step(1.0)), rollout(step(0.0))]
    assert episode_metrics(alone)["pass@1"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="k=2 .* has only 1"):
        episode_metrics(alone, k=2)


def test_success_threshold_and_an_all_failed_batch():
    rs = [rollout(step(0.5)), rollout(step(0.4))]
    assert episode_metrics(rs, success_threshold=0.5)["success_rate"] == 0.5
    out = episode_metrics([failed(group_id="g"), failed(group_id="g")])
    assert out == {
        "episodes": 2.0, "failed": 2.0, "failed_rate": 1.0,
        # nothing ran: means read 0.0, failed_rate says why
        "mean_return": 0.0, "success_rate": 0.0, "parse_error_rate": 0.0,
        "mean_turns": 0.0, "mean_completion_tokens": 0.0, "pass@1": 0.0,
        "tool_calls_per_episode": 0.0, "tool_errors_per_episode": 0.0,
    }


def test_episode_metrics_bad_input():
    with pytest.raises(ValueError, match="rollouts is empty"):
        episode_metrics([])
    with pytest.raises(ValueError, match="k must be an int >= 1"):
        episode_metrics(two_groups(), k=0)


# ------------------------------------------------------------- env_metrics


def test_tic_tac_toe_contributes_its_table():
    # game 1: a move then a win, both legal. game 2: a parse error then a loss.
    # turns 4, legal 3 -> 0.75; the failed episode is not a game
    rs = [
        rollout(step(0.0), step(1.0, result="win")),
        rollout(step(0.0, parse_error=True), step(0.0, result="loss")),
        failed(),
    ]
    assert env_metrics(TicTacToeEnv, rs) == {
        "games": 2.0, "legal_move_rate": 0.75,
        "win_rate": 0.5, "draw_rate": 0.0, "loss_rate": 0.5,
        "illegal_rate": 0.0, "cut_rate": 0.0, "unfinished_rate": 0.0, "win_draw_rate": 0.5,
    }


def test_a_plain_function_factory_contributes_nothing():
    def make_env():
        return TicTacToeEnv()

    assert env_metrics(make_env, [rollout(step(1.0, result="win"))]) == {}


def test_a_bad_env_reducer_is_named():
    def make_env():
        return TicTacToeEnv()

    make_env.episode_metrics = lambda rs: [len(rs)]
    with pytest.raises(TypeError, match="make_env.episode_metrics must return a dict, got list"):
        env_metrics(make_env, [])
    make_env.episode_metrics = lambda rs: {"score": "high", "n": 1}
    with pytest.raises(TypeError, match="make_env.episode_metrics must map str to float.*score"):
        env_metrics(make_env, [])
    make_env.episode_metrics = lambda rs: {"n": len(rs)}  # ints are fine, as floats
    assert env_metrics(make_env, [rollout(), failed()]) == {"n": 1.0}
