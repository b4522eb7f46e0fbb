"""TextArena outcome table from rollouts: the numbers a game evaluation reports.

Works for any game: the result (win / draw / loss) is read from the rewards the
game gave (`GameOutcome.result`), stored on the step that ended the agent's game
(or in its `passive_info` when another player's move ended it).
"""

from __future__ import annotations

import re
from typing import Any, Iterable

__all__ = ["textarena_metrics", "episode_result"]

_RESULTS = ("win", "draw", "loss")
_PROMPT_SEAT = re.compile(r"\bYou are Player (\d+)\b")


def _final_info(rollout: Any) -> dict[str, Any]:
    if not rollout.steps:
        return {}
    last = rollout.steps[-1].info
    if "result" in last:
        return last
    passive = [i for i in last.get("passive_info") or [] if "result" in i]
    return passive[-1] if passive else {}


def episode_result(rollout: Any) -> str:
    """'win', 'draw', 'loss', or 'unfinished' (truncated, failed, or never ended)."""
    result = _final_info(rollout).get("result")
    return result if result in _RESULTS else "unfinished"


def _table(rollouts: list[Any]) -> dict[str, float]:
    games = max(len(rollouts), 1)
    steps = [s for r in rollouts for s in r.steps]
    counts = {k: 0 for k in (*_RESULTS, "unfinished")}
    for r in rollouts:
        counts[episode_result(r)] += 1
    out = {"games": float(len(rollouts))}
    out.update({f"{k}_rate": v / games for k, v in counts.items()})
    out["win_draw_rate"] = (counts["win"] + counts["draw"]) / games
    bad = sum(bool(s.info.get("invalid_move") or s.info.get("parse_error")) for s in steps)
    out["invalid_move_rate"] = bad / max(len(steps), 1)
    return out


def _seat(rollout: Any) -> int | None:
    """The player id the env recorded on a step, else the one TextArena's prompt names
    ("You are Player 1"): an episode whose every reply failed to parse has no env info."""
    for step in rollout.steps:
        if isinstance(step.info.get("seat"), int):
            return step.info["seat"]
    found = _PROMPT_SEAT.search(rollout.steps[0].prev_obs) if rollout.steps else None
    return int(found.group(1)) if found else None


def textarena_metrics(rollouts: Iterable[Any]) -> dict[str, float]:
    """Outcome rates overall and per seat (`P0/win_draw_rate`, ...), and the per-turn
    rate of moves the game rejected (or that did not parse)."""
    rollouts = list(rollouts)
    out = _table(rollouts)
    for seat in sorted({s for s in map(_seat, rollouts) if s is not None}):
        mine = [r for r in rollouts if _seat(r) == seat]
        out.update({f"P{seat}/{k}": v for k, v in _table(mine).items()})
    return out
