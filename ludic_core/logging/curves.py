"""Learning curves as a PNG a person can look at (Prefect artifacts, benchmarks).

Matplotlib's Agg backend draws without a display, so this works on a headless
worker. Several runs of one label (seeds) are drawn as their mean with a
min-max band: one line per algorithm stays readable where 3 x 7 would not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

__all__ = ["Series", "curves_png", "mean_band"]

Series = Sequence[tuple[float, float]]  # (x, y) points of one run


def mean_band(runs: Sequence[Series], points: int = 60) -> tuple[list[float], list[float], list[float], list[float]]:
    """(x, mean, min, max) of the runs on a shared grid over the x range every
    run covers (runs of a wall-clock budget end at different steps)."""
    import numpy as np

    runs = [sorted(r) for r in runs if len(r) > 0]
    if not runs:
        return [], [], [], []
    if len(runs) == 1:
        xs, only = zip(*runs[0])
        return list(xs), list(only), list(only), list(only)
    lo = max(r[0][0] for r in runs)
    hi = min(r[-1][0] for r in runs)
    grid = np.linspace(lo, hi, points) if hi > lo else np.array([lo])
    ys = np.stack([np.interp(grid, [p[0] for p in r], [p[1] for p in r]) for r in runs])
    return grid.tolist(), ys.mean(0).tolist(), ys.min(0).tolist(), ys.max(0).tolist()


def curves_png(panels: Mapping[str, Mapping[str, Sequence[Series]]], path: str | Path, *,
               xlabel: str = "step", ylabel: str = "") -> Path:
    """Draw one subplot per panel, one line (mean of its runs, min-max band)
    per label; write a PNG to `path` and return it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not panels:
        raise ValueError("curves_png needs at least one panel")
    n = len(panels)
    fig, axes = plt.subplots(1, n, figsize=(5.5 * n, 4), squeeze=False)
    for ax, (title, lines) in zip(axes[0], panels.items()):
        for label, runs in lines.items():
            xs, mean, lo, hi = mean_band(runs)
            if not xs:
                continue
            (line,) = ax.plot(xs, mean, label=label, linewidth=1.6)
            if len(runs) > 1:
                ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.15)
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        if lines:
            ax.legend(fontsize=8)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out
