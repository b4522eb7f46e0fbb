"""The `ChatClient` seam: the only way agents talk to a model."""

from __future__ import annotations

from typing import Any, Mapping, Protocol, runtime_checkable

from ludic_core.inference.sampling import ChatCompletionRequest
from ludic_core.types import ChatResponse

__all__ = ["ChatClient", "WeightPusher"]


@runtime_checkable
class ChatClient(Protocol):
    """A chat model that returns token ids and sampling log-probs.

    `complete` returns the normalised response plus a free-form `info` dict for
    transport details (latency, batch size, ...). `sync_weights` replaces the
    served weights with `params` (name -> tensor) atomically and tags every later
    completion with `version`; it returns the version now being served.
    """

    async def complete(self, request: ChatCompletionRequest) -> tuple[ChatResponse, dict[str, Any]]: ...

    def sync_weights(self, params: Mapping[str, Any], *, version: int) -> int: ...


class WeightPusher(Protocol):
    """Pushes weights into a server a client reads from (`ludic_core.publish`'s
    `VLLMPolicyPublisher` is one). A server-backed client is handed one rather
    than building it: publishing sits above inference, and only imports it."""

    def publish(self, state_dict: Mapping[str, Any], *, version: int) -> None: ...
