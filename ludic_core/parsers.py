"""Parsers: turn raw model text into an env action, with format rewards.

A parser is any `Callable[[str], ParseResult]`. On success `action` is the
string handed to the env; on failure `action` is None, `obs` is the feedback
shown to the agent and `reward` is the format penalty. Rewards are intrinsic:
they are added to the step's reward so the policy learns the format.

The penalty is 0 unless asked for (`failure_penalty=-1.0`, or `kwargs:
{failure_penalty: -1}` in a config). The env owns its reward scale: a default
-1 per malformed reply took a 0/1 env's mean return below 0 and made a correct
answer after one malformed try score 0 (not a success). With 0, a malformed
reply earns what an unanswered one does, which already teaches the format (only
a parsed answer can score), and evaluations count parse errors on their own
(`parse_error_rate`). Shaping stays one keyword away where a recipe wants it
(tic-tac-toe: a malformed move costs what an illegal one does).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

__all__ = [
    "ParseResult",
    "Parser",
    "identity_parser",
    "identity",
    "xml_tag_parser",
    "think_prefix_parser",
    "boxed_parser",
    "code_block_parser",
    "compose_parsers",
]


@dataclass(frozen=True)
class ParseResult:
    action: str | None
    reward: float = 0.0
    obs: str | None = None

    @property
    def ok(self) -> bool:
        return self.action is not None


Parser = Callable[[str], ParseResult]


def identity_parser(text: str) -> ParseResult:
    """Accept any text; the action is the stripped completion."""
    return ParseResult(text.strip())


def identity() -> Parser:
    """The identity parser as a factory, like the others (configs name factories)."""
    return identity_parser


def xml_tag_parser(
    tag: str,
    *,
    success_reward: float = 0.0,
    failure_penalty: float = 0.0,
    exact: bool = False,
) -> Parser:
    """Action = stripped content of the *last* `<tag>...</tag>`.

    The last one wins because models often restate or correct themselves.
    With `exact=True` the whole (stripped) text must be a single tag element,
    which punishes chatter around the answer.
    """
    if not tag or not re.fullmatch(r"[A-Za-z_][\w.-]*", tag):
        raise ValueError(f"xml_tag_parser: invalid tag name {tag!r}")
    open_t, close_t = f"<{tag}>", f"</{tag}>"
    pattern = re.compile(re.escape(open_t) + r"(.*?)" + re.escape(close_t), re.DOTALL)
    obs = f"Invalid format: answer inside {open_t}...{close_t}."

    def parse(text: str) -> ParseResult:
        if exact:
            body = text.strip()
            inner = body[len(open_t) : len(body) - len(close_t)]
            ok = (
                body.startswith(open_t)
                and body.endswith(close_t)
                and len(body) >= len(open_t) + len(close_t)
                and open_t not in inner
                and close_t not in inner
            )
            content = inner.strip() if ok else ""
        else:
            matches = pattern.findall(text)
            content = matches[-1].strip() if matches else ""
        if not content:
            return ParseResult(None, failure_penalty, obs)
        return ParseResult(content, success_reward)

    return parse


def think_prefix_parser(
    *, success_reward: float = 0.0, failure_penalty: float = 0.0
) -> Parser:
    """Require `<think>...</think>` first; the action is what follows it.

    Keeps reasoning out of the env: only the text after `</think>` is acted on.
    Leading whitespace before `<think>` is tolerated; an empty answer fails.
    """
    obs = "Invalid format: start with <think>...</think>, then give your answer."

    def parse(text: str) -> ParseResult:
        body = text.lstrip()
        if not body.startswith("<think>"):
            return ParseResult(None, failure_penalty, obs)
        end = body.find("</think>", len("<think>"))
        if end < 0:
            return ParseResult(None, failure_penalty, obs)
        action = body[end + len("</think>") :].strip()
        if not action:
            return ParseResult(None, failure_penalty, obs)
        return ParseResult(action, success_reward)

    return parse


_BOXED = "\\boxed{"


def _boxed_contents(text: str) -> list[str]:
    """Contents of top-level `\\boxed{...}` groups with balanced braces, in order."""
    found: list[str] = []
    pos = text.find(_BOXED)
    while pos >= 0:
        start = pos + len(_BOXED)
        depth, i = 1, start
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth:  # unbalanced: the rest of the text cannot hold a complete box
            break
        found.append(text[start : i - 1])
        pos = text.find(_BOXED, i)
    return found


def boxed_parser(
    *, success_reward: float = 0.0, failure_penalty: float = 0.0
) -> Parser:
    """Action = stripped content of the last balanced `\\boxed{...}` (math answers).

    Braces nest (`\\boxed{\\frac{1}{2}}` -> `\\frac{1}{2}`). An unclosed trailing
    box (e.g. cut-off text) is ignored, so an earlier complete box wins.
    """
    obs = "Invalid format: put the final answer inside \\boxed{...}."

    def parse(text: str) -> ParseResult:
        boxes = [b.strip() for b in _boxed_contents(text)]
        if not boxes or not boxes[-1]:
            return ParseResult(None, failure_penalty, obs)
        return ParseResult(boxes[-1], success_reward)

    return parse


_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.DOTALL)


def code_block_parser(
    *,
    language: str | None = "python",
    success_reward: float = 0.0,
    failure_penalty: float = 0.0,
) -> Parser:
    """Action = the last fenced code block (```python ... ```), as written.

    A block tagged with another language is not taken; an untagged block is.
    The code keeps its indentation: a function body and a whole module both
    mean something to the code env.
    """
    obs = f"Invalid format: give the code in a ```{language or ''} fenced block."

    def parse(text: str) -> ParseResult:
        blocks = [body for lang, body in _FENCE.findall(text)
                  if language is None or lang.lower() in ("", language.lower())]
        if not blocks or not blocks[-1].strip():
            return ParseResult(None, failure_penalty, obs)
        return ParseResult(blocks[-1].rstrip() + "\n", success_reward)

    return parse


def compose_parsers(*parsers: Parser) -> Parser:
    """Chain parsers, each on the previous action; rewards add up.

    The first failure stops the chain: its reward is the sum so far plus the
    failure's penalty, and its obs is the failing parser's feedback.
    """
    if not parsers:
        raise ValueError("compose_parsers needs at least one parser")

    def parse(text: str) -> ParseResult:
        total = 0.0
        current = text
        result = ParseResult(text)
        for parser in parsers:
            result = parser(current)
            total += result.reward
            if not result.ok:
                return ParseResult(None, total, result.obs)
            current = result.action  # type: ignore[assignment]
        return ParseResult(current, total, result.obs)

    return parse
