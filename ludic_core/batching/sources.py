"""Batch sources: where the trainer's SAW batches come from.

The trainer only calls `next_batch()`; whether items come from fresh rollouts
(synchronous RL), a file (SFT, offline RL) or a queue (pipeline RL) is the
source's business. `state_dict()` is the data position saved in checkpoints so
a resumed run continues where it stopped instead of replaying data.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

from ludic_core.batching.saw import SAWBatch, SAWItem
from ludic_core.credit import signal_groups
from ludic_core.rollout.jsonl import read_rollouts
from ludic_core.rollout.strategies import GRPORequestStrategy, RequestStrategy, StatefulStrategy
from ludic_core.types import Message, Rollout

__all__ = [
    "BatchSource",
    "RolloutBatchSource",
    "as_batch_source",
    "OfflineBatchSource",
    "chat_example_to_item",
    "group_signal",
    "rollout_stats",
    "signal_groups",
]


@runtime_checkable
class BatchSource(Protocol):
    """Where a Trainer's batches come from.

    Required: `next_batch`, `state_dict` and `load_state_dict`. Two hooks have
    defaults that do nothing: `checkpoint_committed(path)`, called once a
    checkpoint holding every batch so far is on disk (a stream source
    acknowledges its items then), and `record_failure(error)`, called when a
    step on the last batch failed, before the error propagates (a queue source
    notes which entries it was). Subclass `BatchSource` to inherit the defaults;
    a plain object with the three required methods runs too: the Trainer adopts
    it with `as_batch_source`, which supplies the hooks it lacks.
    """

    def next_batch(self) -> SAWBatch: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...

    def checkpoint_committed(self, path: Path | None = None) -> None:
        """A checkpoint holding every batch handed out so far is on disk (default: nothing to do)."""
        return None  # a body, not `...`: the default an explicit subclass inherits

    def record_failure(self, error: BaseException | str) -> None:
        """The step on the last batch failed with `error` (default: nothing to note)."""
        return None


@runtime_checkable
class _CommitsCheckpoints(Protocol):
    def checkpoint_committed(self, path: Path | None = None) -> None: ...


@runtime_checkable
class _RecordsFailures(Protocol):
    def record_failure(self, error: BaseException | str) -> None: ...


_REQUIRED = ("next_batch", "state_dict", "load_state_dict")


class _Adopted(BatchSource):
    """A plain source with the required methods, given the hooks it lacks (its own hooks,
    where it has them, are still called). `inner` is the object handed in."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def next_batch(self) -> SAWBatch:
        batch: SAWBatch = self.inner.next_batch()
        return batch

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = self.inner.state_dict()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.inner.load_state_dict(state)

    def checkpoint_committed(self, path: Path | None = None) -> None:
        if isinstance(self.inner, _CommitsCheckpoints):
            self.inner.checkpoint_committed(path)

    def record_failure(self, error: BaseException | str) -> None:
        if isinstance(self.inner, _RecordsFailures):
            self.inner.record_failure(error)


class _NoSource(BatchSource):
    """What a Trainer built with `source=None` (to score, or to publish) reads from:
    a clear error once something asks it for data."""

    def _refuse(self) -> ValueError:
        return ValueError("this Trainer was built with source=None: it has no batches and no data position")

    def next_batch(self) -> SAWBatch:
        raise self._refuse()

    def state_dict(self) -> dict[str, Any]:
        raise self._refuse()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        raise self._refuse()


def as_batch_source(source: object) -> BatchSource:
    """`source` as a full `BatchSource`: itself when it has every method (hooks
    included), else wrapped so the missing hooks do nothing; None (a trainer that only
    scores or publishes) refuses every read. A TypeError names the required methods
    it lacks."""
    if isinstance(source, BatchSource):
        return source
    if source is None:
        return _NoSource()
    missing = [name for name in _REQUIRED if not callable(getattr(source, name, None))]
    if missing:
        raise TypeError(f"{type(source).__name__} is not a BatchSource: it has no {', '.join(missing)} "
                        "(see ludic_core.batching.sources.BatchSource)")
    return _Adopted(source)


def group_signal(rollouts: Sequence[Rollout]) -> dict[str, float]:
    """`groups` and `signal_groups` of a batch of grouped episodes ({} when the
    episodes are not in groups). A group whose episodes all end with the same
    return has zero advantage, so `signal_groups / groups` is the share of the
    batch that teaches anything: a near-deterministic policy (an SFT start, say)
    makes every sample of a group the same game and starves group-relative RL."""
    ok = [r for r in rollouts if not r.failed]
    ids = [r.meta.get("group_id") for r in ok]
    if not ids or None in ids or len(set(ids)) == len(ids):
        return {}
    return {"groups": float(len(set(ids))), "signal_groups": float(signal_groups(ok))}


def rollout_stats(rollouts: Sequence[Rollout]) -> dict[str, float]:
    ok = [r for r in rollouts if not r.failed]
    n = max(len(ok), 1)
    return {
        "reward_mean": sum(r.total_reward for r in ok) / n,
        "episode_len_mean": sum(r.length for r in ok) / n,
        "rollouts": float(len(rollouts)),
        "rollouts_failed": float(len(rollouts) - len(ok)),
    }


