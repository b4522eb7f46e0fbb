"""Agents: request building, parsing, truncation, tool loops. Pure logic with a scripted client."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Mapping

import pytest

from ludic_core.agents import Agent, AgentAction, ReActAgent, ToolAgent, function_schema
from ludic_core.context import TruncatedThinkingContext
from ludic_core.inference.client import ChatClient
from ludic_core.inference.sampling import ChatCompletionRequest, InferenceSpec, SamplingConfig
from ludic_core.parsers import xml_tag_parser
from ludic_core.types import ChatResponse


class ScriptedClient:
    """Returns the scripted responses in order and records every request."""

    def __init__(self, *responses: ChatResponse | str) -> None:
        self.responses = [r if isinstance(r, ChatResponse) else resp(r) for r in responses]
        self.requests: list[ChatCompletionRequest] = []

    async def complete(self, request: ChatCompletionRequest) -> tuple[ChatResponse, dict[str, Any]]:
        self.requests.append(request)
        if not self.responses:
            raise AssertionError("ScriptedClient ran out of responses")
        return self.responses.pop(0), {"latency_s": 0.0}

    def sync_weights(self, params: Mapping[str, Any], *, version: int) -> int:
        return version


def resp(text: str, finish: str = "stop", ids: bool = True, **kw: Any) -> ChatResponse:
    n = len(text.split()) or 1
    return ChatResponse(
        text=text,
        prompt_token_ids=[1, 2, 3] if ids else [],
        completion_token_ids=list(range(10, 10 + n)) if ids else [],
        completion_logprobs=[-0.5] * n if ids else None,
        finish_reason=finish,
        policy_version=7,
        **kw,
    )


def run(coro):
    return asyncio.run(coro)


def tool_call(name: str, **arguments: Any) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: first addend
        b: second addend
    """
    return a + b


def explode(x: str) -> str:
    """Always fails."""
    raise RuntimeError(f"boom on {x}")


async def lookup(key: str, default: str | None = None) -> dict:
    """Async lookup returning a dict."""
    await asyncio.sleep(0)
    return {"key": key, "value": 1}


# ---------------------------------------------------------------- Agent


def test_scripted_client_satisfies_protocol():
    assert isinstance(ScriptedClient(), ChatClient)


def test_agent_act_builds_request_and_appends_assistant():
    client = ScriptedClient(resp("<answer>B2</answer>"))
    spec = InferenceSpec(sampling=SamplingConfig(temperature=0.7, top_p=0.9, max_tokens=32, seed=1))
    agent = Agent(client, parser=xml_tag_parser("answer", success_reward=0.1), inference=spec, model="m")
    agent.reset("sys")
    agent.on_env_reset("board", {})
    action = run(agent.act(sampling_seed=123))

    req = client.requests[0]
    assert req.sampling.seed == 123
    assert (req.sampling.temperature, req.sampling.top_p, req.sampling.max_tokens) == (0.7, 0.9, 32)
    assert req.model == "m" and req.tools is None
    assert req.message_list() == [{"role": "system", "content": "sys"}, {"role": "user", "content": "board"}]
    assert spec.sampling.seed == 1  # the spec itself is untouched

    assert isinstance(action, AgentAction)
    assert action.action == "B2" and action.parse.reward == 0.1
    assert action.text == "<answer>B2</answer>"
    assert len(action.traces) == 1 and action.trace is action.traces[0]
    assert action.traces[0].completion_logprobs == [-0.5]
    assert action.info["finish_reason"] == "stop"
    assert action.info["policy_version"] == 7
    assert action.info["truncated_completion"] is False
    assert agent.context.messages()[-1] == {"role": "assistant", "content": "<answer>B2</answer>"}


