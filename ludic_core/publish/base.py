"""`PolicyPublisher`: how new weights reach the inference engine.

Training and inference meet here and at the `ChatClient`. A publisher gets
the FULL (unsharded, merged-LoRA) state dict with HF parameter names and a
monotonically increasing version; every later completion reports that version.
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol, runtime_checkable

__all__ = ["PolicyPublisher", "InProcessPublisher"]


@runtime_checkable
class PolicyPublisher(Protocol):
    def publish(self, state_dict: Mapping[str, Any], *, version: int) -> None: ...


class InProcessPublisher:
    """Copies weights into a client living in this process (e.g. LocalChatClient)."""

    def __init__(self, client: Any) -> None:
        if not hasattr(client, "sync_weights"):
            raise TypeError(f"{type(client).__name__} has no sync_weights(params, version=...)")
        self.client = client
        self.published_version: int | None = None

    def publish(self, state_dict: Mapping[str, Any], *, version: int) -> None:
        self.client.sync_weights(state_dict, version=version)
        self.published_version = version