class RolloutBatchSource(BatchSource):
    """Synchronous RL: every batch is fresh rollouts from the current policy.

    `make_requests(batch_index)` returns the requests for one batch (so the
    problem schedule is reproducible and resumable); `algorithm.draw` decides how
    many request batches one step takes (consecutive indices of the schedule:
    more than one under DAPO's dynamic sampling) and `algorithm.prepare` turns
    the rollouts into credit-weighted SAW items. Failed episodes are counted
    and left out of training.

    The group size is the algorithm's, stated once in its config: without a
    `strategy`, each request is played `algorithm.group_size` times as one group
    (`algorithm.request_strategy(strategy_seed)`). A strategy given anyway must
    draw groups of that size; a group algorithm whose size was not stated draws
    each request once.
    """

    def __init__(
        self,
        engine: Any,
        make_requests: Callable[[int], Sequence[Any]],
        algorithm: Any,
        *,
        max_steps: int,
        strategy: RequestStrategy | None = None,
        strategy_seed: int | None = None,
        max_seq_len: int | None = None,
    ) -> None:
        self.engine = engine
        self.make_requests = make_requests
        self.algorithm = algorithm
        self.max_steps = max_steps
        self.strategy = _strategy(algorithm, strategy, strategy_seed)
        self.max_seq_len = max_seq_len
        self.batch_index = 0
        self.last_rollouts: list[Rollout] = []

    def _draw(self) -> list[Rollout]:
        requests = self.make_requests(self.batch_index)
        rollouts = asyncio.run(self.engine.generate_rollouts(
            requests, max_steps=self.max_steps, strategy=self.strategy
        ))
        self.batch_index += 1
        return rollouts

    def next_batch(self) -> SAWBatch:
        rollouts, draw_metrics = self.algorithm.draw(self._draw)  # one request batch, or DAPO's several
        self.last_rollouts = rollouts
        ok = [r for r in rollouts if not r.failed]
        batch = self.algorithm.prepare(ok, max_seq_len=self.max_seq_len)
        batch.meta.update(rollout_stats(rollouts) | group_signal(rollouts) | draw_metrics)
        return batch

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"batch_index": self.batch_index}
        if isinstance(self.strategy, StatefulStrategy):  # GRPO's group ids: a resumed run draws the ones it would have
            state["strategy"] = self.strategy.state_dict()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.batch_index = int(state.get("batch_index", 0))
        if "strategy" in state and isinstance(self.strategy, StatefulStrategy):  # absent in older checkpoints
            self.strategy.load_state_dict(state["strategy"])


def _strategy(algorithm: Any, given: RequestStrategy | None, seed: int | None) -> RequestStrategy | None:
    """`given`, checked against the algorithm's group size, else the algorithm's own strategy."""
    size = algorithm.group_size
    if given is None:
        return None if size is None else algorithm.request_strategy(seed)
    if isinstance(given, GRPORequestStrategy) and size is not None and size > 1 and given.group_size != size:
        raise ValueError(f"the strategy draws groups of {given.group_size} but algorithm {algorithm.name!r} has "
                         f"group_size={size}: leave strategy out (the algorithm's group size is used)")
    return given


def chat_example_to_item(messages: Sequence[Message], tokenizer: Any, *, meta: dict | None = None) -> SAWItem:
    """SFT item from a chat: every assistant turn (plus eos) is trained, conditioned on
    everything before it rendered with the chat template (see `batching.chat`)."""
    from ludic_core.batching.chat import chat_to_item

    return chat_to_item(messages, tokenizer, meta=meta)


class OfflineBatchSource(BatchSource):
    """Fixed data, shuffled per epoch: SAW items from rollout JSONL (weighted by
    a credit assigner) or from chat examples ({"messages": [...]}) for SFT."""

    def __init__(self, items: Sequence[SAWItem], *, batch_size: int, seed: int = 0) -> None:
        if not items:
            raise ValueError("OfflineBatchSource needs at least one item")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.items = list(items)
        self.batch_size = batch_size
        self.seed = seed
        self.epoch = 0
        self.position = 0
        self._order = self._shuffled(0)

    @classmethod
    def from_rollouts_jsonl(cls, path: str | Path, algorithm: Any, *, batch_size: int, seed: int = 0,
                            max_seq_len: int | None = None) -> OfflineBatchSource:
        rollouts = [r for r in read_rollouts(path) if not r.failed]
        return cls(algorithm.prepare(rollouts, max_seq_len=max_seq_len).items, batch_size=batch_size, seed=seed)

    @classmethod
    def from_chat_examples(cls, examples: Sequence[Mapping[str, Any]], tokenizer: Any, *, batch_size: int,
                           seed: int = 0) -> OfflineBatchSource:
        items = []
        for i, ex in enumerate(examples):
            if "messages" not in ex:
                raise ValueError(f"chat example {i} has no 'messages' field (keys: {sorted(ex)})")
            items.append(chat_example_to_item(ex["messages"], tokenizer, meta={"example": i}))
        return cls(items, batch_size=batch_size, seed=seed)

    @classmethod
    def from_chat_jsonl(cls, path: str | Path, tokenizer: Any, **kw: Any) -> OfflineBatchSource:
        """Chats from a JSONL file or a `datasets` directory (loss on every assistant turn)."""
        from ludic_core.batching.chat import chat_items

        return cls(chat_items(path, tokenizer), **kw)

    def _shuffled(self, epoch: int) -> list[int]:
        order = list(range(len(self.items)))
        random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        return order

    def next_batch(self) -> SAWBatch:
        picked: list[SAWItem] = []
        while len(picked) < self.batch_size:
            if self.position >= len(self._order):
                self.epoch += 1
                self.position = 0
                self._order = self._shuffled(self.epoch)
            picked.append(self.items[self._order[self.position]])
            self.position += 1
        return SAWBatch(items=picked, meta={"epoch": self.epoch})

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.epoch = int(state.get("epoch", 0))
        self.position = int(state.get("position", 0))
        self._order = self._shuffled(self.epoch)
