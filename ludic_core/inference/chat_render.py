"""Chat rendering where text stays text: only the template's own markers become special ids.

Why: `apply_chat_template(..., tokenize=False)` followed by `encode(text)` turns any
`<|im_end|>` or `<|im_start|>system` that a message holds *as text* into the real special
ids. A model reply, an env observation, a tool output or a dataset row could then forge a
role turn (a policy writing its own system prompt), and the ids the trainer sees would not
be the ids that were sampled.

The choice: escape by tokenization, refuse only where that cannot be done faithfully.
Every non-empty string a message carries (its content, tool-call names and arguments;
never `role` or `type`) is replaced by a sentinel unique to this call, the template is
rendered, and its output is split at the sentinels. Template pieces are encoded normally
(their markers become special ids); message strings are encoded with
`split_special_tokens=True`, so `<|im_end|>` in a reply is the bytes of that text. The
sentinel rendering, with the strings put back, must equal the template's real rendering of
the messages; a template that transforms content (drops earlier reasoning, trims, upper-
cases) or tests it (`if '</think>' in content`) fails that check, and then the real
rendering is encoded whole, after refusing (`ChatRenderError`) any message string that
holds a special-token string. Either way no message text ever becomes a special id.

Pieces are encoded separately, so a message's tokens never merge with the template's, as
a completion's ids never merge with its prompt's: where a template appends turns, the next
prompt starts with the previous prompt and the reply's ids as `text_ids` encodes them.
Non-special added tokens (Qwen's `<think>`, `<tool_call>`) still encode as themselves:
they are what a model samples for that text, and they mark no turn.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

__all__ = ["ChatRenderError", "RenderedChat", "render_chat", "chat_prompt_ids", "text_ids", "special_strings"]

#: Keys whose string values steer a template rather than being rendered text.
_STRUCTURAL_KEYS = frozenset({"role", "type"})


class ChatRenderError(ValueError):
    """A message cannot be rendered without its text becoming control tokens."""


@dataclass(frozen=True)
class RenderedChat:
    """A template's rendering and where message text lies in it (character ranges).

    `content` is empty when the template could not be split faithfully (then no message
    holds a special-token string: `render_chat` refused those)."""

    text: str
    content: tuple[tuple[int, int], ...]

    def ids(self, tokenizer: Any, start: int = 0, end: int | None = None) -> list[int]:
        """Token ids of `text[start:end]`: template pieces with their special tokens,
        message text as plain text."""
        end = len(self.text) if end is None else end
        out: list[int] = []
        pos = start
        for a, b in self.content:
            a, b = max(a, start), min(b, end)
            if a >= b:
                continue
            out += _encode(tokenizer, self.text[pos:a], plain=False) + text_ids(tokenizer, self.text[a:b])
            pos = b
        return out + _encode(tokenizer, self.text[pos:end], plain=False)


def text_ids(tokenizer: Any, text: str) -> list[int]:
    """`text` as plain text: a special-token string in it is encoded as its characters."""
    return _encode(tokenizer, text, plain=True)


def special_strings(tokenizer: Any) -> frozenset[str]:
    """Every special token's text: the named ones and added tokens marked special."""
    found = set(getattr(tokenizer, "all_special_tokens", ()) or ())
    for tok in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values():
        if getattr(tok, "special", False):
            found.add(str(tok))
    return frozenset(s for s in found if s)


def chat_prompt_ids(tokenizer: Any, messages: Sequence[Mapping[str, Any]], *,
                    tools: Sequence[Mapping[str, Any]] | None = None) -> list[int]:
    """The ids a model sees before it writes the next assistant turn."""
    return render_chat(tokenizer, messages, tools=tools, add_generation_prompt=True).ids(tokenizer)


def render_chat(tokenizer: Any, messages: Sequence[Mapping[str, Any]], *,
                tools: Sequence[Mapping[str, Any]] | None = None,
                add_generation_prompt: bool = False) -> RenderedChat:
    """Render `messages` with `tokenizer`'s chat template; see the module docstring."""
    real = _apply(tokenizer, [dict(m) for m in messages], tools, add_generation_prompt)
    strings: list[str] = []
    nonce = _fresh_nonce(messages)
    marked = [_mark(m, nonce, strings) for m in messages]
    if not strings:
        return RenderedChat(real, ())
    rendered = _apply(tokenizer, marked, tools, add_generation_prompt)
    text, ranges = _unmark(rendered, nonce, strings)
    if text == real:
        return RenderedChat(real, tuple(ranges))
    _refuse_specials(tokenizer, strings)
    return RenderedChat(real, ())


# ---- internals -------------------------------------------------------------
def _encode(tokenizer: Any, text: str, *, plain: bool) -> list[int]:
    if not text:
        return []
    if plain:
        return list(tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True))
    return list(tokenizer.encode(text, add_special_tokens=False))


def _apply(tokenizer: Any, messages: list[dict], tools: Sequence[Mapping[str, Any]] | None,
           add_generation_prompt: bool) -> str:
    text = tokenizer.apply_chat_template(messages, tools=list(tools) if tools else None,
                                         add_generation_prompt=add_generation_prompt, tokenize=False)
    if not isinstance(text, str):
        raise ChatRenderError(f"the chat template rendered a {type(text).__name__}, not text")
    return text


def _fresh_nonce(messages: Sequence[Mapping[str, Any]]) -> str:
    """A nonce no message holds, so a sentinel can never be forged by the text it stands for."""
    seen = repr(list(messages))
    while True:
        nonce = secrets.token_hex(8)
        if nonce not in seen:
            return nonce


def _sentinel(nonce: str, i: int) -> str:
    return f"ludic{nonce}s{i}e"


def _mark(value: Any, nonce: str, strings: list[str], key: str | None = None) -> Any:
    """A copy of `value` with each non-empty rendered string replaced by its sentinel."""
    if isinstance(value, Mapping):
        return {k: _mark(v, nonce, strings, k) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_mark(v, nonce, strings) for v in value]
    if isinstance(value, str) and value and key not in _STRUCTURAL_KEYS:
        strings.append(value)
        return _sentinel(nonce, len(strings) - 1)
    return value


def _unmark(rendered: str, nonce: str, strings: list[str]) -> tuple[str, list[tuple[int, int]]]:
    """`rendered` with the original strings put back, and the ranges they occupy."""
    parts: list[str] = []
    ranges: list[tuple[int, int]] = []
    pos = length = 0
    for m in re.finditer(rf"ludic{nonce}s(\d+)e", rendered):
        index = int(m.group(1))
        if index >= len(strings):
            return "", []  # not ours: the check against the real rendering fails
        parts += [rendered[pos:m.start()], strings[index]]
        length += m.start() - pos
        ranges.append((length, length + len(strings[index])))
        length += len(strings[index])
        pos = m.end()
    parts.append(rendered[pos:])
    return "".join(parts), ranges


def _refuse_specials(tokenizer: Any, strings: Iterable[str]) -> None:
    specials = special_strings(tokenizer)
    for s in strings:
        hit = next((sp for sp in specials if sp in s), None)
        if hit is not None:
            raise ChatRenderError(
                f"message text holds the special token {hit!r} and this chat template transforms message text "
                "(a sentinel rendering did not reproduce it), so it cannot be kept as plain text; refusing to "
                f"render it as a control token (text starts {s[:60]!r})")
