"""`DatasetQAEnv`: one question from a dataset, one answer, one reward.

The env receives the *parsed* answer (the agent's parser pulls it out of
e.g. <answer></answer>), so it only has to compare it with the gold target.
`target_parser` and `verifier` are plain callables so a new dataset needs no
subclass: GSM8K is `target_parser=gsm8k_target_parser, verifier=numeric_verifier`.
"""

from __future__ import annotations

import math
import random
import re
from typing import Any, Callable, Mapping, Sequence

from ludic_core.envs.single_agent import SingleAgentEnv
from ludic_core.types import StepOutcome

__all__ = [
    "DatasetQAEnv",
    "exact_match_verifier",
    "numeric_verifier",
    "gsm8k_target_parser",
]

# "42", "-3", "4.5", "1,000", "1,234.5", ".5"; commas only as thousands groups.
_NUMBER_RE = re.compile(r"[+-]?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?|\.\d+)")


def _identity(text: str) -> str:
    return text


def exact_match_verifier(action: str, target: str) -> bool:
    return action.strip() == target.strip()


def _to_number(text: str) -> float | None:
    s = text.strip().rstrip(".").strip().removeprefix("$")
    if not _NUMBER_RE.fullmatch(s):
        return None
    value = float(s.replace(",", ""))
    return value if math.isfinite(value) else None


def numeric_verifier(action: str, target: str) -> bool:
    """True if both parse as the same number ("42" == "42.0" == "42." == "$42",
    "1,000" == "1000"). Anything that is not a plain number is wrong, so extra
    words around the answer are the parser's problem, not a free pass."""
    a, t = _to_number(action), _to_number(target)
    if a is None or t is None:
        return False
    return math.isclose(a, t, rel_tol=1e-9, abs_tol=1e-9)


def gsm8k_target_parser(answer: str) -> str:
    """The final answer of a GSM8K solution: text after the last '####',
    stripped, with thousands commas removed."""
    if "####" not in answer:
        raise ValueError(f"GSM8K answer has no '####' marker: {answer[-200:]!r}")
    return answer.rsplit("####", 1)[1].strip().replace(",", "")


def _columns(data: Any) -> list[str]:
    """Column names of a `datasets.Dataset` (duck-typed, so we never import
    `datasets` here) or the keys shared by every row of a list of dicts."""
    names = getattr(data, "column_names", None)
    if names is not None:
        return list(names)
    keys: set[str] | None = None
    for i, row in enumerate(data):
        if not isinstance(row, Mapping):
            raise TypeError(f"data rows must be dicts; row {i} is {type(row).__name__}")
        keys = set(row) if keys is None else keys & set(row)
    return sorted(keys or ())


class DatasetQAEnv(SingleAgentEnv):
    """Single-step QA over a `datasets.Dataset` or a list of dicts.

    The sample is `data[index]` if `index` is given, else `data[seed % len]`
    (a random one when seed is None). Reward 1.0 if `verifier(action, target)`
    else 0.0, where `target = target_parser(row[answer_key])`.
    """

    def __init__(
        self,
        data: Sequence[Mapping[str, Any]] | Any,
        question_key: str = "question",
        answer_key: str = "answer",
        target_parser: Callable[[str], str] = _identity,
        verifier: Callable[[str, str], bool] = exact_match_verifier,
        system_prompt: str | None = None,
        index: int | None = None,
    ) -> None:
        super().__init__()
        if len(data) == 0:
            raise ValueError("DatasetQAEnv needs at least one sample; data is empty")
        columns = _columns(data)
        for key in (question_key, answer_key):
            if key not in columns:
                raise ValueError(f"dataset has no column {key!r}; available columns: {columns}")
        if index is not None and not 0 <= index < len(data):
            raise IndexError(f"index {index} out of range for a dataset of {len(data)} samples")
        self.data = data
        self.question_key = question_key
        self.answer_key = answer_key
        self.target_parser = target_parser
        self.verifier = verifier
        self.system_prompt = system_prompt
        self.index = index
        self._sample_index: int | None = None
        self._target: str | None = None

    @property
    def suggested_sysprompt(self) -> str | None:
        return self.system_prompt

    def env_reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        n = len(self.data)
        if self.index is not None:
            i = self.index
        elif seed is not None:
            i = seed % n
        else:
            i = random.randrange(n)
        row = self.data[i]
        # Parse the target now so a malformed gold answer fails at reset,
        # before the agent spends a model call on the question.
        self._target = self.target_parser(str(row[self.answer_key]))
        self._sample_index = i
        return str(row[self.question_key]), {"sample_index": i}

    def env_step(self, action: str) -> StepOutcome:
        if self._target is None:
            name = type(self).__name__
            raise RuntimeError(f"{name}: no question in progress; call reset() first")
        target, self._target = self._target, None
        correct = bool(self.verifier(action, target))
        return StepOutcome(
            obs="Correct." if correct else "Incorrect.",
            reward=1.0 if correct else 0.0,
            terminated=True,
            info={"target": target, "correct": correct, "sample_index": self._sample_index},
        )
