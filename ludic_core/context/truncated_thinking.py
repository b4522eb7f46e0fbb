"""`TruncatedThinkingContext`: drop old reasoning from the prompt.

Reasoning models emit long `<think>...</think>` blocks every turn; sending them
all back makes the prompt grow quadratically with episode length while the
model only needs its earlier *answers*. Stored assistant messages are shown
with their reasoning replaced by a short placeholder; the originals are kept
for logging via `full_messages()`.
"""

from __future__ import annotations

import re

from ludic_core.context.full_dialog import FullDialog
from ludic_core.types import Message

__all__ = ["TruncatedThinkingContext", "truncate_thinking"]

_CLOSED = re.compile(r"<think>.*?</think>", re.DOTALL)


def truncate_thinking(text: str, placeholder: str) -> str:
    """Replace reasoning in `text` with `placeholder`.

    Handles closed `<think>...</think>` blocks, a leading reasoning span whose
    `<think>` was in the prompt (text starts with reasoning, then `</think>`),
    and an unclosed `<think>` (cut off at the token limit) that runs to the end.
    """
    close = text.find("</think>")
    if close >= 0 and "<think>" not in text[:close]:
        text = placeholder + text[close + len("</think>") :]
    text = _CLOSED.sub(lambda _: placeholder, text)
    # An unclosed block would otherwise leak its whole reasoning into the prompt.
    opening = text.rfind("<think>")
    if opening >= 0 and "</think>" not in text[opening:]:
        text = text[:opening] + placeholder
    return text


class TruncatedThinkingContext(FullDialog):
    """Full dialog in storage, reasoning-free assistant messages in `messages()`."""

    def __init__(self, placeholder: str = "<think>[truncated]</think>") -> None:
        super().__init__()
        self.placeholder = placeholder

    def messages(self) -> list[Message]:
        out = self.full_messages()
        for msg in out:
            content = msg.get("content")
            if msg.get("role") == "assistant" and isinstance(content, str):
                msg["content"] = truncate_thinking(content, self.placeholder)
        return out
