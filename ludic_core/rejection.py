"""Rejection sampling: keep the good episodes, store them as an SFT dataset.

One row per model call of every kept episode, in the Hugging Face chat
convention (`messages`: what the model saw, then its reply), so any student
can learn from any teacher: a student whose tokenizer differs renders the
messages with its own chat template. When the teacher's tokenizer *is* the
student's (same fingerprint), the exact prompt and completion ids are stored
too and SFT trains on them with no re-tokenisation. Saved with
`save_to_disk`, the dataset is a path a pipeline hands from stage to stage.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from pydantic import Field

from ludic_core.batching.chat import chat_items, chats_to_items, dataset_chats
from ludic_core.batching.saw import SAWItem
from ludic_core.frozen import FrozenModel
from ludic_core.models.fingerprint import tokenizer_fingerprint
from ludic_core.saved_dataset import load_saved_dataset
from ludic_core.types import Rollout, Step, TokenTrace

__all__ = ["KeepRule", "keep_episodes", "rollouts_to_dataset", "save_dataset", "load_saw_items", "load_sft_items"]

COLUMNS = ("messages", "prompt_token_ids", "completion_token_ids", "tokenizer", "completion_text", "reward",
           "rollout_id", "group_id", "step_index", "tools")


class KeepRule(FrozenModel):
    """Which sampled episodes become training data (all conditions apply)."""

    min_return: float | None = Field(None, description="keep episodes whose return is >= this (None = any)")
    best_of_group: bool = Field(False, description="per prompt (group of samples), keep only the best episode")
    dedupe: bool = Field(False, description="drop episodes whose every observation and reply repeats a kept one")


def _episode_key(r: Rollout) -> str:
    return json.dumps([[s.prev_obs, s.action] for s in r.steps])


def keep_episodes(rollouts: Sequence[Rollout], rule: KeepRule) -> tuple[list[Rollout], dict[str, float]]:
    """Finished episodes that pass `rule`, in sampling order; plus counts for the run's report."""
    ok = [r for r in rollouts if not r.failed and r.steps]
    if rule.min_return is not None:
        ok = [r for r in ok if r.total_reward >= rule.min_return]
    if rule.best_of_group:
        best: dict[Any, Rollout] = {}
        for r in ok:  # ties keep the first sample
            g = r.meta.get("group_id") or r.id
            if g not in best or r.total_reward > best[g].total_reward:
                best[g] = r
        chosen = {id(r) for r in best.values()}
        ok = [r for r in ok if id(r) in chosen]
    if rule.dedupe:
        seen: set[str] = set()
        unique = []
        for r in ok:
            key = _episode_key(r)
            if key not in seen:
                seen.add(key)
                unique.append(r)
        ok = unique
    n = len(rollouts)
    failed = sum(r.failed for r in rollouts)
    return ok, {"sampled": float(n), "failed": float(failed), "kept": float(len(ok)),
                "keep_rate": len(ok) / max(n, 1),
                "mean_return": sum(r.total_reward for r in rollouts if not r.failed) / max(n - failed, 1)}


def _model_calls(step: Step) -> list[tuple[list[dict] | None, str, TokenTrace | None]]:
    """(prompt messages, reply text, trace) of every model call of a step, in order: a tool agent's
    tool-calling turns (`info["internal_calls"]`, `info["internal_traces"]`), then the answer."""
    internal = list(step.info.get("internal_calls") or [])
    traces = [TokenTrace.from_dict(t) for t in step.info.get("internal_traces") or []]
    if not internal:  # an agent that kept only the traces: ids without messages
        return [(None, "", t) for t in traces] + [(step.info.get("prompt_messages"), step.action, step.trace)]
    if sum(bool(c.get("has_ids", True)) for c in internal) != len(traces):
        raise ValueError(f"step {step.index}: {len(internal)} tool-calling turns recorded with "
                         f"{len(traces)} token traces; cannot tell which ids belong to which call")
    pending = iter(traces)
    calls = [(c.get("prompt_messages"), str(c.get("text") or ""), next(pending) if c.get("has_ids", True) else None)
             for c in internal]
    return calls + [(step.info.get("prompt_messages"), step.action, step.trace)]


