"""Distillation teachers: a frozen model's log-prob of every token the student sampled.

The trainer asks its teacher once per train step, before the batch's optimiser
updates (so reused mini-batches and epochs do not score twice), and hands the
result to the loss as `LossInputs.teacher_logprobs`. Two teachers: a model dir
scored in-process (`ModelTeacher`), batched by a token budget, or a vLLM server
(`ludic_core.vllm.teacher.VLLMTeacher`), asked for prompt log-probs. Either must
read the student's ids as the same text: `build_teacher` refuses another
tokenizer, naming both.

Both score at the temperature each item was sampled at (the trainer tempers the
student's log-probs the same way), so a student distilled from itself gets no
credit and distillation's fixed point is the teacher itself; a log-prob below
`TEACHER_FLOOR` (a token the teacher all but forbids) counts as the floor, so that
one such token cannot outweigh a whole step.

Top-k distillation (`TopKDistillLoss`) reads more: at each action position the
teacher's K likeliest next tokens and their log-probs (`TopKTeacher.score_top_k`;
an in-process model only: the vLLM teacher is refused, naming why).
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from typing import TYPE_CHECKING, Any, Protocol, Sequence, runtime_checkable

import torch

from ludic_core.batching.collate import sampling_temperature
from ludic_core.batching.saw import SAWItem
from ludic_core.training.distributed import DistContext, all_gather_json, all_reduce_sum
from ludic_core.training.scoring import PolicyScorer

if TYPE_CHECKING:
    from ludic_core.algorithms.on_policy_distill import DistillTeacher

__all__ = ["Teacher", "TopKTeacher", "TopKScores", "ModelTeacher", "TEACHER_FLOOR", "build_teacher",
           "check_same_vocabulary", "with_teacher_logprobs"]

#: The lowest teacher log-prob credited (vLLM reports an impossible token as -9999).
TEACHER_FLOOR = -30.0
#: Logit entries one top-k forward of an in-process teacher may hold (2^26 fp32: 256 MiB).
_LOGITS_BUDGET = 1 << 26


@runtime_checkable
class Teacher(Protocol):
    def score(self, items: Sequence[SAWItem]) -> list[list[float]]:
        """Each item's teacher log-probs, aligned with its `input_ids` (entry k scores token k),
        0.0 off its action mask."""
        ...


#: One item's top-k scores, each aligned with its `input_ids`: the sampled tokens' log-probs, and at
#: each position the K likeliest ids and their log-probs (zeros off the action mask).
TopKScores = tuple[list[float], list[list[int]], list[list[float]]]


@runtime_checkable
class TopKTeacher(Teacher, Protocol):
    def score_top_k(self, items: Sequence[SAWItem], k: int) -> list[TopKScores]:
        """Each item's `TopKScores`, the likeliest K ids at each of its action positions (K capped at
        the ids the student can sample)."""
        ...


def with_teacher_logprobs(teacher: Teacher, items: Sequence[SAWItem], ctx: DistContext | None = None, *,
                          top_k: int | None = None) -> tuple[list[SAWItem], dict[str, float]]:
    """Copies of `items` carrying `teacher`'s log-probs (with `top_k`, its top-k ids and log-probs at
    each position too), and what scoring them cost on this rank (`teacher_seconds`: the call's wall
    time; `teacher_tokens`: the ids this rank's teacher read).

    Under torchrun every rank holds the whole batch, so each scores only `items[rank::world]` and the
    ranks exchange the scores (`all_gather_json`: a float's repr round-trips exactly): every rank ends with all of them,
    for 1/world of the teacher compute. The checks below then run on the full set on every rank alike."""
    if top_k is not None and not isinstance(teacher, TopKTeacher):
        raise ValueError(f"top-k distillation reads the teacher's {top_k} likeliest tokens at each position, which "
                         f"{type(teacher).__name__} does not give: use an in-process teacher (algorithm.teacher."
                         "model_path), or top_k None (the sampled tokens' log-probs, which a vLLM server gives)")

    def run(part: Sequence[SAWItem]) -> list[Any]:
        if top_k is None:
            return [[float(v) for v in row] for row in teacher.score(part)]
        assert isinstance(teacher, TopKTeacher)
        return [[[float(v) for v in lps], ids, tops] for lps, ids, tops in teacher.score_top_k(part, top_k)]

    t0 = time.perf_counter()
    if ctx is None or not ctx.is_distributed:
        rows = run(items)
        tokens = sum(len(i) for i in items)
    else:
        mine = items[ctx.rank::ctx.world_size]
        try:
            own, error = run(mine), None
        except Exception as exc:  # said to every rank first: the others would wait in the gather forever
            own, error = [], exc
        if all_reduce_sum(float(error is not None), ctx):
            if error is not None:
                raise error
            raise RuntimeError("the distillation teacher failed on another rank: its error is in that rank's log")
        rows = _interleave(all_gather_json(own, ctx), len(items))
        tokens = sum(len(i) for i in mine)
    if len(rows) != len(items):
        raise ValueError(f"the teacher scored {len(rows)} items of {len(items)}")
    out = []
    for item, row in zip(items, rows):
        values = row if top_k is None else row[0]
        top = {} if top_k is None else _checked_top(item, row[1], row[2])
        if len(values) != len(item):
            raise ValueError(f"the teacher gave {len(values)} log-probs for item {item.meta} of {len(item)} ids")
        if any(map(_not_log_prob, values)):
            bad = next(filter(_not_log_prob, values))
            raise ValueError(f"the teacher gave {bad!r} as a log-prob for item {item.meta}: log-probs are <= 0 (a "
                             "vLLM server started with --logprobs-mode raw_logits returns logits instead)")
        out.append(dataclasses.replace(item, teacher_logprobs=[max(float(v), TEACHER_FLOOR) for v in values], **top))
    return out, {"teacher_seconds": time.perf_counter() - t0, "teacher_tokens": float(tokens)}


def _not_log_prob(value: float) -> bool:
    """NaN, or above 0 by more than float error."""
    return math.isnan(value) or value > 1e-4


def _checked_top(item: SAWItem, ids: list[list[int]], lps: list[list[float]]) -> dict[str, Any]:
    """`SAWItem` fields from a teacher's top-k rows, refused unless they are log-probs (<= 0, not NaN)
    of distinct ids, one row a token; a log-prob below `TEACHER_FLOOR` counts as the floor."""
    if len(ids) != len(item) or len(lps) != len(item):
        raise ValueError(f"the teacher gave {len(ids)}/{len(lps)} top-k rows for item {item.meta} of {len(item)} ids")
    for k, (row_ids, row_lps) in enumerate(zip(ids, lps)):
        if k == 0 or not item.action_mask[k]:  # position 0 is never predicted: nothing scores it
            continue
        if len(set(row_ids)) != len(row_ids) or any(map(_not_log_prob, row_lps)):
            raise ValueError(f"the teacher's top-k at token {k} of item {item.meta} is not distinct ids with "
                             f"log-probs <= 0: ids {row_ids[:8]}, log-probs {row_lps[:8]}")
    return {"teacher_top_ids": [[int(i) for i in row] for row in ids],
            "teacher_top_logprobs": [[max(float(v), TEACHER_FLOOR) for v in row] for row in lps]}


def _interleave(per_rank: list[list[list[float]]], n: int) -> list[list[float]]:
    """Rank r's k-th row back at item r + k * world. Every rank sees the same rows, so a teacher that
    scored another number of items than its share fails here on every rank alike (no rank hangs)."""
    world = len(per_rank)
    got, shares = [len(rows) for rows in per_rank], [len(range(r, n, world)) for r in range(world)]
    if got != shares:
        raise ValueError(f"the teacher scored {sum(got)} items of {n} (per rank {got} of {shares})")
    out: list[list[float]] = [[] for _ in range(n)]
    for r, rows in enumerate(per_rank):
        out[r::world] = rows
    return out


class ModelTeacher:
    """A frozen causal LM scored in-process, rows grouped longest first under `token_budget`
    padded tokens per forward; positions before a group's first action token are skipped."""

    def __init__(self, model: Any, *, device: torch.device | str = "cpu", pad_id: int = 0,
                 token_budget: int = 16_384, chunk_tokens: int = 4_096, student_rows: int | None = None) -> None:
        if token_budget < 1:
            raise ValueError(f"token_budget must be >= 1, got {token_budget}")
        self.device = torch.device(device)
        self.model = model.to(self.device).eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.pad_id, self.token_budget = pad_id, token_budget
        #: top-k picks among the ids the student can sample (a teacher may have more rows)
        self.student_rows = student_rows
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

    def score_top_k(self, items: Sequence[SAWItem], k: int) -> list[TopKScores]:
        """`TopKScores` of each item, rows grouped as in `score`, fewer a forward where the
        [rows, positions, vocabulary] logits would pass `_LOGITS_BUDGET` entries."""
        vocab = int(self.model.get_output_embeddings().weight.shape[0])
        out: list[Any] = [None] * len(items)
        order = sorted(range(len(items)), key=lambda i: len(items[i]), reverse=True)
        at = 0
        while at < len(order):
            width = len(items[order[at]])
            fit = min(self.token_budget // max(width, 1), _LOGITS_BUDGET // max(width * vocab, 1))
            rows = order[at: at + max(1, fit)]
            at += len(rows)
            for i, scores in zip(rows, self._top_rows([items[i] for i in rows], width, k)):
                out[i] = scores
        return out

    @torch.no_grad()
    def _top_rows(self, items: list[SAWItem], width: int, k: int) -> list[TopKScores]:
        ids, attention, start, temps = self._rows(items, width)
        kwargs = {"logits_to_keep": width - start} if self.scorer.keeps_logits and start else {}
        logits = self.model(input_ids=ids.to(self.device), attention_mask=attention.to(self.device),
                            **self.scorer.no_cache, **kwargs).logits
        logits = logits[:, -(width - start):-1].float()  # position t scores token t + 1
        if temps is not None:
            logits = logits / temps.to(self.device)[:, None, None]
        logprobs = torch.log_softmax(logits, -1)
        picked = logprobs if self.student_rows is None else logprobs[..., :self.student_rows]
        top_lps, top_ids = picked.topk(min(k, picked.shape[-1]), dim=-1)
        sampled = logprobs.gather(-1, ids[:, start + 1:, None].to(self.device)).squeeze(-1)
        kk = top_ids.shape[-1]
        result: list[TopKScores] = []
        for row, item in enumerate(items):
            values, row_ids, row_lps = [0.0] * len(item), [[0] * kk] * len(item), [[0.0] * kk] * len(item)
            tids, tlps, vals = top_ids[row].cpu().tolist(), top_lps[row].cpu().tolist(), sampled[row].cpu().tolist()
            for pos in range(start + 1, len(item)):
                if item.action_mask[pos]:
                    at = pos - start - 1
                    values[pos], row_ids[pos], row_lps[pos] = vals[at], tids[at], tlps[at]
            result.append((values, row_ids, row_lps))
        return result

    def _rows(self, items: list[SAWItem], width: int) -> tuple[torch.Tensor, torch.Tensor, int, torch.Tensor | None]:
        """Right-padded ids and attention [rows, width], the first scored position, and the rows'
        sampling temperatures (None when all are 1)."""
        ids = torch.full((len(items), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(items), width), dtype=torch.long)
        for row, item in enumerate(items):
            ids[row, :len(item)] = torch.tensor(item.input_ids)
            attention[row, :len(item)] = 1
        first = min((item.action_mask.index(1) for item in items if 1 in item.action_mask), default=1)
        temps = torch.tensor([sampling_temperature(item.meta) for item in items], dtype=torch.float32)
        return ids, attention, max(first - 1, 0), temps if bool((temps != 1.0).any()) else None

    @torch.no_grad()
    def _score_rows(self, items: list[SAWItem], width: int) -> list[list[float]]:
        ids, attention, start, temps = self._rows(items, width)  # position t scores token t + 1
        tempered = temps.to(self.device) if temps is not None else None
        logprobs, _ = self.scorer(ids.to(self.device), attention.to(self.device), start, tempered, False)
        rows = logprobs.float().cpu().tolist()
        result = []
        for row, item in zip(rows, items):
            values = [0.0] * len(item)
            for k in range(start + 1, len(item)):
                if item.action_mask[k]:
                    values[k] = row[k - start - 1]
            result.append(values)
        return result


def check_same_vocabulary(student: Any, teacher: Any, where: str, *, teacher_rows: int | None = None,
                          student_rows: int | None = None) -> None:
    """ValueError unless every (token, id) of the student's vocabulary is the teacher's too (a teacher
    may have more: a newer model of the same family), and the teacher's output layer has a row for
    every id the student can sample (`*_rows`: their embedding sizes, which may exceed the vocabulary)."""
    theirs, ours = teacher.get_vocab(), student.get_vocab()
    missing = sorted(set(ours.items()) - set(theirs.items()))
    if missing:
        raise ValueError(
            f"the teacher at {where} has another tokenizer than the student: {len(missing)} of the student's "
            f"{len(ours)} vocabulary entries are not the teacher's (e.g. {missing[:3]}). Distillation scores the "
            "student's own ids, so the teacher must read them as the same text: use a teacher of the student's "
            "family (cross-tokenizer alignment is not implemented)")
    if teacher_rows is not None and student_rows is not None and teacher_rows < student_rows:
        raise ValueError(f"the teacher at {where} scores {teacher_rows} ids, but the student can sample "
                         f"{student_rows}: a sampled id past the teacher's vocabulary would have no log-prob")


def build_teacher(spec: DistillTeacher, student_tokenizer: Any, *, device: torch.device | str = "cpu",
                  student_rows: int | None = None, chunk_tokens: int = 4_096) -> Teacher:
    """The teacher a distillation config names, checked against the student's tokenizer (and, given
    `student_rows`, the student's output size)."""
    if spec.base_url is not None:
        from ludic_core.vllm.teacher import VLLMTeacher

        api_key = os.environ.get(spec.api_key_env) if spec.api_key_env else None
        if spec.api_key_env and not api_key:
            raise ValueError(f"algorithm.teacher.api_key_env names {spec.api_key_env!r}, which is not set")
        remote = VLLMTeacher(spec.base_url, model=spec.served_model, api_key=api_key, concurrency=spec.concurrency)
        remote.check_tokenizer(student_tokenizer)
        return remote
    from ludic_core.models import load_model_and_tokenizer
    from ludic_core.training.model_setup import pad_id

    assert spec.model_path is not None  # the config holds exactly one of the two
    target = torch.device(device)
    # bf16 on an accelerator (as the KL reference), loaded straight there; fp32 on the CPU
    model, tokenizer = load_model_and_tokenizer(spec.model_path, dtype="bfloat16" if target.type == "cuda" else "float32",
                                                device=str(target), chat=False)
    check_same_vocabulary(student_tokenizer, tokenizer, spec.model_path,
                          teacher_rows=model.get_output_embeddings().weight.shape[0],
                          student_rows=student_rows)
    return ModelTeacher(model, device=target, pad_id=pad_id(model, tokenizer), token_budget=spec.token_budget,
                        chunk_tokens=chunk_tokens, student_rows=student_rows)
