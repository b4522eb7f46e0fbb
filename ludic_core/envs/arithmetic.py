"""Offline GSM8K-style word problems and an env over them.

Real GSM8K needs a download and a model far past a tiny one; these problems
share its format ("question", "answer" ending in "#### <int>") so the same
parser / verifier / training code runs end-to-end offline, and the "easy"
level (one +/- of numbers up to 20) is learnable by a very small model.
"""

from __future__ import annotations

import random
from functools import lru_cache
import re
from typing import Callable, Literal

from ludic_core.bounds import MAX_PROBLEMS
from ludic_core.envs.dataset_qa import DatasetQAEnv, gsm8k_target_parser, numeric_verifier
from ludic_core.types import Message

__all__ = [
    "generate_arithmetic_problems",
    "ArithmeticEnv",
    "ARITHMETIC_SYSPROMPT",
    "arithmetic_oracle",
    "solve_arithmetic_question",
    "worked_solution",
]

Difficulty = Literal["easy", "medium", "hard", "mixed"]
_DIFFICULTIES = ("easy", "medium", "hard", "mixed")
# No example answer: small models copy "<answer>7</answer>" by induction.
ARITHMETIC_SYSPROMPT = "Solve the math problem. Give the final number inside answer tags."

_NAMES = ("Tom", "Sara", "Ali", "Mia", "Ben", "Lena", "Omar", "Ivy", "Sam", "Zoe", "Raj", "Ana")
_OBJECTS = (
    ("apple", "apples"),
    ("marble", "marbles"),
    ("sticker", "stickers"),
    ("pencil", "pencils"),
    ("cookie", "cookies"),
    ("book", "books"),
    ("coin", "coins"),
    ("card", "cards"),
    ("shell", "shells"),
    ("balloon", "balloons"),
)
_CONTAINERS = (("box", "boxes"), ("basket", "baskets"), ("bag", "bags"), ("jar", "jars"))
# Events per scene: (sign, phrase); {k} is the amount, {m} another person.
_PERSON_EVENTS = (
    (+1, "buys {k} more"),
    (+1, "finds {k} more"),
    (+1, "gets {k} from {m}"),
    (-1, "gives {k} to {m}"),
    (-1, "loses {k}"),
    (-1, "sells {k}"),
)
_BOX_EVENTS = (
    (+1, "puts in {k} more"),
    (+1, "adds {k}"),
    (-1, "takes out {k}"),
    (-1, "removes {k}"),
)


class _Problem:
    """Builds one problem while recording the worked solution line by line."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.name, self.other = rng.sample(_NAMES, 2)
        self.obj, self.objs = rng.choice(_OBJECTS)
        self.lines: list[str] = []

    def count(self, n: int) -> str:
        return f"{n} {self.obj if n == 1 else self.objs}"

    def apply(self, total: int, sign: int, k: int) -> int:
        result = total + k if sign > 0 else total - k
        self.lines.append(f"{total} {'+' if sign > 0 else '-'} {k} = {result}")
        return result

    def events(self, total: int, count: int, table: tuple, hi: int) -> tuple[list[str], int]:
        """`count` random gain/loss events; losses never drive the total below 0."""
        phrases = []
        for _ in range(count):
            sign, phrase = self.rng.choice(table)
            if sign < 0 and total == 0:
                sign, phrase = next(e for e in table if e[0] > 0)
            k = self.rng.randint(1, hi if sign > 0 else min(hi, total))
            phrases.append(phrase.format(k=k, m=self.other))
            total = self.apply(total, sign, k)
        return phrases, total

    def answer(self, result: int) -> str:
        return "\n".join([*self.lines, f"#### {result}"])


def _chain_problem(p: _Problem, n_events: int, hi: int) -> tuple[str, int]:
    """Start amount then `n_events` gains/losses, about a person or a container."""
    start = p.rng.randint(1, hi)
    n = p.name
    if p.rng.random() < 0.5:
        events, result = p.events(start, n_events, _PERSON_EVENTS, hi)
        ask = f"How many {p.objs} does {n} have now?"
        if n_events == 1:
            return f"{n} has {p.count(start)} and {events[0]}. {ask}", result
        return f"{n} has {p.count(start)}. {n} {', then '.join(events)}. {ask}", result
    box = p.rng.choice(_CONTAINERS)[0]
    events, result = p.events(start, n_events, _BOX_EVENTS, hi)
    ask = f"How many {p.objs} are in the {box} now?"
    verb = "is" if start == 1 else "are"
    intro = f"There {verb} {p.count(start)} in a {box}."
    return f"{intro} {n} {', then '.join(events)}. {ask}", result


def _product_problem(p: _Problem) -> tuple[str, int]:
    """A multiplication plus one addition or subtraction."""
    a, b = p.rng.randint(2, 9), p.rng.randint(2, 12)
    n, (box, boxes) = p.name, p.rng.choice(_CONTAINERS)
    product = a * b
    p.lines.append(f"{a} * {b} = {product}")
    ask = f"How many {p.objs} does {n} have now?"
    if p.rng.random() < 0.5:
        events, result = p.events(product, 1, _PERSON_EVENTS, 20)
        intro = f"{n} buys {a} {boxes} with {b} {p.objs} in each {box}."
        return f"{intro} Then {n} {events[0]}. {ask}", result
    start = p.rng.randint(1, 20)
    p.lines.append(f"{start} + {product} = {start + product}")
    intro = f"{n} has {p.count(start)} and buys {a} {boxes} of {b} {p.objs} each."
    return f"{intro} {ask}", start + product


def _large_product_problem(p: _Problem) -> tuple[str, int]:
    """A product of two 2-digit numbers: one line to a calculator, beyond a tiny model's head."""
    a, b = p.rng.randint(12, 99), p.rng.randint(12, 99)
    (box, boxes) = p.rng.choice(_CONTAINERS)
    p.lines.append(f"{a} * {b} = {a * b}")
    return f"{p.name} buys {a} {boxes} with {b} {p.objs} in each {box}. How many {p.objs} does {p.name} have now?", a * b


