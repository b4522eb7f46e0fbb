"""Rollout reuse: several optimiser updates per generated batch (PPO's epochs and mini-batches).

Rollouts are most of a step's cost (on 2 CPU cores the trainer idled 75% of a pipeline run),
so a batch earns more when it is trained on more than once: `epochs` passes over it, each cut
into `mini_batches` optimiser updates (TRL's `num_iterations` x `steps_per_generation`, verl's
`ppo_epochs` x `ppo_mini_batch_size`). From the second update on the policy has moved away from
the one that sampled the batch, so the ratio pi_theta / pi_behaviour departs from 1 and the
clipped surrogate starts to act: that is what clipping is for.

The behaviour log-probs are the sampler's own (`SAWItem.actor_logprobs`), kept fixed for every
update of the batch: in synchronous training the sampler ran the weights the batch's first update
starts from, and the one log-prob convention (DESIGN.md: the distribution actually sampled from)
makes them that policy's log-probs exactly when sampler and trainer compute the same distribution,
so no extra forward pass is needed to recompute them. Where they differ, GRPO's
`sampler_correction` is the remedy, and it is refused with reuse (its ratio is against the
trainer's current log-probs, the behaviour policy's only on a batch's first update).

A group's items stay in one mini-batch (its prompt then runs once, `shared_prefix`), and groups
are dealt out in a fresh seeded order each epoch, the same on every rank.
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Sequence, TypeVar

from ludic_core.training.step_metrics import how_combined

__all__ = ["merge_update_metrics", "plan_updates"]

T = TypeVar("T")


def plan_updates(items: Sequence[T], groups: Sequence[object], *, mini_batches: int, epochs: int,
                 seed: int) -> list[list[T]]:
    """The items of each optimiser update, in order: `epochs` passes, each `mini_batches` updates.

    `groups[i]` is item i's group (None: a group of its own). Each epoch shuffles the groups with
    `random.Random(seed + epoch)` and deals them into `mini_batches` parts of about equal item count
    (a greedy cut at the running total), so with one mini-batch and one epoch the plan is the batch
    itself, in its own order. An update with no item is left out.
    """
    if mini_batches < 1 or epochs < 1:
        raise ValueError(f"mini_batches and epochs must be >= 1, got {mini_batches} and {epochs}")
    if len(groups) != len(items):
        raise ValueError(f"{len(items)} items but {len(groups)} group labels")
    if mini_batches == 1 and epochs == 1:
        return [list(items)] if items else []
    members: dict[object, list[int]] = defaultdict(list)
    for i, g in enumerate(groups):
        members[("item", i) if g is None else ("group", g)].append(i)
    order = list(members.values())
    plan: list[list[T]] = []
    for epoch in range(epochs):
        random.Random(seed + epoch).shuffle(order)
        parts: list[list[T]] = [[] for _ in range(mini_batches)]
        done = 0
        for idx in order:
            # the part whose share of the items the running total has reached
            part = min(mini_batches - 1, done * mini_batches // max(len(items), 1))
            parts[part].extend(items[i] for i in idx)
            done += len(idx)
        plan.extend(p for p in parts if p)
    return plan


def merge_update_metrics(per_update: list[dict[str, float]]) -> dict[str, float]:
    """One step's loss metrics from its updates' own: maxima and minima over them, the rest
    (loss, grad_norm, clip_frac, ratio_mean, ...) their mean; with several updates the last
    one's also as `last_update/NAME` (its ratio is the furthest from the sampler's)."""
    if len(per_update) == 1:
        return dict(per_update[0])
    merged: dict[str, float] = {}
    for name in {k for m in per_update for k in m}:
        values = [m[name] for m in per_update if name in m]
        how = how_combined(name)
        merged[name] = max(values) if how == "max" else min(values) if how == "min" else sum(values) / len(values)
    merged.update({f"last_update/{k}": v for k, v in per_update[-1].items()})
    return merged
