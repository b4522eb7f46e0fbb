"""Env-agnostic evaluation reducers: rollouts in, a flat `{name: float}` out.

`episode_metrics` reads only what every rollout has (rewards, steps, traces,
lineage in `meta`), so an evaluate flow can report any env. An env adds its own
numbers by exposing `episode_metrics` on its factory; `env_metrics` calls it.
"""

from __future__ import annotations

import numbers
from collections import defaultdict
from typing import Any, Callable, Hashable, Iterable, Sequence

from ludic_core.types import Rollout

__all__ = ["pass_at_k", "episode_metrics", "env_metrics", "group_key"]


def _check_count(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"pass_at_k: {name} must be an int, got {value!r}")
    if value < 0:
        raise ValueError(f"pass_at_k: {name} must be >= 0, got {value}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of Chen et al. 2021: 1 - C(n-c, k) / C(n, k).

    The chance that k samples drawn without replacement from n (c correct)
    contain a correct one. Written as 1 - prod_{i=n-c+1}^{n} (1 - k/i), which
    never forms the huge binomials (exact ints overflow floats past n ~ 1000).
    """
    for name, value in (("n", n), ("c", c), ("k", k)):
        _check_count(name, value)
    if k < 1:
        raise ValueError(f"pass_at_k: k must be >= 1, got {k}")
    if k > n:
        raise ValueError(f"pass_at_k: k={k} exceeds the number of samples n={n}")
    if c > n:
        raise ValueError(f"pass_at_k: c={c} correct exceeds the number of samples n={n}")
    if n - c < k:  # every k-subset holds a correct sample
        return 1.0
    miss = 1.0
    for i in range(n - c + 1, n + 1):
        miss *= 1.0 - k / i
    return 1.0 - miss


def group_key(r: Rollout) -> tuple[str, Hashable]:
    """Samples of one prompt share a group: GRPO's group_id, else the request."""
    for field in ("group_id", "request_index"):
        if r.meta.get(field) is not None:
            return field, r.meta[field]
    return "id", r.id


def _mean(total: float, count: int) -> float:
    # 0.0 over nothing (e.g. every episode failed): failed_rate already says so
    return total / count if count else 0.0


def _completion_tokens(r: Rollout) -> int:
    """Every sampled token of the episode: final answers and the tool-calling turns before them."""
    final = sum(len(s.trace.completion_token_ids) for s in r.steps if s.trace is not None)
    return final + sum(len(t.get("completion_token_ids") or ()) for s in r.steps
                       for t in s.info.get("internal_traces") or ())


def _tool_calls(r: Rollout) -> list[dict]:
    return [c for s in r.steps for c in s.info.get("tool_calls") or () if isinstance(c, dict)]


def _pass_metrics(
    rollouts: Sequence[Rollout], k: int, success_threshold: float
) -> dict[str, float]:
    groups: dict[tuple[str, Hashable], list[bool]] = defaultdict(list)
    for r in rollouts:
        groups[group_key(r)].append(not r.failed and r.total_reward >= success_threshold)
    smallest_key, smallest = min(groups.items(), key=lambda kv: len(kv[1]))
    if k > len(smallest):
        raise ValueError(
            f"pass@{k} needs k={k} samples per group, but group "
            f"{smallest_key[0]}={smallest_key[1]!r} has only {len(smallest)}"
        )
    out = {}
    for kk in sorted({1, k}):
        scores = [pass_at_k(len(g), sum(g), kk) for g in groups.values()]
        out[f"pass@{kk}"] = sum(scores) / len(scores)
    return out


def episode_metrics(
    rollouts: Iterable[Rollout], *, k: int = 1, success_threshold: float = 1.0
) -> dict[str, float]:
    """Counts over all rollouts; means over the episodes that ran; pass@k per group.

    A failed episode (env or protocol raised) says nothing about the policy's
    return or format, so it is left out of the means; but it is a sample that did
    not succeed, so it stays in pass@k. Returns `episodes`, `failed`,
    `failed_rate`, `mean_return`, `success_rate`, `parse_error_rate` (per step),
    `mean_turns`, `mean_completion_tokens` (tool-calling turns included), `tool_calls_per_episode`,
    `tool_errors_per_episode` (calls that could not run or failed: malformed JSON, an unknown tool,
    bad arguments, a tool that raised), `pass@1` and `pass@{k}`.
    """
    rollouts = list(rollouts)
    if not rollouts:
        raise ValueError("episode_metrics: rollouts is empty")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"episode_metrics: k must be an int >= 1, got {k!r}")
    ran = [r for r in rollouts if not r.failed]
    steps = [s for r in ran for s in r.steps]
    out = {
        "episodes": float(len(rollouts)),
        "failed": float(len(rollouts) - len(ran)),
        "failed_rate": (len(rollouts) - len(ran)) / len(rollouts),
        "mean_return": _mean(sum(r.total_reward for r in ran), len(ran)),
        "success_rate": _mean(sum(r.total_reward >= success_threshold for r in ran), len(ran)),
        "parse_error_rate": _mean(sum(bool(s.info.get("parse_error")) for s in steps), len(steps)),
        "mean_turns": _mean(len(steps), len(ran)),
        "mean_completion_tokens": _mean(sum(_completion_tokens(r) for r in ran), len(ran)),
        "tool_calls_per_episode": _mean(sum(len(_tool_calls(r)) for r in ran), len(ran)),
        "tool_errors_per_episode": _mean(sum(not c.get("ok") for r in ran for c in _tool_calls(r)), len(ran)),
    }
    return out | _pass_metrics(rollouts, k, success_threshold)


def _factory_name(factory: Callable[..., Any]) -> str:
    name = getattr(factory, "__qualname__", None) or repr(factory)
    module = getattr(factory, "__module__", None)
    return f"{module}.{name}" if module else name


def env_metrics(factory: Callable[..., Any], rollouts: Iterable[Rollout]) -> dict[str, float]:
    """The env's own reducers, if its factory offers `episode_metrics(rollouts)`.

    Looked up on the factory (class or function), not on an instance, so no env
    is built just to reduce. It sees only the episodes that ran. Numbers must be
    real (ints are turned into floats) so every logger can take them.
    """
    reducer = getattr(factory, "episode_metrics", None)
    if not callable(reducer):
        return {}
    name = _factory_name(factory)
    result = reducer([r for r in rollouts if not r.failed])
    if not isinstance(result, dict):
        raise TypeError(f"{name}.episode_metrics must return a dict, got {type(result).__name__}")
    bad = {
        key: value
        for key, value in result.items()
        if not isinstance(key, str)
        or isinstance(value, bool)
        or not isinstance(value, numbers.Real)
    }
    if bad:
        raise TypeError(f"{name}.episode_metrics must map str to float; bad entries: {bad!r}")
    return {key: float(value) for key, value in result.items()}