def generate_arithmetic_problems(
    n: int, seed: int = 0, difficulty: Difficulty = "easy"
) -> list[dict]:
    """`n` word problems as {"question", "answer"} dicts, GSM8K format.

    easy: one +/- with numbers 1..20; medium: two +/- steps (numbers <= 30);
    hard: a multiplication and a +/- step; mixed: half easy, half a product of
    two 2-digit numbers (the tool-use recipe's task: a calculator pays off on
    exactly the second half). Answers are never negative, and
    the same (n, seed, difficulty) always gives the same list.
    """
    if difficulty not in _DIFFICULTIES:
        raise ValueError(f"unknown difficulty {difficulty!r}; expected one of {_DIFFICULTIES}")
    if not isinstance(n, int) or not 0 <= n <= MAX_PROBLEMS:  # all of them are held in memory
        raise ValueError(f"n must be an int in [0, {MAX_PROBLEMS:,}], got {n!r}")
    rng = random.Random(f"arithmetic:{difficulty}:{seed}")
    problems = []
    for _ in range(n):
        p = _Problem(rng)
        if difficulty == "easy":
            question, result = _chain_problem(p, 1, 20)
        elif difficulty == "medium":
            question, result = _chain_problem(p, 2, 30)
        elif difficulty == "mixed":
            question, result = _chain_problem(p, 1, 20) if rng.random() < 0.5 else _large_product_problem(p)
        else:
            question, result = _product_problem(p)
        problems.append({"question": question, "answer": p.answer(result)})
    return problems


class _ProblemSet(tuple):
    """Generated problems with `column_names` (read by `DatasetQAEnv` instead of scanning rows)."""

    column_names = ["answer", "question"]


@lru_cache(maxsize=16)
def _problem_set(n: int, seed: int, difficulty: Difficulty) -> _ProblemSet:
    """An env is built per episode: generating 4000 problems each time cost minutes per 4096 episodes."""
    return _ProblemSet(generate_arithmetic_problems(n, seed=seed, difficulty=difficulty))


class ArithmeticEnv(DatasetQAEnv):
    """`DatasetQAEnv` over generated problems, graded numerically.

    `seed` fixes the problem set; `reset(seed)` picks the problem in it.
    """

    def __init__(
        self,
        n: int = 1000,
        seed: int = 0,
        difficulty: Difficulty = "easy",
        system_prompt: str | None = ARITHMETIC_SYSPROMPT,
        index: int | None = None,
    ) -> None:
        super().__init__(
            _problem_set(n, seed, difficulty),
            target_parser=gsm8k_target_parser,
            verifier=numeric_verifier,
            system_prompt=system_prompt,
            index=index,
        )
        self.difficulty = difficulty


