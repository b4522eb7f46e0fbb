"""reasoning-gym's procedural tasks as one env family, scored by their own scorers.

`tasks` names one task, a list, or a weighted mix (`{basic_arithmetic: 1.0,
base_conversion: 0.5}`); `config` gives a task its generator settings. The env
seed picks the task and the entry (`tasks.pick`), so a run repeats exactly.
The reward is the task's own `score_answer` on the parsed answer (the agent's
parser may add a format term); the policy's text reaches nothing else, and
reaches it in a child process under a deadline (`scorer`). A scorer that
raises, hangs or runs out of memory gives reward 0 and says why in the step's
info: a policy is an adversary of its reward, and one odd answer must not end
a rollout. Tasks whose scorer `eval`s the answer are refused by default
(`tasks.EVAL_SCORERS`).

reasoning-gym is an optional extra, imported when an env is built, so this
module loads without it.
"""

from __future__ import annotations

import numbers
import random
from typing import Any, Iterable

from ludic_core.bounds import MAX_SECONDS, MAX_SEED
from ludic_core.envs.reasoning_gym import tasks as rgt
from ludic_core.envs.reasoning_gym.scorer import SCORE_TIMEOUT_S, score_answer, warm_scorer
from ludic_core.envs.single_agent import SingleAgentEnv
from ludic_core.metrics.per_task import per_task_metrics
from ludic_core.types import StepOutcome

__all__ = ["ReasoningGymEnv", "REASONING_GYM_SYSPROMPT", "MAX_ANSWER_CHARS"]

#: reasoning-gym's own "direct" system prompt (`reasoning_gym.utils.SYSTEM_PROMPTS`), so
#: a pretrained model answers in the `<answer>` tags the recipe's parser reads.
REASONING_GYM_SYSPROMPT = ("Answer the question directly. Provide your answer between <answer> and </answer> tags. "
                           "Do not return any preamble, explanation, or reasoning.")
#: Longer answers score 0 unread: no task's answer comes near, and a scorer's cost grows with its input.
MAX_ANSWER_CHARS = 8192


def _score(mix: rgt.TaskMix, task: str, index: int, answer: str, max_chars: int,
           timeout: float) -> tuple[float, str | None]:
    """(reward, why it is 0) from the task's scorer, in the scorer process; never raises."""
    if len(answer) > max_chars:
        return 0.0, f"answer is {len(answer):,} characters; at most {max_chars:,} are scored"
    return score_answer(mix, task, index, answer, timeout=timeout)


class ReasoningGymEnv(SingleAgentEnv):
    """One reasoning-gym entry per episode; reward = the task's `score_answer`.

    `seed` fixes every task's problem set (another seed = held-out problems);
    `reset(seed)` picks the task and the entry. `size` is the number of entries
    per task the seeds cycle through.
    """

    def __init__(self, tasks: str | list[str] | dict[str, float], config: dict[str, dict[str, Any]] | None = None,
                 size: int = 100_000, seed: int = 0, system_prompt: str | None = REASONING_GYM_SYSPROMPT,
                 allow_eval_scorers: bool = False, max_answer_chars: int = MAX_ANSWER_CHARS,
                 score_timeout: float = SCORE_TIMEOUT_S) -> None:
        super().__init__()
        self.mix = rgt.task_mix(tasks, config, size=size, seed=seed, allow_eval_scorers=bool(allow_eval_scorers))
        if isinstance(max_answer_chars, bool) or not isinstance(max_answer_chars, int) or max_answer_chars < 1:
            raise ValueError(f"reasoning_gym: max_answer_chars must be an int >= 1, got {max_answer_chars!r:.100}")
        if isinstance(score_timeout, bool) or not isinstance(score_timeout, numbers.Real) \
                or not 0 < score_timeout <= MAX_SECONDS:
            raise ValueError(f"reasoning_gym: score_timeout must be seconds in (0, {MAX_SECONDS}], "
                             f"got {score_timeout!r:.100}")
        self.system_prompt = system_prompt
        self.max_answer_chars = max_answer_chars
        self.score_timeout = float(score_timeout)
        self._task: str | None = None
        self._index = 0
        self._entry: dict[str, Any] | None = None

    @property
    def suggested_sysprompt(self) -> str | None:
        return self.system_prompt

    @staticmethod
    def episode_metrics(rollouts: Iterable[Any]) -> dict[str, float]:
        """Accuracy, mean score and pass@k per task (`basic_arithmetic/accuracy`, ...)."""
        return per_task_metrics(rollouts)

    def env_reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        seed = random.randrange(MAX_SEED) if seed is None else seed
        self._task, self._index = rgt.pick(self.mix, seed)
        self._entry = rgt.entry(self.mix, self._task, self._index)
        warm_scorer()  # the scorer process starts (imports reasoning-gym) while the policy answers
        return str(self._entry["question"]), {"task": self._task, "index": self._index}

    def env_step(self, action: str) -> StepOutcome:
        if self._entry is None or self._task is None:
            raise RuntimeError("ReasoningGymEnv: no question in progress; call reset() first")
        entry, self._entry = self._entry, None
        answer = action if isinstance(action, str) else str(action)
        score, why = _score(self.mix, self._task, self._index, answer, self.max_answer_chars, self.score_timeout)
        info: dict[str, Any] = {"task": self._task, "index": self._index, "score": score,
                                "reference": str(entry.get("answer"))[:1000]}
        if why is not None:
            info["score_error"] = why
        return StepOutcome(obs="Correct." if score >= 1.0 else "Incorrect.", reward=score, terminated=True, info=info)
