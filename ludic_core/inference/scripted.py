"""`ScriptedChatClient`: a plain Python policy behind the `ChatClient` seam.

Why: a minimax tic-tac-toe player, a random-legal baseline or a rule-based
teacher can then play through exactly the same agent / protocol / rollout
stack as an LLM, so rejection sampling from a scripted teacher yields rollouts
with real token traces (when given a tokenizer) ready for SFT.
"""

from __future__ import annotations

import inspect
from typing import Any, Awaitable, Callable, Mapping, Union

from ludic_core.inference.chat_render import chat_prompt_ids, text_ids
from ludic_core.inference.sampling import ChatCompletionRequest
from ludic_core.types import ChatResponse, Message

__all__ = ["ScriptedChatClient", "ScriptedPolicy"]

ScriptedPolicy = Callable[..., Union[str, Awaitable[str]]]
"""`policy(messages)` or `policy(messages, *, temperature)`: the reply text."""


class ScriptedChatClient:
    """Answers each request with `policy(messages)`, or `policy(messages,
    temperature=T)` when the policy takes a `temperature` keyword: a scripted
    teacher can then sample the way a teacher model would (rejection sampling at
    the agent's temperature) and play its mode when evaluated greedily (T = 0).

    With a `tokenizer`, prompt ids come from its chat template and completion ids
    are the reply encoded as plain text plus eos (`chat_render`), so the trace is
    what an LLM would have to emit; completion log-probs are None (a script has no
    distribution).
    """

    def __init__(self, policy: ScriptedPolicy, tokenizer: Any | None = None) -> None:
        if not callable(policy):
            raise TypeError("policy must be a callable taking the chat messages")
        self.policy = policy
        self._takes_temperature = _takes_temperature(policy)
        self.tokenizer = tokenizer
        self.policy_version = 0

    async def complete(self, request: ChatCompletionRequest) -> tuple[ChatResponse, dict[str, Any]]:
        messages = request.message_list()
        if self._takes_temperature:
            reply = self.policy(messages, temperature=request.sampling.temperature)
        else:
            reply = self.policy(messages)
        if inspect.isawaitable(reply):
            reply = await reply
        if not isinstance(reply, str):
            raise TypeError(f"scripted policy returned {type(reply).__name__}, expected str")
        prompt_ids: list[int] = []
        completion_ids: list[int] = []
        if self.tokenizer is not None:
            prompt_ids = chat_prompt_ids(self.tokenizer, messages, tools=request.tools)
            completion_ids = text_ids(self.tokenizer, reply)  # markers in the reply are text, as sampled
            completion_ids.append(self.tokenizer.eos_token_id)
        resp = ChatResponse(
            text=reply,
            prompt_token_ids=prompt_ids,
            completion_token_ids=completion_ids,
            completion_logprobs=None,
            finish_reason="stop",
            policy_version=self.policy_version,
        )
        return resp, {"backend": "scripted"}

    def sync_weights(self, params: Mapping[str, Any], *, version: int) -> int:
        """A script has no weights; only the version moves (keeps the seam uniform)."""
        self.policy_version = int(version)
        return self.policy_version


def _takes_temperature(policy: Callable[..., Any]) -> bool:
    try:
        return "temperature" in inspect.signature(policy).parameters
    except (TypeError, ValueError):  # a builtin or C callable: no signature to read
        return False
