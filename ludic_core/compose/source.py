"""Configs -> a `RolloutBatchSource`: the one builder of fresh-rollout data.

A synchronous stage (`stages.data`) and a pipeline actor
(`queue.actor`) draw the same batches from the same configs: same requests,
same credit, same filters, and the algorithm's own request strategy (GRPO
groups of its group size when it compares samples of one prompt). Building
them here keeps the two from drifting apart; they differ only in which seed
blocks they play (`first_draw`) and the strategy's seed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ludic_core.batching.branching import BranchingBatchSource, branch_kwargs_of
from ludic_core.batching.sources import RolloutBatchSource
from ludic_core.compose.build import build_engine, episode_requests
from ludic_core.compose.configs import AgentConfig, BranchConfig, EnvConfig, SeedSchedule
from ludic_core.inference.client import ChatClient
from ludic_core.registry import resolve

if TYPE_CHECKING:  # the algorithm arrives built; importing its module would load torch with the configs
    from ludic_core.algorithms import RLAlgorithm

__all__ = ["rollout_source"]


def rollout_source(env: EnvConfig, agent: AgentConfig, schedule: SeedSchedule, algorithm: RLAlgorithm,
                   client: ChatClient, *, requests_per_draw: int, max_seq_len: int,
                   first_draw: int = 0, strategy_seed: int | None = None,
                   branch: BranchConfig | None = None) -> RolloutBatchSource:
    """Draw `i` plays `requests_per_draw` env seeds (block `first_draw + i` of
    `schedule`), each `algorithm.group_size` times; `algorithm` (built) assigns
    credit. `strategy_seed` (default: the schedule's start) seeds the GRPO groups.
    `branch` adds groups restarted at states the drawn episodes reached
    (`ludic_core.batching.branching`)."""
    n = requests_per_draw
    seed = schedule.start if strategy_seed is None else strategy_seed
    engine = build_engine(env, agent, client)
    common: dict = dict(max_steps=agent.max_turns, strategy=algorithm.request_strategy(seed), max_seq_len=max_seq_len)

    def requests(i: int) -> list:
        return episode_requests(env, agent, schedule.seeds(n, offset=(first_draw + i) * n))

    if branch is None:
        return RolloutBatchSource(engine, requests, algorithm, **common)
    return BranchingBatchSource(engine, requests, algorithm, env=env, states=branch.states, seed=seed,
                                branch_kwargs=branch_kwargs_of(env.name, resolve("env", env.name)), **common)
