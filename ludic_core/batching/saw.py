"""SAW items: (State, Action, Weight) — one model call, ready to train on.

Built from rollouts' token traces, never by re-tokenising text: the ids the
policy actually produced (and their sampling log-probs) are what the loss sees.
A step's tool-call turns (`info["internal_traces"]`) become items too, with the
step's weight: they are policy output as much as the final answer.

Each model call after a rollout's first records whether its prompt starts with the
previous call's prompt + sampled completion ids (`meta["prompt_continues"]`) and, if
not, the first index where it differs (`meta["prompt_diverges_at"]`): a chat template
that re-renders the assistant turn (rewrites its tool-call blocks, drops a sampled eos
for its own end marker) or a context that trims the dialog shows up there, and in the
batch's count `prompts_not_continuing`. Each item still trains on exactly what was sampled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Sequence

from ludic_core.types import Rollout, TokenTrace

__all__ = ["SAWItem", "SAWBatch", "build_saw_batch", "is_stale"]


@dataclass
class SAWItem:
    input_ids: list[int]
    attention_mask: list[int]
    action_mask: list[int]  # 1 on completion tokens (trained on), 0 on the prompt
    weight: float  # the credit (advantage) of this model call
    meta: dict[str, Any] = field(default_factory=dict)  # rollout_id, step_index, group_id, policy_version
    actor_logprobs: list[float] | None = None  # aligned with input_ids, 0.0 off-action
    # a distillation teacher's log-probs of the same tokens, aligned likewise (set by the trainer)
    teacher_logprobs: list[float] | None = None
    # under top-k distillation (set by the trainer): at each position the teacher's K likeliest next
    # ids and their log-probs (entry k scores token k's position as `teacher_logprobs` does; zeros off the
    # action mask)
    teacher_top_ids: list[list[int]] | None = None
    teacher_top_logprobs: list[list[float]] | None = None

    def __post_init__(self) -> None:
        n = len(self.input_ids)
        if len(self.attention_mask) != n or len(self.action_mask) != n:
            raise ValueError(
                f"SAWItem masks must match input_ids length {n}: "
                f"attention_mask {len(self.attention_mask)}, action_mask {len(self.action_mask)}"
            )
        if self.actor_logprobs is not None and len(self.actor_logprobs) != n:
            raise ValueError(f"SAWItem actor_logprobs has {len(self.actor_logprobs)} entries for {n} tokens")
        if self.teacher_logprobs is not None and len(self.teacher_logprobs) != n:
            raise ValueError(f"SAWItem teacher_logprobs has {len(self.teacher_logprobs)} entries for {n} tokens")
        if (self.teacher_top_ids is None) != (self.teacher_top_logprobs is None):
            raise ValueError("SAWItem teacher_top_ids and teacher_top_logprobs come together")
        if self.teacher_top_ids is not None and self.teacher_top_logprobs is not None:
            widths = {len(row) for row in self.teacher_top_ids} | {len(row) for row in self.teacher_top_logprobs}
            if len(self.teacher_top_ids) != n or len(self.teacher_top_logprobs) != n or len(widths) > 1:
                raise ValueError(f"SAWItem teacher_top_ids/teacher_top_logprobs must be {n} rows of one width K, "
                                 f"got {len(self.teacher_top_ids)}/{len(self.teacher_top_logprobs)} rows of widths "
                                 f"{sorted(widths)}")
        if not math.isfinite(self.weight):
            raise ValueError(f"SAWItem weight must be finite, got {self.weight!r} ({self.meta})")

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def num_action_tokens(self) -> int:
        return sum(self.action_mask)

    def to_dict(self) -> dict[str, Any]:
        return {
            "input_ids": self.input_ids,
            "attention_mask": self.attention_mask,
            "action_mask": self.action_mask,
            "weight": self.weight,
            "meta": self.meta,
            "actor_logprobs": self.actor_logprobs,
            **({"teacher_logprobs": self.teacher_logprobs} if self.teacher_logprobs is not None else {}),
            **({"teacher_top_ids": self.teacher_top_ids, "teacher_top_logprobs": self.teacher_top_logprobs}
               if self.teacher_top_ids is not None else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SAWItem:
        missing = [k for k in ("input_ids", "attention_mask", "action_mask", "weight") if k not in data]
        if missing:
            raise ValueError(f"SAWItem dict is missing {missing}")
        return cls(
            input_ids=[int(x) for x in data["input_ids"]],
            attention_mask=[int(x) for x in data["attention_mask"]],
            action_mask=[int(x) for x in data["action_mask"]],
            weight=float(data["weight"]),
            meta=dict(data.get("meta") or {}),
            actor_logprobs=None if data.get("actor_logprobs") is None else [float(x) for x in data["actor_logprobs"]],
            teacher_logprobs=(None if data.get("teacher_logprobs") is None
                              else [float(x) for x in data["teacher_logprobs"]]),
            teacher_top_ids=(None if data.get("teacher_top_ids") is None
                             else [[int(x) for x in row] for row in data["teacher_top_ids"]]),
            teacher_top_logprobs=(None if data.get("teacher_top_logprobs") is None
                                  else [[float(x) for x in row] for row in data["teacher_top_logprobs"]]),
        )


@dataclass
class SAWBatch:
    items: list[SAWItem]
    meta: dict[str, Any] = field(default_factory=dict)  # counts of what was dropped and why

    def __len__(self) -> int:
        return len(self.items)

    @property
    def has_actor_logprobs(self) -> bool:
        return all(i.actor_logprobs is not None for i in self.items)


def _item(trace: TokenTrace, weight: float, meta: dict[str, Any]) -> SAWItem:
    p, c = len(trace.prompt_token_ids), len(trace.completion_token_ids)
    lps = None
    if trace.completion_logprobs is not None:
        lps = [0.0] * p + list(trace.completion_logprobs)
    return SAWItem(
        input_ids=list(trace.prompt_token_ids) + list(trace.completion_token_ids),
        attention_mask=[1] * (p + c),
        action_mask=[0] * p + [1] * c,
        weight=float(weight),
        meta={**meta, "policy_version": trace.policy_version},
        actor_logprobs=lps,
    )


def _diverges_at(prompt: list[int], previous: list[int]) -> int | None:
    """None when `prompt` starts with `previous`, else the first index where they differ
    (`len(prompt)` when the prompt is a proper prefix of `previous`)."""
    n = len(previous)
    if len(prompt) >= n and prompt[:n] == previous:
        return None
    for i, (a, b) in enumerate(zip(prompt, previous)):
        if a != b:
            return i
    return min(len(prompt), n)


def build_saw_batch(
    rollouts: Sequence[Rollout],
    weights: Sequence[Sequence[float]],
    *,
    max_seq_len: int | None = None,
    overlong: Literal["error", "drop"] = "error",
) -> SAWBatch:
    """One item per model call of every step that carries a token trace.

    `weights[i][j]` is step j of rollouts[i] (a credit assigner's output).
    Items longer than `max_seq_len` raise (default) or are dropped and counted.
    Steps without a trace (text-only clients) are skipped and counted.
    Items after a rollout's first model call say whether their prompt continues the
    previous call's prompt + completion (module docstring).
    """
    if len(weights) != len(rollouts):
        raise ValueError(f"got {len(weights)} weight lists for {len(rollouts)} rollouts")
    items: list[SAWItem] = []
    counts = {"rollouts": len(rollouts), "steps_without_trace": 0, "overlong_dropped": 0,
              "prompts_not_continuing": 0}
    for r, ws in zip(rollouts, weights):
        if len(ws) != len(r.steps):
            raise ValueError(f"rollout {r.id}: {len(ws)} weights for {len(r.steps)} steps")
        previous: list[int] | None = None  # the rollout's previous model call: prompt + completion ids
        for step, w in zip(r.steps, ws):
            traces = [TokenTrace.from_dict(t) for t in step.info.get("internal_traces", [])]
            traces += [step.trace] if step.trace is not None else []
            if not traces:
                counts["steps_without_trace"] += 1
            meta = {"rollout_id": r.id, "step_index": step.index, "group_id": r.meta.get("group_id"),
                    "reward": r.total_reward}
            temperature = step.info.get("sampling_temperature", r.meta.get("sampling_temperature"))
            if temperature is not None:
                meta["sampling_temperature"] = float(temperature)
            for trace in traces:
                prompt = trace.prompt_token_ids
                call_meta = meta
                if previous is not None:
                    at = _diverges_at(prompt, previous)
                    call_meta = {**meta, "prompt_continues": at is None}
                    if at is not None:
                        call_meta["prompt_diverges_at"] = at
                previous = prompt + trace.completion_token_ids
                if not trace.completion_token_ids:
                    continue
                item = _item(trace, w, call_meta)
                if max_seq_len is not None and len(item) > max_seq_len:
                    if overlong == "error":
                        raise ValueError(
                            f"rollout {r.id} step {step.index}: {len(item)} tokens exceed "
                            f"max_seq_len={max_seq_len} (set overlong='drop' to drop and count)"
                        )
                    counts["overlong_dropped"] += 1
                    continue
                counts["prompts_not_continuing"] += int(item.meta.get("prompt_continues") is False)
                items.append(item)
    return SAWBatch(items=items, meta=counts)


def is_stale(policy_version: int | None, current: int, max_lag: int | None) -> bool:
    """The one staleness rule (the trainer's filter and the queue's reader both ask it): an
    item sampled at `policy_version` is stale when more than `max_lag` versions behind
    `current`. An item of unknown version, or no `max_lag`, is never stale."""
    return max_lag is not None and policy_version is not None and current - int(policy_version) > max_lag
