"""Saved datasets in: one reader for a `datasets.save_to_disk` directory.

Prompt rows, chat SFT data and rejection-sampled datasets all travel as such
directories; reading them in one place gives one set of errors that name the
path (not a dataset, a DatasetDict with no split chosen, no rows) instead of a
traceback from deep inside `datasets`. `datasets` is imported only when a
directory is read, so JSONL-only workers stay light.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["load_saved_dataset"]


def load_saved_dataset(path: str | os.PathLike[str], *, split: str | None = None, if_empty: str = "") -> Any:
    """The `datasets.Dataset` saved at `path`, or split `split` of a saved `DatasetDict`.

    Raises FileNotFoundError when `path` is no directory, and ValueError naming
    `path` for a directory that is no saved dataset, a DatasetDict without a
    known `split` (its splits listed), or a dataset with no rows (`if_empty`:
    what that means to the caller, added to the message).
    """
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"no datasets.save_to_disk directory at {path}")
    try:
        import datasets
    except ImportError as e:
        raise ImportError(f"reading {path} (a directory) needs the `datasets` package") from e
    no_rows = f"{path}: the dataset has no rows" + (f" ({if_empty})" if if_empty else "")
    try:
        data = datasets.load_from_disk(str(path))
    except FileNotFoundError as e:
        raise ValueError(f"{path} is a directory but not a datasets.save_to_disk dataset ({e})") from e
    except IndexError as e:  # `datasets` saves no rows as no data files, then fails to read them back
        raise ValueError(no_rows) from e
    if isinstance(data, datasets.DatasetDict):
        names = sorted(data)
        if split is None:
            raise ValueError(f"{path} holds splits {names}; pass one split's directory (it is a DatasetDict "
                             f"with splits {names}, not one dataset), e.g. {path / (names or ['<split>'])[0]}")
        if split not in data:
            raise ValueError(f"{path} has no split {split!r}; its splits are {names}")
        data = data[split]
    elif split is not None:
        raise ValueError(f"{path} holds a single dataset, not a DatasetDict with a split {split!r}")
    if len(data) == 0:
        raise ValueError(no_rows)
    return data
