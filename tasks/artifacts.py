"""Artifacts a person looks at in the Prefect UI: tables, lineage, curves."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Mapping, Sequence

from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

from ludic_core.logging.curves import curves_png

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


@task(name="artifact-published-adapters", cache_policy=NO_CACHE)
def adapters_artifact(adapter_dir: str) -> None:
    """Each adapter a LoRA run published into vLLM: version, files, size, whether they are still on disk."""
    from ludic_core.vllm.adapters import read_published

    rows = [{"version": r["version"], "name": r["name"], "path": r["path"], "mb": round(r["bytes"] / 1e6, 3),
             "load_s": round(r["seconds"], 3), "on_disk": Path(r["path"]).is_dir()}
            for r in read_published(adapter_dir)]
    if rows:
        note = f"LoRA adapters published into vLLM from {adapter_dir} (the newest stay loaded)"
        create_table_artifact(key="published-adapters", table=rows, description=note)


@task(name="artifact-lineage", cache_policy=NO_CACHE)
def lineage_artifact(key: str, stages: Mapping[str, str]) -> None:
    """Which stage produced which path: the chain's data lineage."""
    lines = ["| stage | output |", "|---|---|"] + [f"| {k} | `{v}` |" for k, v in stages.items()]
    create_markdown_artifact(key=key, markdown="\n".join(lines), description="stage outputs (lineage)")


def learning_curve_markdown(key: str, metrics_path: str, fields: Sequence[str]) -> str:
    """Markdown of per-step metrics from the trainer's JSONL log: a PNG plot
    (also written as `metrics.png` beside the log, embedded as a data URI so the
    artifact needs no file server), sparklines, and a table of every ~20th step."""
    path = Path(metrics_path)
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    parts = [f"### {key}", f"{len(rows)} steps from `{metrics_path}`", ""]
    panels = {f: {f: [[(float(r["step"]), float(r[f])) for r in rows
                       if isinstance(r.get(f), (int, float)) and isinstance(r.get("step"), (int, float))]]}
              for f in fields}
    panels = {f: lines for f, lines in panels.items() if lines[f][0]}
    if panels:
        png = curves_png(panels, path.with_suffix(".png"))
        parts += [f"![{key}](data:image/png;base64,{base64.b64encode(png.read_bytes()).decode()})", ""]
    for field in fields:
        vals = [float(r[field]) for r in rows if isinstance(r.get(field), (int, float))]
        if vals:
            parts.append(f"**{field}** {vals[0]:.4g} → {vals[-1]:.4g}  `{sparkline(vals)}`")
    parts += ["", "| step | " + " | ".join(fields) + " |", "|---|" + "---|" * len(fields)]
    stride = max(1, len(rows) // 20)
    for r in rows[::stride]:
        cells = " | ".join(f"{r[f]:.4g}" if isinstance(r.get(f), (int, float)) else "" for f in fields)
        parts.append(f"| {r.get('step')} | {cells} |")
    return "\n".join(parts)


@task(name="artifact-learning-curve", cache_policy=NO_CACHE)
def learning_curve_artifact(key: str, metrics_path: str, fields: Sequence[str] = ("loss", "reward_mean")) -> None:
    """The learning curve of a training run, as a markdown artifact with a plot."""
    create_markdown_artifact(key=key, markdown=learning_curve_markdown(key, metrics_path, fields),
                             description="learning curve")
