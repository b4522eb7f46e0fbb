"""Branching: each step also plays groups restarted at states the policy reached.

A GRPO group shares its start state, so only its first actions are compared on
one state; per-turn credit then compares later actions across the siblings'
different states. `BranchingBatchSource` draws as `RolloutBatchSource` does,
then picks distinct states the agent faced in the drawn episodes and restarts
the env at each (`branch_kwargs(obs)` on the env's class names how), one group
per state: those groups compare actions on one state the policy itself met.
A branch's prompt holds only the state it restarts at, so it is the prompt
the policy saw there when its context is that state alone (a sliding window
of one observation, as tic-tac-toe's recipe has).
What it bought on the demo: docs/experiments/2026-11-30-branching.md.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import random
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

from ludic_core.batching.saw import SAWBatch
from ludic_core.batching.sources import RolloutBatchSource, group_signal, rollout_stats
from ludic_core.rollout.requests import EnvConfig
from ludic_core.types import Rollout

__all__ = ["Branchable", "BranchingBatchSource", "branch_kwargs_of", "branch_states", "check_branching"]


@runtime_checkable
class Branchable(Protocol):
    """An env (class or factory) that can restart at a state it showed."""

    @staticmethod
    def branch_kwargs(obs: str) -> dict[str, Any] | None:
        """Env kwargs, added to the env's own, that start an episode at the state `obs`
        shows (None: no state to branch from there, e.g. a finished game)."""
        ...


def branch_kwargs_of(env_name: str, factory: Any) -> Callable[[str], dict[str, Any] | None]:
    """`factory.branch_kwargs`, or a ValueError naming the env that cannot branch.
    On a class it must be a staticmethod or classmethod: no env is built to ask it."""
    if not isinstance(factory, Branchable) or not callable(factory.branch_kwargs):
        raise ValueError(f"env {env_name!r} cannot branch: its class offers no branch_kwargs(obs) -> dict | None "
                         "(the kwargs that restart it at the state an observation shows); drop `branch` or add it")
    if inspect.isclass(factory) and not isinstance(inspect.getattr_static(factory, "branch_kwargs"),
                                                   (staticmethod, classmethod)):
        raise ValueError(f"env {env_name!r}: branch_kwargs must be a staticmethod (or classmethod) taking the "
                         "observation; it is called on the class, without an env")
    return factory.branch_kwargs


def _require_groups(group_size: int | None) -> None:
    if not (group_size or 0) > 1:
        raise ValueError(f"branching compares actions within groups, but the algorithm draws no groups (group_size "
                         f"{group_size} draws none of two or more samples): drop `branch` or use a group algorithm")


def check_branching(env_name: str, factory: Any, group_size: int) -> None:
    """What `BranchingBatchSource` would refuse, for a flow's preflight: an env that
    cannot branch, an algorithm without groups."""
    branch_kwargs_of(env_name, factory)
    _require_groups(group_size)


def branch_states(rollouts: Sequence[Rollout], kwargs_of: Callable[[str], dict[str, Any] | None], n: int,
                  rng: random.Random) -> list[tuple[dict[str, Any], Rollout]]:
    """Up to `n` distinct states the agent faced in `rollouts` (their branch
    kwargs, with the episode each was first seen in), drawn at random."""
    seen: dict[str, tuple[dict[str, Any], Rollout]] = {}
    for r in rollouts:
        for step in r.steps:
            kw = kwargs_of(step.prev_obs)
            if kw is None:
                continue
            if not isinstance(kw, dict):
                raise TypeError(f"branch_kwargs must return a dict or None, got {type(kw).__name__}")
            try:
                key = json.dumps(kw, sort_keys=True)
            except (TypeError, ValueError) as exc:
                raise TypeError(f"branch_kwargs must return JSON values (they become an env config), got {kw!r}: "
                                f"{exc}") from exc
            seen.setdefault(key, (kw, r))
    states = list(seen.values())
    rng.shuffle(states)
    return states[:n]


class BranchingBatchSource(RolloutBatchSource):
    """`RolloutBatchSource` plus `states` branched groups a step (see the module).

    The drawn episodes and the branches are prepared together, so credit,
    reuse and the inert-item skip treat them alike. Which states are picked
    depends only on the draw and the step index: a resumed run repeats it.
    `reward_mean` and the other rollout stats stay the drawn episodes' (comparable
    with a run without branching); `branch_*` describe the branches.
    """

    def __init__(self, engine: Any, make_requests: Callable[[int], Sequence[Any]], algorithm: Any, *,
                 env: EnvConfig, branch_kwargs: Callable[[str], dict[str, Any] | None], states: int,
                 seed: int = 0, **kwargs: Any) -> None:
        super().__init__(engine, make_requests, algorithm, **kwargs)
        _require_groups(algorithm.group_size if self.strategy is not None else None)
        self.env, self.branch_kwargs, self.states, self.seed = env, branch_kwargs, states, seed

    def _branches(self, drawn: Sequence[Rollout], index: int) -> tuple[list[Rollout], int]:
        rng = random.Random(f"{self.seed}:{index}")
        picked = branch_states([r for r in drawn if not r.failed], self.branch_kwargs, self.states, rng)
        if not picked:
            return [], 0
        template = self.make_requests(index)[0]  # the protocol and inference of this step's requests
        requests = [template.model_copy(update={
            "env": self.env.model_copy(update={"kwargs": {**self.env.kwargs, **kw}}),
            "env_seed": origin.meta.get("env_seed"), "sampling_seed": rng.randrange(1 << 31),
            "group_id": None, "num_episodes": 1}) for kw, origin in picked]
        rollouts = asyncio.run(self.engine.generate_rollouts(requests, max_steps=self.max_steps,
                                                             strategy=self.strategy))
        if all(r.failed for r in rollouts):  # a kwarg clash, say: not a policy's doing, and it would recur each step
            raise ValueError(f"every branched episode failed, e.g. with {picked[0][0]} added to env "
                             f"{self.env.name!r}'s kwargs: {rollouts[0].meta.get('error')}")
        return rollouts, len(picked)

    def next_batch(self) -> SAWBatch:
        index = self.batch_index
        drawn, draw_metrics = self.algorithm.draw(self._draw)
        branches, n = self._branches(drawn, index)
        self.last_rollouts = list(drawn) + branches
        ok = [r for r in self.last_rollouts if not r.failed]
        batch = self.algorithm.prepare(ok, max_seq_len=self.max_seq_len)
        stats = rollout_stats(branches) | {"groups": 0.0, "signal_groups": 0.0} | group_signal(branches)
        batch.meta.update(rollout_stats(drawn) | group_signal(drawn) | draw_metrics
                          | {f"branch_{k}": v for k, v in stats.items()} | {"branch_states": float(n)})
        return batch
