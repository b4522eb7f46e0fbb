"""`Agent`: an LLM policy = chat client + context strategy + parser.

The agent owns its dialog so that multi-agent envs can give every agent its own
view. `act` returns the raw completion, the parse result (with its intrinsic
format reward) and the token traces the trainer needs; it never talks to the
env directly, the interaction protocol does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence, TypedDict

from ludic_core.context import ContextStrategy, FullDialog
from ludic_core.inference.client import ChatClient
from ludic_core.inference.sampling import ChatCompletionRequest, InferenceSpec
from ludic_core.parsers import ParseResult, Parser, identity_parser
from ludic_core.types import ChatResponse, TokenTrace

__all__ = ["Agent", "AgentAction", "AgentOptions", "TRUNCATION_OBS"]

TRUNCATION_OBS = "Your reply was cut off at the token limit. Answer briefly."


@dataclass
class AgentAction:
    """Everything one `act` produced.

    `traces` holds one entry per model call made during the act, in order (the
    last is the final answer); calls whose response carried no token ids are
    skipped, so it may be empty for text-only clients.
    """

    text: str
    parse: ParseResult
    response: ChatResponse
    traces: list[TokenTrace] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def action(self) -> str | None:
        return self.parse.action

    @property
    def trace(self) -> TokenTrace | None:
        """The final call's trace, if the client returned token ids."""
        if self.traces and self.response.completion_token_ids:
            return self.traces[-1]
        return None


class AgentOptions(TypedDict, total=False):
    """`Agent`'s keyword arguments, so that a subclass forwards them typed
    (`**options: Unpack[AgentOptions]`) instead of restating each one."""

    parser: Parser | None
    context: ContextStrategy | None
    inference: InferenceSpec | None
    model: str | None
    truncation_penalty: float


class Agent:
    """A single-call agent: one model completion per `act`."""

    def __init__(
        self,
        client: ChatClient,
        *,
        parser: Parser | None = None,
        context: ContextStrategy | None = None,
        inference: InferenceSpec | None = None,
        model: str | None = None,
        truncation_penalty: float = -1.0,
    ) -> None:
        self.client = client
        self.parser: Parser = parser if parser is not None else identity_parser
        self.context: ContextStrategy = context if context is not None else FullDialog()
        self.inference = inference
        self.model = model
        self.truncation_penalty = truncation_penalty
        self._sampling_temperature: float | None = None
        self._prompt_messages: list[dict[str, Any]] = []

    # ------------------------------------------------------------ episode hooks

    def reset(self, system_prompt: str | None = None) -> None:
        """Forget the previous episode; start from `system_prompt` (if any)."""
        self.context.reset(system_prompt)

    def on_env_reset(self, obs: str, info: dict[str, Any]) -> None:
        """The env's first observation becomes the first user message."""
        self.context.add_user(obs)

    def on_after_step(self, obs: str | None, info: dict[str, Any]) -> None:
        """The next observation (or parse feedback) becomes a user message."""
        if obs is not None:
            self.context.add_user(obs)

    # ------------------------------------------------------------ acting

    async def act(
        self, *, inference: InferenceSpec | None = None, sampling_seed: int | None = None
    ) -> AgentAction:
        """Call the model once on the current context and parse the reply."""
        spec = self._spec(inference)
        response = await self._complete(spec, sampling_seed)
        self.context.add_assistant(response.text)
        traces = self._collect([], response)
        return self._finish(response, traces, {})

    def _spec(self, inference: InferenceSpec | None) -> InferenceSpec:
        return inference or self.inference or InferenceSpec()

    async def _complete(
        self,
        spec: InferenceSpec,
        sampling_seed: int | None,
        tools: Sequence[dict[str, Any]] | None = None,
    ) -> ChatResponse:
        """Build the request from the context and call the client."""
        messages = self.context.messages()
        if not messages:
            raise ValueError("Agent.act called with an empty context; call reset()/on_env_reset() first")
        # recorded on the step: what the model saw, so the call can become a chat SFT example
        self._prompt_messages = [dict(m) for m in messages]
        sampling = spec.sampling
        # recorded on the step: the trainer scores ratios at the temperature sampled at
        self._sampling_temperature = sampling.temperature
        if sampling_seed is not None:
            sampling = sampling.model_copy(update={"seed": sampling_seed})
        request = ChatCompletionRequest(
            messages=messages,
            model=self.model,
            sampling=sampling,
            returns=spec.returns,
            tools=tuple(tools) if tools else None,
        )
        result = await self.client.complete(request)
        if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], ChatResponse)):
            raise TypeError(
                f"{type(self.client).__name__}.complete must return (ChatResponse, info dict), "
                f"got {type(result).__name__}"
            )
        return result[0]

    @staticmethod
    def _collect(traces: list[TokenTrace], response: ChatResponse) -> list[TokenTrace]:
        """Append the response's trace unless the client gave no token ids."""
        if response.completion_token_ids:
            traces.append(response.to_trace())
        return traces

    def _finish(
        self, response: ChatResponse, traces: list[TokenTrace], info: dict[str, Any]
    ) -> AgentAction:
        """Parse the final completion; a length cut-off is a failure whatever the parser says."""
        truncated = response.finish_reason == "length"
        if truncated:
            parse = ParseResult(None, self.truncation_penalty, TRUNCATION_OBS)
        else:
            parse = self.parser(response.text)
            if not isinstance(parse, ParseResult):
                raise TypeError(f"parser must return a ParseResult, got {type(parse).__name__}")
        info = {
            **info,
            "finish_reason": response.finish_reason,
            "policy_version": response.policy_version,
            "truncated_completion": truncated,
            "sampling_temperature": self._sampling_temperature,
            "prompt_messages": self._prompt_messages,
        }
        return AgentAction(response.text, parse, response, traces, info)
