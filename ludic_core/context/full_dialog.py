"""`FullDialog`: the plain strategy, every message kept and sent verbatim."""

from __future__ import annotations

import copy

from ludic_core.context.base import check_message
from ludic_core.types import Message

__all__ = ["FullDialog"]


class FullDialog:
    """Keeps the whole dialog; `messages()` returns all of it."""

    def __init__(self) -> None:
        self._messages: list[Message] = []

    def reset(self, system_prompt: str | None = None) -> None:
        self._messages = []
        if system_prompt is not None:
            self._messages.append({"role": "system", "content": system_prompt})

    def add(self, message: Message) -> None:
        self._messages.append(check_message(message))

    def add_user(self, text: str) -> None:
        self.add({"role": "user", "content": text})

    def add_assistant(self, text: str) -> None:
        self.add({"role": "assistant", "content": text})

    def full_messages(self) -> list[Message]:
        """Every stored message, unmodified (a copy)."""
        return copy.deepcopy(self._messages)

    def messages(self) -> list[Message]:
        return self.full_messages()

    def __len__(self) -> int:
        return len(self._messages)
