"""A verifiers (v1) environment written the way a verifiers user writes one, for the
adapter's offline tests: a taskset over a local JSONL file, a task rubric
(`@vf.reward` exact match, a `@vf.metric`) and a judge plugin of our own
(`FormatRubricJudge`, plugged through `taskset.task.judges`).

It is a plain module exporting one Taskset and one Judge via `__all__`, so
verifiers' own loader finds both by the id "vf_local_qa" (this directory is on
sys.path under pytest), as it finds an installed environment package.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import verifiers.v1 as vf


class QAData(vf.TaskData):
    answer: str


class QATask(vf.Task[QAData]):
    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        return float(trace.last_reply.strip() == self.data.answer)

    @vf.metric
    async def reply_chars(self, trace: vf.Trace) -> float:
        return float(len(trace.last_reply))


class QAConfig(vf.TasksetConfig):
    path: str = ""
    """A JSONL file of {"question", "answer"} rows."""


class LocalQATaskset(vf.Taskset[QATask, QAConfig]):
    def load(self) -> list[QATask]:
        rows = [json.loads(line) for line in Path(self.config.path).read_text().splitlines() if line.strip()]
        return [QATask(QAData(prompt=r["question"], answer=str(r["answer"]), id=f"row-{i}",
                              system_prompt="Answer with the number only."), self.config.task)
                for i, r in enumerate(rows)]


class FormatRubricConfig(vf.JudgeConfig):
    id: str = "vf_local_qa"
    max_chars: int = 8


class FormatRubricJudge(vf.Judge[float, FormatRubricConfig]):
    """A rubric checked in Python: the fraction of its criteria the reply meets. An
    empty reply is a judge failure (it raises), which verifiers records on the rollout
    instead of scoring the model 0."""

    async def score(self, task: vf.TaskData, trace: vf.Trace) -> float:
        reply = trace.last_reply
        if not reply:
            raise ValueError("nothing to judge: the reply is empty")
        criteria = [bool(re.fullmatch(r"-?\d+", reply)), len(reply) <= self.config.max_chars]
        return sum(criteria) / len(criteria)


__all__ = ["LocalQATaskset", "FormatRubricJudge"]
