"""`dataset_qa_env`: a `DatasetQAEnv` over rows read from a file on disk.

This is how "rows of a prompt dataset" reach any flow: a config names env
`dataset_qa` with `path=...`, the rollout engine builds one env per episode
with a different seed, and `DatasetQAEnv` picks row `seed % len(rows)`, so
consecutive env seeds walk the rows (and wrap around).

Because an env is built per episode, the rows are loaded once per
(resolved path, modification time) and shared: editing the file (or
re-saving the directory) is picked up by the next env, and an unchanged file
is never parsed twice. A `save_to_disk` directory is read by
`ludic_core.saved_dataset`, which imports `datasets` only then.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any, Callable, Literal

from ludic_core.envs.dataset_qa import (
    DatasetQAEnv,
    exact_match_verifier,
    gsm8k_target_parser,
    numeric_verifier,
)
from ludic_core.jsonl import iter_jsonl
from ludic_core.saved_dataset import load_saved_dataset

__all__ = ["dataset_qa_env", "load_rows"]

_VERIFIERS: dict[str, Callable[[str, str], bool]] = {
    "exact": exact_match_verifier,
    "numeric": numeric_verifier,
}


def _plain_target(answer: str) -> str:
    return answer


_TARGETS: dict[str, Callable[[str], str]] = {
    "plain": _plain_target,
    "gsm8k": gsm8k_target_parser,
}

# resolved path -> (mtime_ns, rows). One entry per path: a changed file
# replaces its old rows instead of piling up versions.
_CACHE: dict[Path, tuple[int, Any]] = {}


class _JsonlRows(tuple):
    """Rows of a JSONL file plus the keys every row has, computed once at load:
    `DatasetQAEnv` reads `column_names` (as on a `datasets.Dataset`) instead of
    scanning every row each time an env is built."""

    column_names: list[str]


def _mtime_ns(path: Path) -> int:
    """A file's mtime; for a directory the newest of it and its files, because
    re-saving a dataset in place rewrites files without touching the folder."""
    if not path.is_dir():
        return path.stat().st_mtime_ns
    return max(p.stat().st_mtime_ns for p in (path, *path.rglob("*")))


def _read_jsonl(path: Path) -> _JsonlRows:
    rows = [row for _, row in iter_jsonl(path)]
    out = _JsonlRows(rows)
    shared = set.intersection(*(set(r) for r in rows)) if rows else set()
    out.column_names = sorted(shared)
    return out


def load_rows(path: str | os.PathLike[str]) -> Any:
    """The rows at `path` (a JSONL file or a `save_to_disk` directory), loaded
    once per (resolved path, mtime) and then shared; treat them as read-only."""
    resolved = Path(path).expanduser().resolve()
    if not resolved.exists():
        raise FileNotFoundError(
            errno.ENOENT, "no JSONL file or save_to_disk directory at", str(path)
        )
    if not (resolved.is_file() or resolved.is_dir()):  # a FIFO blocks, /dev/zero never ends
        raise ValueError(f"{path}: not a regular file or a directory")
    mtime = _mtime_ns(resolved)
    cached = _CACHE.get(resolved)
    if cached is not None and cached[0] == mtime:
        return cached[1]
    if resolved.is_dir():
        rows = load_saved_dataset(resolved)
    else:
        rows = _read_jsonl(resolved)
        if not rows:
            raise ValueError(f"{path}: the dataset has no rows")
    _CACHE[resolved] = (mtime, rows)
    return rows


def _choice(field: str, value: str, table: dict[str, Any]) -> Any:
    if value not in table:
        raise ValueError(f"dataset_qa_env: unknown {field} {value!r}; expected one of {sorted(table)}")
    return table[value]


def dataset_qa_env(
    path: str | os.PathLike[str],
    question_key: str = "question",
    answer_key: str = "answer",
    verifier: Literal["exact", "numeric"] = "exact",
    target: Literal["plain", "gsm8k"] = "plain",
    system_prompt: str | None = None,
) -> DatasetQAEnv:
    """A `DatasetQAEnv` over the rows at `path` (registered env `dataset_qa`).

    `verifier`: "exact" (stripped string equality) or "numeric" ("1,000" ==
    "1000.0"). `target`: "plain" (the answer column as is) or "gsm8k" (the
    number after the last "####"). `reset(seed)` poses row `seed % len(rows)`.
    """
    check = _choice("verifier", verifier, _VERIFIERS)
    parse_target = _choice("target", target, _TARGETS)
    rows = load_rows(path)
    try:
        return DatasetQAEnv(
            rows,
            question_key=question_key,
            answer_key=answer_key,
            target_parser=parse_target,
            verifier=check,
            system_prompt=system_prompt,
        )
    except ValueError as e:  # e.g. a missing column: say which file
        raise ValueError(f"{path}: {e}") from e
