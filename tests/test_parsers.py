"""Parsers: actions, format rewards and feedback for success and failure."""

from __future__ import annotations

import pytest

from ludic_core.parsers import (
    ParseResult,
    boxed_parser,
    code_block_parser,
    compose_parsers,
    identity_parser,
    think_prefix_parser,
    xml_tag_parser,
)

ANSWER_OBS = "Invalid format: answer inside <answer>...</answer>."


def test_identity_parser_strips():
    assert identity_parser("  hi \n") == ParseResult("hi", 0.0, None)


def test_xml_tag_success_takes_last_tag_stripped():
    p = xml_tag_parser("answer", success_reward=0.5)
    r = p("<answer>1</answer> wait, no: <answer>\n 42 \n</answer> done")
    assert r == ParseResult("42", 0.5, None)
    assert r.ok


@pytest.mark.parametrize("text", ["no tag at all", "<answer>   </answer>", "<answer>unclosed"])
def test_xml_tag_failure(text):
    r = xml_tag_parser("answer", failure_penalty=-0.3)(text)
    assert r == ParseResult(None, -0.3, ANSWER_OBS)
    assert not r.ok


def test_xml_tag_exact():
    p = xml_tag_parser("answer", exact=True)
    assert p("  <answer> B2 </answer>\n") == ParseResult("B2", 0.0, None)
    assert p("I think <answer>B2</answer>").action is None
    assert p("<answer>B2</answer> ok").action is None
    assert p("<answer>1</answer><answer>2</answer>") == ParseResult(None, 0.0, ANSWER_OBS)


@pytest.mark.parametrize("parser", [xml_tag_parser("answer"), think_prefix_parser(), boxed_parser(),
                                    code_block_parser()], ids=["xml_tag", "think_prefix", "boxed", "code_block"])
def test_a_malformed_reply_costs_nothing_unless_asked(parser):
    """The env owns the reward scale: no parser adds a penalty by default (a -1
    took a 0/1 env's mean return below 0); `failure_penalty` asks for one."""
    r = parser("no format at all")
    assert r.action is None and r.reward == 0.0 and r.obs.startswith("Invalid format")


def test_xml_tag_rejects_bad_tag_name():
    with pytest.raises(ValueError, match="invalid tag"):
        xml_tag_parser("a b")


def test_think_prefix():
    p = think_prefix_parser(success_reward=0.1, failure_penalty=-0.5)
    assert p("<think>hmm\nlong</think>\n move e4 ") == ParseResult("move e4", 0.1, None)
    assert p("\n<think></think>x").action == "x"
    for bad in ["move e4", "text <think>a</think> b", "<think>never closed", "<think>a</think>   "]:
        r = p(bad)
        assert r.action is None and r.reward == -0.5
        assert "<think>" in r.obs


def test_boxed_nesting_and_last():
    p = boxed_parser(success_reward=1.0)
    assert p(r"so \boxed{\frac{1}{2}}") == ParseResult(r"\frac{1}{2}", 1.0, None)
    assert p(r"\boxed{1} then \boxed{ {a}{b{c}} }").action == "{a}{b{c}}"
    # unclosed trailing box (cut-off) is ignored: the earlier complete box wins
    assert p(r"\boxed{7} and \boxed{8").action == "7"


@pytest.mark.parametrize("text", ["42", r"\boxed{}", r"\boxed{unbalanced", r"\boxed{  }"])
def test_boxed_failure(text):
    r = boxed_parser(failure_penalty=-2.0)(text)
    assert r.action is None and r.reward == -2.0
    assert r.obs is not None and "\\boxed{...}" in r.obs


def test_compose_success_sums_rewards():
    p = compose_parsers(
        think_prefix_parser(success_reward=0.1),
        xml_tag_parser("answer", success_reward=0.2),
        boxed_parser(success_reward=0.3),
    )
    r = p(r"<think>x</think> <answer>it is \boxed{5}</answer>")
    assert r.action == "5"
    assert r.reward == pytest.approx(0.6)  # 0.1 + 0.2 + 0.3
    assert r.ok


def test_compose_short_circuits_on_first_failure():
    calls = []

    def never(text: str) -> ParseResult:
        calls.append(text)
        return ParseResult(text)

    p = compose_parsers(
        think_prefix_parser(success_reward=0.25, failure_penalty=-1.0),
        xml_tag_parser("answer", success_reward=0.5, failure_penalty=-1.0),
        never,
    )
    r = p("<think>x</think> 42 without tags")
    assert r.action is None
    assert r.reward == pytest.approx(-0.75)  # 0.25 + (-1.0)
    assert r.obs == ANSWER_OBS
    assert calls == []  # later parsers never ran

    first_fails = p("no think block")
    assert first_fails == ParseResult(None, -1.0, "Invalid format: start with <think>...</think>, then give your answer.")


def test_compose_needs_parsers():
    with pytest.raises(ValueError, match="at least one"):
        compose_parsers()
