"""`ContextStrategy`: what an agent remembers and what it sends to the model.

Separating storage from presentation lets a strategy keep the full dialog (for
logging and analysis) while showing the model a compacted view, e.g. with old
reasoning dropped.
"""

from __future__ import annotations

import copy
from typing import Protocol, runtime_checkable

from ludic_core.types import Message

__all__ = ["ContextStrategy", "VALID_ROLES", "check_message"]

VALID_ROLES = frozenset({"system", "user", "assistant", "tool"})


@runtime_checkable
class ContextStrategy(Protocol):
    """Per-agent chat memory.

    `messages()` is exactly what goes into the next request, as a fresh copy, so
    callers may mutate it without corrupting the stored dialog.
    """

    def reset(self, system_prompt: str | None = None) -> None: ...

    def add(self, message: Message) -> None: ...

    def add_user(self, text: str) -> None: ...

    def add_assistant(self, text: str) -> None: ...

    def messages(self) -> list[Message]: ...


def check_message(message: Message) -> Message:
    """Validate a chat message and return a deep copy safe to store."""
    if not isinstance(message, dict):
        raise TypeError(f"chat message must be a dict, got {type(message).__name__}")
    role = message.get("role")
    if role not in VALID_ROLES:
        raise ValueError(f"chat message has invalid role {role!r}; expected one of {sorted(VALID_ROLES)}")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise TypeError(f"{role} message content must be a str or None, got {type(content).__name__}")
    if role == "tool" and "tool_call_id" not in message:
        raise ValueError("tool message is missing 'tool_call_id'")
    return copy.deepcopy(message)
