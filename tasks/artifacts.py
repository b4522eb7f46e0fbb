"""Artifacts a person looks at in the Prefect UI: tables, lineage, curves."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping, Sequence

from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

_BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float]) -> str:
    if not values:
        return ""
    lo, hi = min(values), max(values)
    span = (hi - lo) or 1.0
    return "".join(_BARS[int((v - lo) / span * (len(_BARS) - 1))] for v in values)


@task(name="artifact-table", cache_policy=NO_CACHE)
def table_artifact(key: str, rows: list[dict], description: str) -> None:
    create_table_artifact(key=key, table=rows, description=description)


@task(name="artifact-lineage", cache_policy=NO_CACHE)
def lineage_artifact(key: str, stages: Mapping[str, str]) -> None:
    """Which stage produced which path: the chain's data lineage."""
    lines = ["| stage | output |", "|---|---|"] + [f"| {k} | `{v}` |" for k, v in stages.items()]
    create_markdown_artifact(key=key, markdown="\n".join(lines), description="stage outputs (lineage)")


@task(name="artifact-learning-curve", cache_policy=NO_CACHE)
def learning_curve_artifact(key: str, metrics_path: str, fields: Sequence[str] = ("loss", "reward_mean")) -> None:
    """A markdown chart of per-step metrics from the trainer's JSONL log."""
    path = Path(metrics_path)
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    parts = [f"### {key}", f"{len(rows)} steps from `{metrics_path}`", ""]
    for field in fields:
        vals = [float(r[field]) for r in rows if isinstance(r.get(field), (int, float))]
        if vals:
            parts.append(f"**{field}** {vals[0]:.4g} → {vals[-1]:.4g}  `{sparkline(vals)}`")
    parts += ["", "| step | " + " | ".join(fields) + " |", "|---|" + "---|" * len(fields)]
    stride = max(1, len(rows) // 20)
    for r in rows[::stride]:
        cells = " | ".join(f"{r[f]:.4g}" if isinstance(r.get(f), (int, float)) else "" for f in fields)
        parts.append(f"| {r.get('step')} | {cells} |")
    create_markdown_artifact(key=key, markdown="\n".join(parts), description="learning curve")
