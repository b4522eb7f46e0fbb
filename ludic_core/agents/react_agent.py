"""`ReActAgent`: a bounded reason-act-observe tool loop with a forced answer.

Unlike `ToolAgent`, which fails an act whose model keeps calling tools, a
ReAct agent always ends with an answer: once `max_react_steps` tool-calling
turns are spent it tells the model so and calls it once more with no tools
offered. That keeps episodes moving and still gives the parser something to
judge.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence, Unpack

from ludic_core.agents.agent import AgentAction
from ludic_core.agents.tool_agent import ToolAgent, ToolAgentOptions
from ludic_core.inference.client import ChatClient
from ludic_core.inference.sampling import InferenceSpec
from ludic_core.types import TokenTrace

__all__ = ["ReActAgent", "FORCE_FINAL_PROMPT"]

FORCE_FINAL_PROMPT = "Tool budget exhausted. Give your final answer now."


class ReActAgent(ToolAgent):
    """Tool loop of at most `max_react_steps` tool-calling turns, then a forced final answer."""

    def __init__(
        self,
        client: ChatClient,
        *,
        tools: Sequence[Callable[..., Any]],
        max_react_steps: int = 4,
        **options: Unpack[ToolAgentOptions],
    ) -> None:
        super().__init__(client, tools=tools, **options)
        _check_positive("max_react_steps", max_react_steps)
        self.max_react_steps = max_react_steps

    async def act(
        self,
        *,
        inference: InferenceSpec | None = None,
        sampling_seed: int | None = None,
        max_react_steps: int | None = None,
        max_tool_calls: int | None = None,
    ) -> AgentAction:
        """Run the loop; `max_tool_calls` (None = unbounded) also caps tool executions."""
        steps = self.max_react_steps if max_react_steps is None else max_react_steps
        _check_positive("max_react_steps", steps)
        if max_tool_calls is not None:
            _check_positive("max_tool_calls", max_tool_calls)
        return await self._tool_loop(
            self._spec(inference), sampling_seed, max_calls=max_tool_calls, max_rounds=steps
        )

    async def _on_exhausted(
        self,
        spec: InferenceSpec,
        sampling_seed: int | None,
        traces: list[TokenTrace],
        records: list[dict[str, Any]],
        rounds: int,
    ) -> AgentAction:
        """Ask for the answer and call the model with `tools=None` so it cannot call again."""
        self.context.add_user(FORCE_FINAL_PROMPT)
        response = await self._complete(spec, sampling_seed, tools=None)
        self._collect(traces, response)
        self.context.add_assistant(response.text)
        info = self._loop_info(records, rounds)
        info["forced_final"] = True
        return self._finish(response, traces, info)


def _check_positive(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
