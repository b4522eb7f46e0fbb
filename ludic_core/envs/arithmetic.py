"""Offline GSM8K-style word problems and an env over them.

Real GSM8K needs a download and a model far past a tiny one; these problems
share its format ("question", "answer" ending in "#### <int>") so the same
parser / verifier / training code runs end-to-end offline, and the "easy"
level (one +/- of numbers up to 20) is learnable by a very small model.
"""

from __future__ import annotations

import random
from typing import Literal

from ludic_core.envs.dataset_qa import DatasetQAEnv, gsm8k_target_parser, numeric_verifier

__all__ = ["generate_arithmetic_problems", "ArithmeticEnv", "ARITHMETIC_SYSPROMPT"]

Difficulty = Literal["easy", "medium", "hard"]
_DIFFICULTIES = ("easy", "medium", "hard")
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


def generate_arithmetic_problems(
    n: int, seed: int = 0, difficulty: Difficulty = "easy"
) -> list[dict]:
    """`n` word problems as {"question", "answer"} dicts, GSM8K format.

    easy: one +/- with numbers 1..20; medium: two +/- steps (numbers <= 30);
    hard: a multiplication and a +/- step. Answers are never negative, and
    the same (n, seed, difficulty) always gives the same list.
    """
    if difficulty not in _DIFFICULTIES:
        raise ValueError(f"unknown difficulty {difficulty!r}; expected one of {_DIFFICULTIES}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = random.Random(f"arithmetic:{difficulty}:{seed}")
    problems = []
    for _ in range(n):
        p = _Problem(rng)
        if difficulty == "easy":
            question, result = _chain_problem(p, 1, 20)
        elif difficulty == "medium":
            question, result = _chain_problem(p, 2, 30)
        else:
            question, result = _product_problem(p)
        problems.append({"question": question, "answer": p.answer(result)})
    return problems


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
            generate_arithmetic_problems(n, seed=seed, difficulty=difficulty),
            target_parser=gsm8k_target_parser,
            verifier=numeric_verifier,
            system_prompt=system_prompt,
            index=index,
        )
        self.difficulty = difficulty
