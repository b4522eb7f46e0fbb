"""A small MBPP-style problem set in HumanEval's shape, written for this project.

Eight short functions with a canonical solution and a few asserts each: fast
tests and examples run these; real evaluation uses HumanEval
(`harness.load_humaneval`).
"""

from __future__ import annotations

from typing import Callable

from ludic_core.envs.code_exec.harness import CodeProblem

__all__ = ["mini_problems", "reference_solver"]


def _problem(n: int, entry: str, signature: str, doc: str, solution: str, asserts: list[str]) -> CodeProblem:
    prompt = f'def {entry}({signature}):\n    """{doc}"""\n'
    test = "def check(candidate):\n" + "".join(f"    assert {a}\n" for a in asserts)
    return CodeProblem(task_id=f"Mini/{n}", prompt=prompt, entry_point=entry, test=test,
                       canonical_solution=solution)


def mini_problems() -> list[CodeProblem]:
    return [
        _problem(0, "add", "a, b", "Return the sum of a and b.", "    return a + b\n",
                 ["candidate(1, 2) == 3", "candidate(-4, 4) == 0", "candidate(10, 5) == 15"]),
        _problem(1, "is_even", "n", "Return True if the integer n is even.", "    return n % 2 == 0\n",
                 ["candidate(2) is True", "candidate(7) is False", "candidate(0) is True", "candidate(-3) is False"]),
        _problem(2, "reverse_words", "s", "Return s with its space-separated words in reverse order.",
                 "    return ' '.join(reversed(s.split()))\n",
                 ["candidate('a b c') == 'c b a'", "candidate('hello') == 'hello'", "candidate('') == ''"]),
        _problem(3, "count_vowels", "s", "Return how many of the characters of s are vowels (aeiou, any case).",
                 "    return sum(c in 'aeiouAEIOU' for c in s)\n",
                 ["candidate('hello') == 2", "candidate('xyz') == 0", "candidate('AEIOU') == 5"]),
        _problem(4, "max_of_list", "xs", "Return the largest number in the non-empty list xs.",
                 "    return max(xs)\n",
                 ["candidate([1, 5, 3]) == 5", "candidate([-2, -9]) == -2", "candidate([7]) == 7"]),
        _problem(5, "factorial", "n", "Return n! for n >= 0.",
                 "    out = 1\n    for k in range(2, n + 1):\n        out *= k\n    return out\n",
                 ["candidate(0) == 1", "candidate(5) == 120", "candidate(10) == 3628800"]),
        _problem(6, "dedupe", "xs", "Return the items of xs without repeats, in first-seen order.",
                 "    seen = []\n    for x in xs:\n        if x not in seen:\n            seen.append(x)\n"
                 "    return seen\n",
                 ["candidate([1, 2, 1, 3, 2]) == [1, 2, 3]", "candidate([]) == []", "candidate(['a', 'a']) == ['a']"]),
        _problem(7, "is_palindrome", "s", "Return True if s reads the same forwards and backwards.",
                 "    return s == s[::-1]\n",
                 ["candidate('abba') is True", "candidate('abc') is False", "candidate('') is True"]),
    ]


def reference_solver(problems: str = "mini") -> Callable[..., str]:
    """A teacher (registered policy `code_reference`) that answers each problem
    with its canonical solution as a whole function in a ```python block: the
    format the `code_block` parser reads. For rejection sampling and tests; a
    prompt it does not know fails loudly instead of teaching a wrong answer."""
    from ludic_core.envs.code_exec.env import _problems

    solutions = {p.prompt.rstrip(): p.prompt + p.canonical_solution for p in _problems(problems)}

    def policy(messages) -> str:
        text = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
        prompt = text.removeprefix("```python\n").removesuffix("\n```").rstrip()
        if prompt not in solutions:
            raise KeyError(f"code_reference knows no problem with this prompt: {prompt[:80]!r}")
        return f"```python\n{solutions[prompt]}```"

    return policy
