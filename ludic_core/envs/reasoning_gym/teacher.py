"""The scripted teacher for `ReasoningGymEnv`: it answers with the entry's own answer.

reasoning-gym ships a reference answer with (almost) every entry, so rejection
sampling -> SFT needs no solver per task: the teacher finds the question among
the env's entries and replies with that entry's answer.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from ludic_core.envs.reasoning_gym import tasks as rgt
from ludic_core.types import Message

__all__ = ["reasoning_gym_answer"]


class _AnswerBook:
    """question -> reference answer, filled lazily by walking each task's entries
    in index order: rejection sampling walks seeds in order, so the teacher
    generates about as many entries as it is asked about."""

    def __init__(self, mix: rgt.TaskMix) -> None:
        self.mix = mix
        self.answers: dict[str, str] = {}
        self.next_index = {name: 0 for name in mix.names}

    def _advance(self) -> bool:
        grew = False
        for name, i in self.next_index.items():
            if i < self.mix.size:
                e = rgt.entry(self.mix, name, i)
                self.answers.setdefault(str(e["question"]), e["answer"])
                self.next_index[name] = i + 1
                grew = True
        return grew

    def answer(self, question: str) -> str:
        while question not in self.answers:
            if not self._advance():
                raise ValueError(f"reasoning_gym_answer: question {question[:200]!r} is not in tasks "
                                 f"{list(self.mix.names)} (seed {self.mix.seed}, size {self.mix.size}): "
                                 "the teacher needs the env's tasks, config, size and seed")
        found = self.answers[question]
        if found is None:
            raise ValueError(f"reasoning_gym_answer: the entry for {question[:200]!r} has no reference answer "
                             "(the task scores answers by checking them), so there is nothing to teach")
        return str(found)


def _last_user_text(messages: list[Message]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            return message["content"]
    raise ValueError("reasoning_gym_answer: no user message with a question to answer")


def reasoning_gym_answer(tasks: str | list[str] | dict[str, float], config: Mapping[str, Any] | None = None,
                         size: int = 100_000, seed: int = 0, tag: str | None = "answer",
                         allow_eval_scorers: bool = False) -> Callable[[list[Message]], str]:
    """The teacher for rejection sampling on `ReasoningGymEnv` (registered policy
    `reasoning_gym_answer`): replies with the entry's reference answer, inside
    `<tag>` (the agent's `xml_tag` parser) or bare (`tag: null`, the identity parser).

    Give it the env's `tasks`, `config`, `size` and `seed`: it finds the question
    among those entries, and a question it cannot find fails loudly rather than
    teaching a guess (after walking all `size` entries of every task: keep the
    teacher's kwargs the env's).
    """
    book = _AnswerBook(rgt.task_mix(tasks, config, size=size, seed=seed, allow_eval_scorers=allow_eval_scorers))

    def policy(messages: list[Message]) -> str:
        answer = book.answer(_last_user_text(messages))
        return f"<{tag}>{answer}</{tag}>" if tag else answer

    return policy
