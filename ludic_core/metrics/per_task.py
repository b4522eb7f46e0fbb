"""Per-task accuracy and pass@k, for envs that draw each episode from one of several tasks.

A mix's overall accuracy hides which task moved; these are the numbers per
task. The task is read from the env's reset info (`Rollout.meta["reset_info"]`),
so an episode whose reply did not even parse (the env never scored it) still
counts against its task. The score is the env's own (`info["score"]`), not the
return, so a format term from the parser does not change accuracy.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable

from ludic_core.metrics.reducers import group_key, pass_at_k
from ludic_core.types import Rollout

__all__ = ["per_task_metrics", "episode_task", "episode_score"]


def episode_task(r: Rollout, key: str = "task") -> str:
    """The task an episode played: its reset info, else any step's info, else "unknown"."""
    task = (r.meta.get("reset_info") or {}).get(key)
    for s in r.steps:
        task = task or s.info.get(key)
    return str(task) if task is not None else "unknown"


def episode_score(r: Rollout, key: str = "score") -> float:
    """The env's score of the episode's last scored step (0 when nothing was scored)."""
    scores = [s.info[key] for s in r.steps if isinstance(s.info.get(key), (int, float))]
    return float(scores[-1]) if scores else 0.0


def _pass(rollouts: list[Rollout], threshold: float) -> dict[str, float]:
    groups: dict[Any, list[bool]] = defaultdict(list)
    for r in rollouts:
        groups[group_key(r)].append(episode_score(r) >= threshold)
    k = min(len(g) for g in groups.values())  # every prompt has at least k samples
    out = {}
    for kk in sorted({1, k}):
        out[f"pass@{kk}"] = sum(pass_at_k(len(g), sum(g), kk) for g in groups.values()) / len(groups)
    return out


def per_task_metrics(rollouts: Iterable[Rollout], *, threshold: float = 1.0) -> dict[str, float]:
    """`accuracy` and `mean_score` overall, and `TASK/episodes`, `TASK/accuracy`,
    `TASK/mean_score`, `TASK/pass@1` and `TASK/pass@k` (k = the fewest samples
    of a prompt of that task, when more than one) for every task seen."""
    by_task: dict[str, list[Rollout]] = defaultdict(list)
    for r in rollouts:
        by_task[episode_task(r)].append(r)
    everything = [r for rs in by_task.values() for r in rs]
    if not everything:
        return {}
    out = {"accuracy": sum(episode_score(r) >= threshold for r in everything) / len(everything),
           "mean_score": sum(episode_score(r) for r in everything) / len(everything)}
    for task in sorted(by_task):
        rs = by_task[task]
        out[f"{task}/episodes"] = float(len(rs))
        out[f"{task}/accuracy"] = sum(episode_score(r) >= threshold for r in rs) / len(rs)
        out[f"{task}/mean_score"] = sum(episode_score(r) for r in rs) / len(rs)
        out.update({f"{task}/{k}": v for k, v in _pass(rs, threshold).items()})
    return out