# --- The oracle: solves the question text, the way a reader would. ---------
# Event patterns come from the generator's own tables, so a phrase added there
# is understood here; an unknown phrase is an error, never a silent guess.
_NAME_RE = r"[A-Z][a-z]+"
_EVENT_PATTERNS = tuple(
    (sign, re.compile(re.escape(phrase).replace(r"\{k\}", r"(\d+)").replace(r"\{m\}", _NAME_RE)))
    for sign, phrase in _PERSON_EVENTS + _BOX_EVENTS
)
_PRODUCT_EACH = re.compile(rf"{_NAME_RE} buys (\d+) [a-z]+ with (\d+) [a-z]+ in each [a-z]+")
_HAS_AND_BUYS = re.compile(rf"{_NAME_RE} has (\d+) [a-z]+ and buys (\d+) [a-z]+ of (\d+) [a-z]+ each")
_HAS_AND = re.compile(rf"{_NAME_RE} has (\d+) [a-z]+ and (.+)")
_HAS = re.compile(rf"{_NAME_RE} has (\d+) [a-z]+")
_THERE = re.compile(r"There (?:is|are) (\d+) [a-z]+ in an? [a-z]+")
_ACTS = re.compile(rf"(?:Then )?{_NAME_RE} (.+)")


def _event_delta(phrase: str) -> int | None:
    for sign, pattern in _EVENT_PATTERNS:
        m = pattern.fullmatch(phrase)
        if m:
            return sign * int(m[1])
    return None


def _intro(sentence: str) -> tuple[int, list[str], list[str]] | None:
    """The first sentence's starting total, its worked lines, and any event it already names."""
    if m := _PRODUCT_EACH.fullmatch(sentence):
        a, b = int(m[1]), int(m[2])
        return a * b, [f"{a} * {b} = {a * b}"], []
    if m := _HAS_AND_BUYS.fullmatch(sentence):
        start, a, b = int(m[1]), int(m[2]), int(m[3])
        return start + a * b, [f"{a} * {b} = {a * b}", f"{start} + {a * b} = {start + a * b}"], []
    if m := _HAS_AND.fullmatch(sentence):
        return int(m[1]), [], [m[2]]
    if m := _HAS.fullmatch(sentence) or _THERE.fullmatch(sentence):
        return int(m[1]), [], []
    return None


def worked_solution(question: str) -> tuple[int, list[str]]:
    """The answer to a `generate_arithmetic_problems` question, read from its
    text, and its worked lines ("12 - 5 = 7"), the same lines the generator
    writes into the problem's "answer".

    Sentences are: an intro (a start amount, or a product), event sentences
    ("Tom buys 3 more, then loses 2."), and a final "How many ...?". Raises
    ValueError quoting the question if any part is not understood.
    """
    *statements, ask = re.split(r"(?<=[.?])\s+", question.strip())
    intro = _intro(statements[0].removesuffix(".")) if statements else None
    if intro is None or not (ask.startswith("How many ") and ask.endswith("?")):
        raise ValueError(f"arithmetic_oracle cannot parse question {question!r}")
    total, lines, phrases = intro
    for sentence in statements[1:]:
        m = _ACTS.fullmatch(sentence.removesuffix("."))
        if m is None or not sentence.endswith("."):
            raise ValueError(f"arithmetic_oracle cannot parse {sentence!r} in question {question!r}")
        phrases += m[1].split(", then ")
    for phrase in phrases:
        delta = _event_delta(phrase)
        if delta is None:
            raise ValueError(f"arithmetic_oracle cannot parse event {phrase!r} in question {question!r}")
        lines.append(f"{total} {'+' if delta > 0 else '-'} {abs(delta)} = {total + delta}")
        total += delta
    return total, lines


def solve_arithmetic_question(question: str) -> int:
    """The answer to a `generate_arithmetic_problems` question (see `worked_solution`)."""
    return worked_solution(question)[0]


def _last_user_text(messages: list[Message]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            return message["content"]
    raise ValueError("arithmetic_oracle: no user message with a question to answer")


def arithmetic_oracle(show_work: bool = False) -> Callable[[list[Message]], str]:
    """The teacher for rejection sampling on `ArithmeticEnv` (registered policy
    `arithmetic_oracle`): answers the last user message as "<answer>N</answer>",
    the format the agent's `xml_tag` parser (tag `answer`) reads. With
    `show_work` the worked lines come first ("5 + 3 = 8\n<answer>8</answer>"):
    a small student then copies two numbers and adds them next to each other,
    instead of doing the whole sum in the one token before the answer.

    It solves the question from its text rather than looking it up, so it
    answers any seed, size or difficulty, and a problem it cannot read fails
    loudly instead of teaching a wrong answer.
    """

    def policy(messages: list[Message]) -> str:
        total, lines = worked_solution(_last_user_text(messages))
        work = "".join(f"{line}\n" for line in lines) if show_work else ""
        return f"{work}<answer>{total}</answer>"

    return policy
