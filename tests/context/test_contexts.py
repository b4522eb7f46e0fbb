"""Context strategies: storage, copies, and reasoning truncation."""

from __future__ import annotations

import pytest

from ludic_core.context import ContextStrategy, FullDialog, TruncatedThinkingContext, truncate_thinking

PH = "<think>[truncated]</think>"


def test_full_dialog_keeps_everything_and_returns_copies():
    ctx = FullDialog()
    assert isinstance(ctx, ContextStrategy)
    ctx.reset("be brief")
    ctx.add_user("hi")
    ctx.add({"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
             "function": {"name": "add", "arguments": "{}"}}]})
    ctx.add({"role": "tool", "tool_call_id": "c1", "name": "add", "content": "5"})
    ctx.add_assistant("<think>x</think>done")
    msgs = ctx.messages()
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool", "assistant"]
    assert msgs[-1]["content"] == "<think>x</think>done"
    msgs[2]["tool_calls"][0]["id"] = "mutated"
    msgs.append({"role": "user", "content": "extra"})
    assert ctx.messages()[2]["tool_calls"][0]["id"] == "c1"
    assert len(ctx.messages()) == 5


def test_reset_without_system_prompt_clears():
    ctx = FullDialog()
    ctx.reset("sys")
    ctx.add_user("a")
    ctx.reset(None)
    assert ctx.messages() == []


def test_add_validates_messages():
    ctx = FullDialog()
    with pytest.raises(ValueError, match="invalid role"):
        ctx.add({"role": "robot", "content": "x"})
    with pytest.raises(ValueError, match="tool_call_id"):
        ctx.add({"role": "tool", "content": "x"})
    with pytest.raises(TypeError, match="content"):
        ctx.add({"role": "user", "content": 3})


def test_stored_message_is_not_aliased():
    ctx = FullDialog()
    msg = {"role": "user", "content": "a"}
    ctx.add(msg)
    msg["content"] = "changed"
    assert ctx.messages()[0]["content"] == "a"


def test_truncated_thinking_replaces_old_think_blocks():
    ctx = TruncatedThinkingContext()
    assert isinstance(ctx, ContextStrategy)
    ctx.reset("sys <think>in system</think>")
    ctx.add_user("q1 <think>user text</think>")
    ctx.add_assistant("<think>long reasoning 1</think>answer 1")
    ctx.add_user("q2")
    ctx.add_assistant("<think>\nlong\nreasoning 2\n</think>\nanswer 2")
    shown = ctx.messages()
    assert shown[0]["content"] == "sys <think>in system</think>"  # non-assistant untouched
    assert shown[1]["content"] == "q1 <think>user text</think>"
    assert shown[2]["content"] == PH + "answer 1"
    assert shown[4]["content"] == PH + "\nanswer 2"
    full = ctx.full_messages()
    assert full[2]["content"] == "<think>long reasoning 1</think>answer 1"
    assert full[4]["content"] == "<think>\nlong\nreasoning 2\n</think>\nanswer 2"


def test_truncated_thinking_custom_placeholder_and_tool_calls():
    ctx = TruncatedThinkingContext(placeholder="")
    ctx.add_user("q")
    ctx.add({"role": "assistant", "content": "<think>plan</think>", "tool_calls": []})
    ctx.add_assistant("no reasoning here")
    shown = ctx.messages()
    assert shown[1] == {"role": "assistant", "content": "", "tool_calls": []}
    assert shown[2]["content"] == "no reasoning here"


@pytest.mark.parametrize(
    "text, expected",
    [
        ("<think>a</think>x<think>b</think>y", PH + "x" + PH + "y"),
        ("reasoning whose opening tag was in the prompt</think> ans", PH + " ans"),
        ("ans <think>cut off at the token limit", "ans " + PH),
        (PH + "idempotent", PH + "idempotent"),
    ],
)
def test_truncate_thinking_variants(text, expected):
    assert truncate_thinking(text, PH) == expected


def test_sliding_window_keeps_system_and_last_user_turns():
    from ludic_core.context import SlidingWindowContext

    ctx = SlidingWindowContext(keep_last=1)
    ctx.reset("S")
    ctx.add_user("board 1")
    ctx.add_assistant("<move>5</move>")
    ctx.add_user("board 2")
    assert ctx.messages() == [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "board 2"},
    ]
    ctx.add_assistant("<move>1</move>")
    ctx.add_user("board 3")
    two = SlidingWindowContext(keep_last=2)
    two.reset(None)
    for m in ctx.full_messages()[1:]:
        two.add(m)
    assert [m["content"] for m in two.messages()] == ["board 2", "<move>1</move>", "board 3"]
    assert len(ctx.full_messages()) == 6  # storage keeps everything


def test_sliding_window_rejects_zero():
    import pytest

    from ludic_core.context import SlidingWindowContext

    with pytest.raises(ValueError, match="keep_last"):
        SlidingWindowContext(keep_last=0)
