"""Rollouts as JSON lines: append-only writing, strict reading."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from ludic_core.jsonl import iter_jsonl
from ludic_core.types import Rollout

__all__ = ["append_rollouts", "read_rollouts"]


def append_rollouts(path: str | Path, rollouts: Iterable[Rollout]) -> int:
    """Append rollouts, one JSON object per line; flushes so a crash loses nothing written."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with p.open("a", encoding="utf-8") as f:
        for r in rollouts:
            f.write(json.dumps(r.to_dict(), allow_nan=False) + "\n")
            n += 1
        f.flush()
    return n


def read_rollouts(path: str | Path) -> list[Rollout]:
    """Load every rollout; a line that is not JSON, not an object or not a rollout is an
    error naming the file and line (`iter_jsonl`'s, or one saying what the rollout lacks)."""
    out = []
    for lineno, row in iter_jsonl(path):
        try:
            out.append(Rollout.from_dict(row))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"{path}:{lineno}: not a valid rollout: {exc!r}") from exc
    return out