def rollouts_to_dataset(rollouts: Sequence[Rollout], *, tokenizer: str | None = None) -> Any:
    """One row per model call (unparseable replies are skipped: not worth imitating); a tool agent's
    tool-calling turns are rows too, since the student must learn to write them.

    `tokenizer`: the fingerprint of the tokenizer the traces' ids came from, when
    a student may train on them as they are; None stores messages only. `tools`
    names the tools the call was offered ("" for none): their schemas were in its prompt.
    """
    from datasets import Dataset, Features, Sequence as Seq, Value

    rows: dict[str, list] = {c: [] for c in COLUMNS}
    for r in rollouts:
        for s in r.steps:
            if s.info.get("parse_error"):
                continue
            tools = ",".join(s.info.get("tools_offered") or ())
            for prompt, text, trace in _model_calls(s):
                if prompt is None and trace is None:
                    continue
                if tokenizer is None or trace is None or not trace.completion_token_ids:
                    trace = None
                messages = [{"role": m["role"], "content": m.get("content") or ""} for m in prompt or []]
                rows["messages"].append(messages + [{"role": "assistant", "content": text}])
                rows["prompt_token_ids"].append(list(trace.prompt_token_ids) if trace is not None else [])
                rows["completion_token_ids"].append(list(trace.completion_token_ids) if trace is not None else [])
                rows["tokenizer"].append(tokenizer if trace is not None else "")
                rows["completion_text"].append(text)
                rows["reward"].append(float(r.total_reward))
                rows["rollout_id"].append(r.id)
                rows["group_id"].append(str(r.meta.get("group_id") or ""))
                rows["step_index"].append(int(s.index))
                rows["tools"].append(tools)
    features = Features({
        "messages": [{"role": Value("string"), "content": Value("string")}],
        "prompt_token_ids": Seq(Value("int64")), "completion_token_ids": Seq(Value("int64")),
        "tokenizer": Value("string"), "completion_text": Value("string"), "reward": Value("float64"),
        "rollout_id": Value("string"), "group_id": Value("string"), "step_index": Value("int64"),
        "tools": Value("string"),
    })  # explicit, so an empty result (nothing kept) is still a valid dataset
    return Dataset.from_dict(rows, features=features)


def save_dataset(dataset: Any, path: str | Path) -> Path:
    """Write atomically: a half-written dataset never appears at `path`."""
    import shutil

    if len(dataset) == 0:
        raise ValueError(f"refusing to write an empty dataset to {path}: rejection sampling kept nothing "
                         "(loosen the keep rule or sample more episodes)")
    out = Path(path)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    dataset.save_to_disk(str(tmp))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def _token_item(p: list[int], c: list[int], weight: float, meta: dict) -> SAWItem:
    return SAWItem(input_ids=p + c, attention_mask=[1] * (len(p) + len(c)), action_mask=[0] * len(p) + [1] * len(c),
                   weight=weight, meta=meta)


_KEPT_NOTHING = "if rejection sampling wrote it, it kept nothing"


def load_saw_items(path: str | Path, *, weight: float = 1.0) -> list[SAWItem]:
    """SFT items from the stored token ids (train on completions)."""
    return _items_from_ids(load_saved_dataset(path, if_empty=_KEPT_NOTHING), path, weight)


def _items_from_ids(ds: Any, path: str | Path, weight: float) -> list[SAWItem]:
    missing = [c for c in ("prompt_token_ids", "completion_token_ids") if c not in ds.column_names]
    if missing:
        raise ValueError(f"dataset at {path} lacks columns {missing} (has {ds.column_names})")
    items = []
    for i, row in enumerate(ds):
        p, c = list(row["prompt_token_ids"]), list(row["completion_token_ids"])
        if not c:
            raise ValueError(f"dataset at {path}, row {i}: no token ids (a teacher with another tokenizer); "
                             "train on its messages instead (load_sft_items)")
        items.append(_token_item(p, c, weight, {"row": i, "rollout_id": row.get("rollout_id")}))
    return items


def load_sft_items(path: str | Path, tokenizer: Any, *, use: str = "auto") -> tuple[list[SAWItem], str]:
    """SFT items for a student with `tokenizer`, and which data was used.

    `use`: "tokens" (the stored ids), "messages" (render the chats with the
    student's template, loss on assistant turns), or "auto": tokens when every
    row's ids came from a tokenizer with the student's fingerprint, else
    messages. `path` may also be a JSONL file or any `datasets` directory with
    a `messages` column.
    """
    if use not in ("auto", "tokens", "messages"):
        raise ValueError(f"use must be auto, tokens or messages, got {use!r}")
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"no dataset at {p}")
    if not p.is_dir():
        if use == "tokens":
            return load_saw_items(p), use  # raises: token ids live only in a saved dataset
        return chat_items(p, tokenizer), "messages"
    ds = load_saved_dataset(p, if_empty=_KEPT_NOTHING)  # read once, whichever items it becomes
    if use == "auto":
        use = "messages"
        if "tokenizer" in ds.column_names and set(ds["tokenizer"]) == {tokenizer_fingerprint(tokenizer)}:
            use = "tokens"
        elif "messages" not in ds.column_names and "prompt_token_ids" in ds.column_names:
            use = "tokens"  # an id-only dataset (older format): its ids are all there is
    if use == "tokens":
        return _items_from_ids(ds, p, 1.0), use
    if "tools" in ds.column_names and any(ds["tools"]):
        raise ValueError(f"dataset at {p} holds tool-using calls (their prompts carried tool schemas and "
                         "tool-call turns its messages column does not keep); train a student that shares the "
                         "teacher's tokenizer on the stored ids (use='tokens')")
    return chats_to_items(dataset_chats(ds, p), tokenizer, where=p), use
