"""`TurnNormalizedReturn`: GRPO's group baseline, taken per turn index.

Episode-level GRPO gives every turn of a multi-turn episode the same advantage:
a game lost on move 4 blames move 1 as much as move 4. Comparing each step's
reward-to-go with what the group's siblings got from the *same turn index* on
credits turns that kept the game going, and needs no value network and no
shaped reward (so nothing the policy could game: the signal is still the env's
own reward). It is right when turns are comparable across siblings (board
games, fixed-length dialogues); when a turn index means different things in
different episodes, prefer episode credit or `gamma < 1` on top of it.

A small gamma has its own trap when episodes end at different turns: at turn t a
sibling whose episode ends there carries its outcome (a win: 1), one that goes on
only its step reward (0), so sound moves of the longer games are pushed down
(gamma 0 on tic-tac-toe lowered the sampled reward it trained on:
docs/experiments/2026-11-29-student-past-teacher.md). A reward whose best value is
the same at every step removes it: the demo's per-move regret with the outcome
weighted 0 (docs/experiments/2026-11-30-rl-per-move.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ludic_core.credit.base import check_gamma, check_group_params, check_rewards
from ludic_core.credit.groups import group_indices, standardised
from ludic_core.credit.monte_carlo import discounted_returns
from ludic_core.types import Rollout

__all__ = ["TurnNormalizedReturn"]


@dataclass
class TurnNormalizedReturn:
    """A_{i,t} = (G_{i,t} - mean_j G_{j,t}) / (std_j G_{j,t} + eps) over the
    siblings j of rollout i (same group) that reached turn t, G the discounted
    reward-to-go. A turn only one sibling reached has no baseline: weight 0.

    With one-turn episodes this is exactly `GroupNormalizedReturn`.
    """

    gamma: float = 1.0
    normalize_std: bool = True
    eps: float = 1e-6
    expected_group_size: int | None = None

    def __post_init__(self) -> None:
        check_gamma(self.gamma)
        check_group_params(self.eps, self.expected_group_size)

    def compute(self, rollouts: Sequence[Rollout]) -> list[list[float]]:
        check_rewards(rollouts)
        groups = group_indices(rollouts, expected_group_size=self.expected_group_size)
        togo = [discounted_returns([s.reward for s in r.steps], self.gamma) for r in rollouts]
        out = [[0.0] * r.length for r in rollouts]
        for idx in groups.values():
            for t in range(max(rollouts[i].length for i in idx)):
                at = [i for i in idx if rollouts[i].length > t]
                if len(at) < 2:
                    continue
                values = [togo[i][t] for i in at]
                for i, a in zip(at, standardised(values, self.eps, divide_by_std=self.normalize_std)):
                    out[i][t] = a
        return out
