"""`ToolAgent`: an agent that may call Python tools before answering.

Each act is a small loop: the model either calls tools (their results are fed
back as `tool` messages and the model is called again) or answers, and only the
answer is parsed into an env action. Every model call's trace is kept, since
the tool-calling turns are policy outputs the trainer must credit too.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence, Unpack

from ludic_core.agents.agent import Agent, AgentAction, AgentOptions
from ludic_core.agents.tools import (
    ToolCall,
    extract_tool_calls,
    function_schema,
    run_tool,
    strip_tool_call_blocks,
)
from ludic_core.inference.client import ChatClient
from ludic_core.inference.sampling import InferenceSpec
from ludic_core.parsers import ParseResult
from ludic_core.types import ChatResponse, TokenTrace

__all__ = ["ToolAgent", "ToolAgentOptions", "TOOL_BUDGET_OBS"]

TOOL_BUDGET_OBS = "Tool call budget exhausted before a final answer. Answer without tools."


class ToolAgentOptions(AgentOptions, total=False):
    """`ToolAgent`'s keyword arguments besides `tools`, for subclasses to forward typed."""

    tool_budget_penalty: float


class ToolAgent(Agent):
    """Agent with tools given as plain typed, documented Python functions.

    Calls come from `ChatResponse.tool_calls` when the backend parsed them, else
    from Hermes `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks
    in the text. `max_tool_calls` bounds tool *executions* per act; a model that
    still calls tools after that gets a failed parse with `tool_budget_penalty`.
    """

    def __init__(
        self,
        client: ChatClient,
        *,
        tools: Sequence[Callable[..., Any]],
        tool_budget_penalty: float = -1.0,
        **options: Unpack[AgentOptions],
    ) -> None:
        super().__init__(client, **options)
        self.tools: dict[str, Callable[..., Any]] = {}
        self.tool_schemas: list[dict[str, Any]] = []
        for fn in tools:
            schema = function_schema(fn)
            name = schema["function"]["name"]
            if name in self.tools:
                raise ValueError(f"duplicate tool name {name!r}")
            self.tools[name] = fn
            self.tool_schemas.append(schema)
        self.tool_budget_penalty = tool_budget_penalty
        self._model_turn = 0  # makes generated tool_call ids unique within an episode
        self._calls: list[dict[str, Any]] = []  # this act's model calls: what each saw and wrote

    def reset(self, system_prompt: str | None = None) -> None:
        super().reset(system_prompt)
        self._model_turn = 0

    async def act(
        self,
        *,
        inference: InferenceSpec | None = None,
        sampling_seed: int | None = None,
        max_tool_calls: int = 4,
    ) -> AgentAction:
        """Loop model calls and tool runs until the model answers without tools."""
        if max_tool_calls < 0:
            raise ValueError(f"max_tool_calls must be >= 0, got {max_tool_calls}")
        return await self._tool_loop(
            self._spec(inference), sampling_seed, max_calls=max_tool_calls, max_rounds=None
        )

    # ------------------------------------------------------------ loop

    async def _tool_loop(
        self,
        spec: InferenceSpec,
        sampling_seed: int | None,
        *,
        max_calls: int | None,
        max_rounds: int | None,
    ) -> AgentAction:
        """Shared loop; `max_rounds` counts model turns that made tool calls."""
        traces: list[TokenTrace] = []
        records: list[dict[str, Any]] = []
        self._calls = []
        calls_left, rounds = max_calls, 0
        while True:
            response = await self._complete(spec, sampling_seed, self.tool_schemas)
            self._collect(traces, response)
            self._model_turn += 1
            calls = extract_tool_calls(response, id_prefix=f"call_{self._model_turn}_")
            if not calls or response.finish_reason == "length":
                # An answer, or a cut-off reply whose half-written calls must not run.
                self.context.add_assistant(response.text)
                return self._finish(response, traces, self._loop_info(records, rounds))
            if calls_left == 0:
                return self._budget_failure(response, calls, traces, records, rounds)
            calls_left = await self._run_round(response, calls, records, calls_left)
            rounds += 1
            if (max_rounds is not None and rounds >= max_rounds) or calls_left == 0:
                exhausted = await self._on_exhausted(spec, sampling_seed, traces, records, rounds)
                if exhausted is not None:
                    return exhausted

    async def _run_round(
        self,
        response: ChatResponse,
        calls: list[ToolCall],
        records: list[dict[str, Any]],
        calls_left: int | None,
    ) -> int | None:
        """Record the assistant turn, run its calls within budget, add tool messages."""
        self._add_tool_call_turn(response, calls)
        for call in calls:
            if calls_left == 0:
                ok, content = False, f"Error: tool call budget exhausted; {call.name!r} was not run"
            else:
                ok, content = await run_tool(self.tools, call)
                if calls_left is not None:
                    calls_left -= 1
            self._add_tool_result(call, content)
            record: dict[str, Any] = {"name": call.name, "arguments": call.arguments, "ok": ok}
            record["result" if ok else "error"] = content
            records.append(record)
        return calls_left

    async def _on_exhausted(
        self,
        spec: InferenceSpec,
        sampling_seed: int | None,
        traces: list[TokenTrace],
        records: list[dict[str, Any]],
        rounds: int,
    ) -> AgentAction | None:
        """Hook when the budget runs out; None lets the model try to answer with tools still offered."""
        return None

    def _budget_failure(
        self,
        response: ChatResponse,
        calls: list[ToolCall],
        traces: list[TokenTrace],
        records: list[dict[str, Any]],
        rounds: int,
    ) -> AgentAction:
        """The model still calls tools with no budget left: answer each call, fail the act."""
        self._add_tool_call_turn(response, calls)
        for call in calls:
            content = f"Error: tool call budget exhausted; {call.name!r} was not run"
            self._add_tool_result(call, content)
            records.append({"name": call.name, "arguments": call.arguments, "ok": False, "error": content})
        info = self._loop_info(records, rounds)
        info["tool_budget_exhausted"] = True
        action = self._finish(response, traces, info)
        # Not the parser's call: the reply was a tool call, not an answer.
        action.parse = ParseResult(None, self.tool_budget_penalty, TOOL_BUDGET_OBS)
        return action

    # ------------------------------------------------------------ helpers

    def _add_tool_call_turn(self, response: ChatResponse, calls: list[ToolCall]) -> None:
        """Store the assistant turn with structured "tool_calls".

        Hermes blocks are removed from `content` because chat templates render
        "tool_calls" themselves; keeping both would show every call twice.
        """
        if response.tool_calls:
            # Keep the backend's entries (exact argument strings), filling missing ids.
            entries = [
                {**tc, "id": tc.get("id") or call.id} if isinstance(tc, dict) else call.to_message_entry()
                for tc, call in zip(response.tool_calls, calls)
            ]
            content = response.text
        else:
            entries = [c.to_message_entry() for c in calls]
            content = strip_tool_call_blocks(response.text)
        self.context.add({"role": "assistant", "content": content, "tool_calls": entries})

    def _add_tool_result(self, call: ToolCall, content: str) -> None:
        self.context.add({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content})

    async def _complete(self, spec: InferenceSpec, sampling_seed: int | None,
                        tools: Sequence[dict[str, Any]] | None = None) -> ChatResponse:
        response = await super()._complete(spec, sampling_seed, tools)
        self._calls.append({"prompt_messages": self._prompt_messages, "text": response.text,
                            "has_ids": bool(response.completion_token_ids)})
        return response

    def _finish(self, response: ChatResponse, traces: list[TokenTrace], info: dict[str, Any]) -> AgentAction:
        """Also record the act's earlier model calls (what each saw, what it wrote), so that rejection
        sampling keeps the tool-calling turns as training rows, not only the final answer."""
        info = {**info, "internal_calls": self._calls[:-1], "tools_offered": list(self.tools)}
        return super()._finish(response, traces, info)

    @staticmethod
    def _loop_info(records: list[dict[str, Any]], rounds: int) -> dict[str, Any]:
        return {"tool_calls": records, "tool_rounds": rounds}
