"""Distillation teachers: a frozen model's log-prob of every token the student sampled.

The trainer asks its teacher once per train step, before the batch's optimiser
updates (so reused mini-batches and epochs do not score twice), and hands the
result to the loss as `LossInputs.teacher_logprobs`. Two teachers: a model dir
scored in-process (`ModelTeacher`), batched by a token budget, or a vLLM server
(`ludic_core.vllm.teacher.VLLMTeacher`), asked for prompt log-probs. Either must
read the student's ids as the same text: `build_teacher` refuses another
tokenizer, naming both.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import TYPE_CHECKING, Any, Protocol, Sequence, runtime_checkable

import torch

from ludic_core.batching.saw import SAWItem
from ludic_core.training.scoring import PolicyScorer

if TYPE_CHECKING:
    from ludic_core.algorithms.on_policy_distill import DistillTeacher

__all__ = ["Teacher", "ModelTeacher", "build_teacher", "check_same_vocabulary", "with_teacher_logprobs"]


@runtime_checkable
class Teacher(Protocol):
    def score(self, items: Sequence[SAWItem]) -> list[list[float]]:
        """Each item's teacher log-probs, aligned with its `input_ids` (entry k scores token k),
        0.0 off its action mask."""
        ...


def with_teacher_logprobs(teacher: Teacher, items: Sequence[SAWItem]) -> tuple[list[SAWItem], dict[str, float]]:
    """Copies of `items` carrying `teacher`'s log-probs, and what scoring them cost
    (`teacher_seconds`, `teacher_tokens`: the ids the teacher read)."""
    t0 = time.perf_counter()
    scores = teacher.score(items)
    if len(scores) != len(items):
        raise ValueError(f"the teacher scored {len(scores)} items of {len(items)}")
    out = []
    for item, values in zip(items, scores):
        if not all(math.isfinite(v) for v in values):
            raise ValueError(f"the teacher gave a non-finite log-prob for item {item.meta}")
        out.append(dataclasses.replace(item, teacher_logprobs=[float(v) for v in values]))
    return out, {"teacher_seconds": time.perf_counter() - t0,
                 "teacher_tokens": float(sum(len(i) for i in items))}


class ModelTeacher:
    """A frozen causal LM scored in-process, rows grouped longest first under `token_budget`
    padded tokens per forward; positions before a group's first action token are skipped."""

    def __init__(self, model: Any, *, device: torch.device | str = "cpu", pad_id: int = 0,
                 token_budget: int = 16_384, chunk_tokens: int = 4_096) -> None:
        if token_budget < 1:
            raise ValueError(f"token_budget must be >= 1, got {token_budget}")
        self.device = torch.device(device)
        self.model = model.to(self.device).eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.pad_id, self.token_budget = pad_id, token_budget
        self.scorer = PolicyScorer(self.model, device_type=self.device.type, compute_dtype=torch.float32,
                                   chunk_tokens=chunk_tokens)

    def score(self, items: Sequence[SAWItem]) -> list[list[float]]:
        out: list[list[float]] = [[] for _ in items]
        order = sorted(range(len(items)), key=lambda i: len(items[i]), reverse=True)
        at = 0
        while at < len(order):
            width = len(items[order[at]])
            rows = order[at: at + max(1, self.token_budget // max(width, 1))]
            at += len(rows)
            for i, values in zip(rows, self._score_rows([items[i] for i in rows], width)):
                out[i] = values
        return out

    @torch.no_grad()
    def _score_rows(self, items: list[SAWItem], width: int) -> list[list[float]]:
        ids = torch.full((len(items), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(items), width), dtype=torch.long)
        for row, item in enumerate(items):
            ids[row, :len(item)] = torch.tensor(item.input_ids)
            attention[row, :len(item)] = 1
        first = min((item.action_mask.index(1) for item in items if 1 in item.action_mask), default=1)
        start = max(first - 1, 0)  # position t scores token t + 1
        logprobs, _ = self.scorer(ids.to(self.device), attention.to(self.device), start, None, False)
        logprobs = logprobs.float().cpu()
        result = []
        for row, item in enumerate(items):
            values = [0.0] * len(item)
            for k in range(start + 1, len(item)):
                if item.action_mask[k]:
                    values[k] = float(logprobs[row, k - start - 1])
            result.append(values)
        return result


def check_same_vocabulary(student: Any, teacher: Any, where: str) -> None:
    """ValueError unless the two tokenizers map the same strings to the same ids: the teacher scores
    the student's ids, and another vocabulary would score other text."""
    theirs, ours = teacher.get_vocab(), student.get_vocab()
    if theirs == ours:
        return
    differ = sorted(set(theirs.items()) ^ set(ours.items()))[:3]
    raise ValueError(f"the teacher at {where} has another tokenizer than the student ({len(theirs)} against "
                     f"{len(ours)} vocabulary entries; e.g. {differ} differ). Distillation scores the student's "
                     "own ids, so the teacher must read them as the same text: use a teacher of the student's "
                     "family (cross-tokenizer alignment is not implemented)")


def build_teacher(spec: DistillTeacher, student_tokenizer: Any, *, device: torch.device | str = "cpu") -> Teacher:
    """The teacher a distillation config names, checked against the student's tokenizer."""
    if spec.base_url is not None:
        from ludic_core.vllm.teacher import VLLMTeacher

        remote = VLLMTeacher(spec.base_url, model=spec.served_model, api_key=spec.api_key,
                             concurrency=spec.concurrency)
        remote.check_tokenizer(student_tokenizer)
        return remote
    from ludic_core.models import load_model_and_tokenizer
    from ludic_core.training.model_setup import pad_id

    assert spec.model_path is not None  # the config holds exactly one of the two
    model, tokenizer = load_model_and_tokenizer(spec.model_path)
    check_same_vocabulary(student_tokenizer, tokenizer, spec.model_path)
    return ModelTeacher(model, device=device, pad_id=pad_id(model, tokenizer), token_budget=spec.token_budget)