def test_agent_call_inference_overrides_and_default_seed():
    client = ScriptedClient("a", "b")
    agent = Agent(client, inference=InferenceSpec(sampling=SamplingConfig(temperature=0.3, seed=5)))
    agent.reset()
    agent.on_env_reset("o", {})
    run(agent.act())
    assert client.requests[0].sampling.temperature == 0.3 and client.requests[0].sampling.seed == 5
    agent.on_after_step("o2", {})
    agent.on_after_step(None, {})  # no message for a None observation
    run(agent.act(inference=InferenceSpec(sampling=SamplingConfig(temperature=0.0))))
    req = client.requests[1]
    assert req.sampling.temperature == 0.0 and req.sampling.seed is None
    assert [m["role"] for m in req.message_list()] == ["user", "assistant", "user"]


def test_agent_without_spec_uses_default_and_identity_parser():
    client = ScriptedClient(resp("  move e4 \n", ids=False))
    agent = Agent(client)
    agent.reset()
    agent.on_env_reset("go", {})
    action = run(agent.act())
    assert client.requests[0].sampling == SamplingConfig()
    assert action.action == "move e4" and action.parse.reward == 0.0
    assert action.traces == [] and action.trace is None  # no token ids -> no trace


def test_length_finish_is_a_truncation_failure():
    client = ScriptedClient(resp("<answer>B2</answer> and more", finish="length"))
    agent = Agent(client, parser=xml_tag_parser("answer"), truncation_penalty=-0.7)
    agent.reset()
    agent.on_env_reset("o", {})
    action = run(agent.act())
    assert action.action is None
    assert action.parse.reward == -0.7
    assert action.parse.obs == "Your reply was cut off at the token limit. Answer briefly."
    assert action.info["truncated_completion"] is True
    assert action.info["finish_reason"] == "length"
    assert len(action.traces) == 1


def test_parse_failure_obs_and_context_with_truncated_thinking():
    client = ScriptedClient(resp("<think>long</think>no tags"), resp("<think>again</think><answer>1</answer>"))
    agent = Agent(client, parser=xml_tag_parser("answer", failure_penalty=-1.0), context=TruncatedThinkingContext())
    agent.reset()
    agent.on_env_reset("o", {})
    first = run(agent.act())
    assert first.parse.action is None and first.parse.reward == -1.0
    agent.on_after_step(first.parse.obs, {})
    run(agent.act())
    sent = client.requests[1].message_list()
    assert sent[1]["content"] == "<think>[truncated]</think>no tags"
    assert sent[2]["content"] == "Invalid format: answer inside <answer>...</answer>."


def test_act_on_empty_context_fails_clearly():
    agent = Agent(ScriptedClient("x"))
    with pytest.raises(ValueError, match="empty context"):
        run(agent.act())


def test_client_returning_bare_response_fails_clearly():
    class Bare(ScriptedClient):
        async def complete(self, request):  # type: ignore[override]
            return resp("x")

    agent = Agent(Bare())
    agent.on_env_reset("o", {})
    with pytest.raises(TypeError, match=r"must return \(ChatResponse, info dict\)"):
        run(agent.act())


# ---------------------------------------------------------------- tool schemas


def test_function_schema_from_signature_and_docstring():
    schema = function_schema(add)
    assert schema == {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {
                    "a": {"type": "integer", "description": "first addend"},
                    "b": {"type": "integer", "description": "second addend"},
                },
                "required": ["a", "b"],
            },
        },
    }
    params = function_schema(lookup)["function"]["parameters"]
    assert params["properties"]["default"] == {"type": "string"}
    assert params["required"] == ["key"]
    with pytest.raises(ValueError, match="__name__"):
        function_schema(lambda x: x)


def test_duplicate_tool_names_rejected():
    with pytest.raises(ValueError, match="duplicate tool name 'add'"):
        ToolAgent(ScriptedClient(), tools=[add, add])


# ---------------------------------------------------------------- ToolAgent


