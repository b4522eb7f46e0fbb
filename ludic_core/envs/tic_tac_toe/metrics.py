"""Tic-tac-toe metrics from rollouts: the numbers the demo and issues report."""

from __future__ import annotations

from typing import Iterable

from ludic_core.types import Rollout

__all__ = ["tic_tac_toe_metrics"]


def tic_tac_toe_metrics(rollouts: Iterable[Rollout]) -> dict[str, float]:
    """Per-game outcome rates and the per-turn legal-move rate.

    A turn is legal when it parsed and the env accepted the move. A game that
    ran out of steps (e.g. endless format failures) counts as neither win nor draw,
    as does one the env cut short (`agent_moves`; its rate is `cut_rate`).
    """
    games = turns = legal = 0
    results = {"win": 0, "draw": 0, "loss": 0, "illegal": 0, "cut": 0, "unfinished": 0}
    for r in rollouts:
        games += 1
        for s in r.steps:
            turns += 1
            legal += not s.info.get("parse_error") and not s.info.get("illegal_move")
        last = r.steps[-1].info.get("result") if r.steps else None
        if last is None and r.steps:  # a passive ending (e.g. opponent won) sits in passive_info
            passive = r.steps[-1].info.get("passive_info") or [{}]
            last = passive[-1].get("result")
        results[last if last in results else "unfinished"] += 1
    n = max(games, 1)
    out = {"games": float(games), "legal_move_rate": legal / max(turns, 1)}
    out.update({f"{k}_rate": v / n for k, v in results.items()})
    out["win_draw_rate"] = (results["win"] + results["draw"]) / n
    return out
