"""Rejection sampling output as a `datasets.Dataset` of token-level examples.

Kept episodes become one row per model call, carrying the exact prompt and
completion token ids (plus text for people), so SFT trains on what the
sampler produced with no re-tokenisation. Saved with `save_to_disk`, the
dataset is a path a pipeline can hand from stage to stage.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from ludic_core.batching.saw import SAWItem
from ludic_core.types import Rollout

__all__ = ["rollouts_to_dataset", "save_dataset", "load_saw_items"]

COLUMNS = ("prompt_token_ids", "completion_token_ids", "completion_text", "reward", "rollout_id", "step_index")


def rollouts_to_dataset(rollouts: Sequence[Rollout]) -> Any:
    """One row per traced step of every rollout (steps without a trace are skipped)."""
    from datasets import Dataset, Features, Sequence as Seq, Value

    rows: dict[str, list] = {c: [] for c in COLUMNS}
    for r in rollouts:
        for s in r.steps:
            if s.trace is None or not s.trace.completion_token_ids:
                continue
            rows["prompt_token_ids"].append(list(s.trace.prompt_token_ids))
            rows["completion_token_ids"].append(list(s.trace.completion_token_ids))
            rows["completion_text"].append(s.action)
            rows["reward"].append(float(r.total_reward))
            rows["rollout_id"].append(r.id)
            rows["step_index"].append(int(s.index))
    features = Features({
        "prompt_token_ids": Seq(Value("int64")), "completion_token_ids": Seq(Value("int64")),
        "completion_text": Value("string"), "reward": Value("float64"),
        "rollout_id": Value("string"), "step_index": Value("int64"),
    })  # explicit, so an empty result (nothing kept) is still a valid dataset
    return Dataset.from_dict(rows, features=features)


def save_dataset(dataset: Any, path: str | Path) -> Path:
    """Write atomically: a half-written dataset never appears at `path`."""
    import shutil

    if len(dataset) == 0:
        raise ValueError(f"refusing to write an empty dataset to {path}: rejection sampling kept nothing "
                         "(lower min_reward or sample more episodes)")
    out = Path(path)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    dataset.save_to_disk(str(tmp))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def load_saw_items(path: str | Path, *, weight: float = 1.0) -> list[SAWItem]:
    """SFT items (train on completions) from a dataset written by `save_dataset`."""
    from datasets import load_from_disk

    ds = load_from_disk(str(path))
    missing = [c for c in ("prompt_token_ids", "completion_token_ids") if c not in ds.column_names]
    if missing:
        raise ValueError(f"dataset at {path} lacks columns {missing} (has {ds.column_names})")
    if len(ds) == 0:
        raise ValueError(f"dataset at {path} is empty: rejection sampling kept nothing")
    items = []
    for i, row in enumerate(ds):
        p, c = list(row["prompt_token_ids"]), list(row["completion_token_ids"])
        items.append(SAWItem(
            input_ids=p + c, attention_mask=[1] * (len(p) + len(c)),
            action_mask=[0] * len(p) + [1] * len(c), weight=weight,
            meta={"row": i, "rollout_id": row.get("rollout_id")},
        ))
    return items