def test_tool_agent_runs_tool_and_feeds_result_back():
    client = ScriptedClient(
        resp("<think>need math</think>" + tool_call("add", a=2, b=3), ids=True),
        resp("<answer>5</answer>"),
    )
    agent = ToolAgent(client, tools=[add], parser=xml_tag_parser("answer"))
    agent.reset("sys")
    agent.on_env_reset("what is 2+3?", {})
    action = run(agent.act(sampling_seed=9))

    assert action.action == "5"
    assert len(client.requests) == 2 and len(action.traces) == 2
    first, second = client.requests
    assert first.tools is not None and first.tools[0]["function"]["name"] == "add"
    assert second.sampling.seed == 9
    msgs = second.message_list()
    assistant, tool = msgs[-2], msgs[-1]
    assert assistant["role"] == "assistant"
    assert assistant["content"] == "<think>need math</think>"  # Hermes block moved into tool_calls
    entry = assistant["tool_calls"][0]
    assert entry["function"]["name"] == "add"
    assert json.loads(entry["function"]["arguments"]) == {"a": 2, "b": 3}
    assert tool == {"role": "tool", "tool_call_id": entry["id"], "name": "add", "content": "5"}
    assert action.info["tool_calls"] == [{"name": "add", "arguments": {"a": 2, "b": 3}, "ok": True, "result": "5"}]
    assert agent.context.messages()[-1] == {"role": "assistant", "content": "<answer>5</answer>"}


def test_tool_agent_uses_structured_tool_calls_and_async_tools():
    structured = [{"id": "abc", "type": "function",
                   "function": {"name": "lookup", "arguments": '{"key": "k"}'}}]
    client = ScriptedClient(resp("", finish="tool_calls", tool_calls=structured), resp("done"))
    agent = ToolAgent(client, tools=[lookup])
    agent.on_env_reset("o", {})
    action = run(agent.act())
    assert action.action == "done"
    msgs = client.requests[1].message_list()
    assert msgs[-2]["tool_calls"] == structured
    assert msgs[-1] == {"role": "tool", "tool_call_id": "abc", "name": "lookup",
                        "content": '{"key": "k", "value": 1}'}


def test_tool_agent_several_calls_in_one_message():
    client = ScriptedClient(resp(tool_call("add", a=1, b=1) + "\n" + tool_call("add", a=2, b=2)), resp("ok"))
    agent = ToolAgent(client, tools=[add])
    agent.on_env_reset("o", {})
    action = run(agent.act())
    tools = [m for m in client.requests[1].message_list() if m["role"] == "tool"]
    assert [t["content"] for t in tools] == ["2", "4"]
    assert len({t["tool_call_id"] for t in tools}) == 2
    assert action.info["tool_rounds"] == 1


@pytest.mark.parametrize(
    "call_text, expected",
    [
        (tool_call("multiply", a=1, b=2), "Error: unknown tool 'multiply'; available tools: add, explode"),
        ('<tool_call>{"name": "add", "arguments": {"a": 1,</tool_call>', "Error: malformed JSON in <tool_call> block"),
        ('<tool_call>{"name": "add", "arguments": "{bad"}</tool_call>', "Error: malformed JSON in arguments for tool 'add'"),
        (tool_call("add", a=1), "Error: bad arguments for tool 'add': missing a required argument: 'b'"),
        (tool_call("add", a=1, b=2, c=3), "Error: bad arguments for tool 'add'"),
        (tool_call("add", a="1", b=2), "Error: bad arguments for tool 'add': argument 'a' must be integer"),
        (tool_call("explode", x="now"), "Error: tool 'explode' raised RuntimeError: boom on now"),
    ],
)
def test_tool_errors_become_tool_messages_and_loop_continues(call_text, expected):
    client = ScriptedClient(resp(call_text), resp("<answer>gave up</answer>"))
    agent = ToolAgent(client, tools=[add, explode], parser=xml_tag_parser("answer"))
    agent.on_env_reset("o", {})
    action = run(agent.act())
    assert action.action == "gave up"
    tool_msg = client.requests[1].message_list()[-1]
    assert tool_msg["role"] == "tool"
    assert tool_msg["content"].startswith(expected), tool_msg["content"]
    record = action.info["tool_calls"][0]
    assert record["ok"] is False and record["error"] == tool_msg["content"]


