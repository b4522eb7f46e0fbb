"""Incremental stop-string detection over a growing list of token ids.

Decoding only a trailing window of tokens per check (not the whole completion
per token) keeps the cost flat in the completion's length; checking after a
chunk of tokens (not after each) keeps it off the decode step's critical path.
The result is the same as checking after every token: the row ends at the first
token whose text completes a stop string.
"""

from __future__ import annotations

from typing import Any, Sequence

__all__ = ["StopScanner"]


class StopScanner:
    """Finds where a completion first contains any of `stops`."""

    def __init__(self, tokenizer: Any, stops: Sequence[str]) -> None:
        self.tokenizer, self.stops = tokenizer, tuple(s for s in stops if s)
        # Enough trailing tokens to contain any stop string (a token is >= 1 byte, a char <= 4).
        self.window = 4 * max((len(s) for s in self.stops), default=0) + 4
        self.checked = 0  # tokens[:checked] are known not to complete a stop string

    def _text(self, tokens: Sequence[int], start: int, end: int) -> str:
        return self.tokenizer.decode(list(tokens[max(0, start):end]), skip_special_tokens=True)

    def scan(self, tokens: Sequence[int]) -> int | None:
        """Index of the first token that completes a stop string, among those not yet scanned."""
        if not self.stops or len(tokens) <= self.checked:
            return None
        start, end = self.checked, len(tokens)
        if not any(s in self._text(tokens, start - self.window, end) for s in self.stops):
            self.checked = end
            return None
        for i in range(start, end):  # rare: find the exact token
            if any(s in self._text(tokens, i + 1 - self.window, i + 1) for s in self.stops):
                self.checked = i + 1
                return i
        self.checked = end  # a stop spread over more than the window (cannot happen with byte-level tokens)
        return None

    def cut(self, tokens: Sequence[int]) -> str:
        """The completion's text up to (not including) its first stop string."""
        full = self.tokenizer.decode(list(tokens), skip_special_tokens=True)
        hits = [full.find(s) for s in self.stops if s in full]
        return full[:min(hits)] if hits else full
