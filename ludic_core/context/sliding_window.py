"""`SlidingWindowContext`: the system prompt plus the last few turns.

For fully observable envs (a board game shows the whole state every turn)
older turns carry no information, and a growing dialog makes every prompt
longer: slower rollouts, slower training, and eventually a context overflow.
"""

from __future__ import annotations

import copy

from ludic_core.context.full_dialog import FullDialog
from ludic_core.types import Message

__all__ = ["SlidingWindowContext"]


class SlidingWindowContext(FullDialog):
    """Sends the system prompt (if any) and the last `keep_last` user turns,
    each with whatever followed it. The full dialog is still stored."""

    def __init__(self, keep_last: int = 1) -> None:
        if keep_last < 1:
            raise ValueError(f"keep_last must be >= 1, got {keep_last}")
        super().__init__()
        self.keep_last = keep_last

    def messages(self) -> list[Message]:
        msgs = self._messages
        head = [m for m in msgs[:1] if m["role"] == "system"]
        body = msgs[len(head):]
        user_idx = [i for i, m in enumerate(body) if m["role"] == "user"]
        start = user_idx[-self.keep_last] if len(user_idx) >= self.keep_last else 0
        return copy.deepcopy(head + body[start:])