def test_tool_agent_budget_exhausted_fails_act():
    client = ScriptedClient(resp(tool_call("add", a=1, b=2)), resp(tool_call("add", a=3, b=4)))
    agent = ToolAgent(client, tools=[add], tool_budget_penalty=-0.4)
    agent.on_env_reset("o", {})
    action = run(agent.act(max_tool_calls=1))
    assert action.action is None and action.parse.reward == -0.4
    assert action.info["tool_budget_exhausted"] is True
    assert [r["ok"] for r in action.info["tool_calls"]] == [True, False]
    last = agent.context.messages()[-1]
    assert last["role"] == "tool" and "budget exhausted" in last["content"]  # every call answered


def test_tool_agent_truncated_tool_call_is_not_run():
    client = ScriptedClient(resp('<tool_call>{"name": "add", "argu', finish="length"))
    agent = ToolAgent(client, tools=[add], truncation_penalty=-2.0)
    agent.on_env_reset("o", {})
    action = run(agent.act())
    assert action.parse.reward == -2.0 and action.info["truncated_completion"] is True
    assert action.info["tool_calls"] == []


# ---------------------------------------------------------------- ReActAgent


def test_react_agent_answers_within_budget():
    client = ScriptedClient(resp(tool_call("add", a=2, b=3)), resp("<answer>5</answer>"))
    agent = ReActAgent(client, tools=[add], max_react_steps=3, parser=xml_tag_parser("answer"))
    agent.on_env_reset("o", {})
    action = run(agent.act())
    assert action.action == "5" and "forced_final" not in action.info
    assert all(r.tools is not None for r in client.requests)


def test_react_agent_forces_final_answer_without_tools():
    client = ScriptedClient(
        resp(tool_call("add", a=1, b=1)),
        resp(tool_call("add", a=2, b=2)),
        resp("<answer>4</answer>"),
    )
    agent = ReActAgent(client, tools=[add], max_react_steps=2, parser=xml_tag_parser("answer"))
    agent.reset("sys")
    agent.on_env_reset("o", {})
    action = run(agent.act())
    assert len(client.requests) == 3
    assert client.requests[0].tools is not None and client.requests[1].tools is not None
    final = client.requests[2]
    assert final.tools is None
    assert final.message_list()[-1] == {"role": "user", "content": "Tool budget exhausted. Give your final answer now."}
    assert action.action == "4" and action.info["forced_final"] is True
    assert action.info["tool_rounds"] == 2 and len(action.traces) == 3


def test_react_agent_rejects_bad_budget():
    with pytest.raises(ValueError, match="max_react_steps"):
        ReActAgent(ScriptedClient(), tools=[add], max_react_steps=0)


def test_unclosed_block_from_stop_string_and_missing_structured_ids():
    # A "</tool_call>" stop string is cut from the text: the open block still counts.
    client = ScriptedClient(
        resp('<tool_call>{"name": "add", "arguments": {"a": 20, "b": 22}}'),
        resp("", tool_calls=[{"type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 1}}}]),
        resp("42"),
    )
    agent = ToolAgent(client, tools=[add])
    agent.on_env_reset("o", {})
    action = run(agent.act())
    assert [r["result"] for r in action.info["tool_calls"]] == ["42", "2"]
    msgs = agent.context.messages()
    ids = [m["tool_call_id"] for m in msgs if m["role"] == "tool"]
    assert len(set(ids)) == 2
    assert msgs[3]["tool_calls"][0]["id"] == ids[1]  # generated id filled into the backend's entry


@pytest.mark.parametrize("text", [
    "<tool_call>" + "[" * 5000 + "</tool_call>",  # json.loads recurses past the limit
    '<tool_call>{"name": "f", "arguments": {"x": ' + "9" * 5000 + "}}</tool_call>",  # int past the digit limit
    '<tool_call>{"name": "f", "arguments": "' + "[" * 5000 + '"}</tool_call>',  # the same, in an arguments string
])
def test_hostile_call_json_is_an_error_observation_never_an_exception(text):
    from ludic_core.agents.tools import extract_tool_calls

    (call,) = extract_tool_calls(ChatResponse(text=text))
    assert call.error is not None and call.error.startswith("Error: ")
