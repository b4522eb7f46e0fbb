"""The tool-use recipe's teacher: it calls a calculator on only part of the problems.

Why only part: a teacher that always calls leaves RL nothing to find. This one
calls on a fixed share of questions, chosen by a hash of the question and blind
to how hard it is, and otherwise works the sum out in its head (correctly: it is
an oracle). Its student learns the format (the call, then copying the result into
the answer) and the teacher's indifference; what pays off, calling exactly where
its own head fails (a product of two 2-digit numbers), is left for RL to find.
"""

from __future__ import annotations

import hashlib
import json
from typing import Callable

from ludic_core.envs.arithmetic import worked_solution
from ludic_core.types import Message

__all__ = ["arithmetic_tool_teacher", "calls_tool_on"]


def calls_tool_on(question: str, tool_rate: float) -> bool:
    """Whether the teacher calls on `question`: a hash below `tool_rate`, so the choice is the
    same at every temperature and in every process, and independent of the problem's difficulty."""
    h = int.from_bytes(hashlib.sha256(question.encode()).digest()[:8], "big") / 2**64
    return h < tool_rate


def _question_and_results(messages: list[Message]) -> tuple[str, list[str]]:
    """The last user message, and the tool results that came after it."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.get("role") == "user" and isinstance(m.get("content"), str):
            results = [str(t.get("content") or "") for t in messages[i + 1:] if t.get("role") == "tool"]
            return m["content"], results
    raise ValueError("arithmetic_tool_teacher: no user message with a question to answer")


def arithmetic_tool_teacher(tool_rate: float = 0.25, tool: str = "calculator",
                            show_work: bool = True) -> Callable[..., str]:
    """Scripted teacher for `ArithmeticEnv` with a calculator (registered policy `arithmetic_tool_teacher`).

    On a question it calls on, it writes one Hermes call per worked line
    (`<tool_call>{"name": "calculator", "arguments": {"expression": "37 * 48"}}</tool_call>`) and then
    answers with the last result; otherwise it answers as `arithmetic_oracle(show_work)` does.
    `tool_rate` 0 is a teacher without tools (for the "SFT without tools" row), 1 one that always calls.
    """
    if not 0.0 <= tool_rate <= 1.0:
        raise ValueError(f"tool_rate must be in [0, 1], got {tool_rate!r}")

    def policy(messages: list[Message]) -> str:
        question, results = _question_and_results(messages)
        total, lines = worked_solution(question)
        if calls_tool_on(question, tool_rate):
            if len(results) < len(lines):
                expression = lines[len(results)].split(" = ")[0]
                return "<tool_call>" + json.dumps({"name": tool, "arguments": {"expression": expression}}) + "</tool_call>"
            return f"<answer>{results[-1].strip() if results else total}</answer>"
        work = "".join(f"{line}\n" for line in lines) if show_work else ""
        return f"{work}<answer>{total}</answer>"

    return policy
