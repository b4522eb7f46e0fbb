"""JSON Lines in: one decoded object per line, errors that name file and line.

Chat datasets, prompt datasets and rollout logs are all JSONL; a bad line in
a 100k-line file is only fixable if the error says which one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

__all__ = ["iter_jsonl"]


def iter_jsonl(path: str | Path, *, objects: bool = True) -> Iterator[tuple[int, Any]]:
    """(line number, value) for every non-blank line; with `objects`, each must be a JSON object."""
    with Path(path).open(encoding="utf-8-sig") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({e.msg})") from e
            if objects and not isinstance(value, dict):
                raise ValueError(f"{path}:{lineno}: a row is a {type(value).__name__}, expected an object")
            yield lineno, value
