import json

import pytest

from ludic_core.types import ChatResponse, Rollout, Step, TokenTrace


def _rollout() -> Rollout:
    trace = TokenTrace([1, 2, 3], [4, 5], [-0.5, -1.25], "stop", policy_version=3)
    steps = [
        Step(0, "obs0", "<move>5</move>", "obs1", 0.0, info={"parsed_action": "5"}, trace=trace),
        Step(1, "obs1", "bad", "Invalid", -1.0, info={"parse_error": True}),
        Step(2, "obs1", "<move>1</move>", None, 1.0, terminated=True, trace=trace),
    ]
    return Rollout(steps=steps, meta={"agent_id": "X", "group_id": "g"})


def test_rollout_json_round_trip_is_lossless():
    r = _rollout()
    again = Rollout.from_dict(json.loads(json.dumps(r.to_dict())))
    assert again == r
    assert again.total_reward == 0.0 - 1.0 + 1.0
    assert again.length == 3
    assert again.steps[0].trace.policy_version == 3


def test_token_trace_rejects_mismatched_logprobs():
    with pytest.raises(ValueError, match="2 entries for 3 completion tokens"):
        TokenTrace([1], [1, 2, 3], [-0.1, -0.2])


def test_token_trace_rejects_non_int_ids():
    with pytest.raises(TypeError, match="prompt_token_ids"):
        TokenTrace(["a"], [1])


def test_token_trace_rejects_positive_logprob():
    with pytest.raises(ValueError, match="<= 0"):
        TokenTrace([1], [2], [0.5])


def test_chat_response_to_trace_keeps_version():
    resp = ChatResponse("hi", [1], [2, 3], [-0.1, -0.2], "length", policy_version=7)
    assert resp.to_trace() == TokenTrace([1], [2, 3], [-0.1, -0.2], "length", 7)


def test_rollout_from_dict_names_missing_field():
    with pytest.raises(ValueError, match="steps"):
        Rollout.from_dict({"id": "x"})
