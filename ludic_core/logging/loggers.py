"""Metric loggers: console (progress bar), JSONL, wandb (offline by default).

A logger is anything with `log(step, metrics)` and `close()`. The trainer calls
them on rank 0 only. Metrics are flat dicts of floats.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any, Literal, Mapping, Protocol, runtime_checkable

__all__ = ["Logger", "ConsoleLogger", "JsonlLogger", "WandbLogger"]


@runtime_checkable
class Logger(Protocol):
    def log(self, step: int, metrics: Mapping[str, float]) -> None: ...

    def close(self) -> None: ...


class ConsoleLogger:
    """A rich progress bar with the headline metrics."""

    def __init__(self, total_steps: int | None = None, keys: tuple[str, ...] = ("loss", "reward_mean", "lr"),
                 description: str = "train") -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.keys = keys
        self._progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TextColumn("{task.fields[metrics]}"),
        )
        self._task = self._progress.add_task(description, total=total_steps, metrics="")
        self._progress.start()

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        shown = " ".join(f"{k}={metrics[k]:.4g}" for k in self.keys if k in metrics)
        self._progress.update(self._task, completed=step, metrics=shown)

    def close(self) -> None:
        self._progress.stop()


class JsonlLogger:
    """One JSON object per step, appended and flushed (survives crashes)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = self.path.open("a", encoding="utf-8")

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        clean = {k: (v if isinstance(v, (int, float)) and math.isfinite(v) else str(v)) for k, v in metrics.items()}
        self._f.write(json.dumps({"step": step, "time": time.time(), **clean}) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


class WandbLogger:
    """Weights & Biases; `mode="offline"` writes locally (tests, no network)."""

    def __init__(self, project: str, *, mode: Literal["online", "offline", "disabled"] = "offline", run_name: str | None = None,
                 config: Mapping[str, Any] | None = None, api_key: str | None = None,
                 directory: str | Path | None = None) -> None:
        try:
            import wandb
        except ImportError as exc:  # optional dependency
            raise ImportError("WandbLogger needs `pip install wandb`") from exc
        if api_key:
            os.environ.setdefault("WANDB_API_KEY", api_key)
        if directory:
            Path(directory).mkdir(parents=True, exist_ok=True)
        self._run = wandb.init(project=project, mode=mode, name=run_name, config=dict(config or {}),
                               dir=str(directory) if directory else None)

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        self._run.log(dict(metrics), step=step)

    def close(self) -> None:
        self._run.finish()
