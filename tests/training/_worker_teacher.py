"""torchrun worker for test_teacher_ranks.py: a distillation teacher's scoring split over 2 gloo ranks.

usage: _worker_teacher.py OUT_DIR [share|top_k|fail]

Each rank has `with_teacher_logprobs` score the whole batch with a `Recording` teacher and writes
OUT_DIR/rank<R>.json: the items its teacher was asked for, every item's teacher log-probs as it
ended with them, and the cost metrics. `fail`: rank 1's teacher raises; each rank writes the error
it got (rank 0 must get one too, not hang in the exchange). `top_k`: as `share`, with the teacher's
top-2 ids and log-probs at each position too.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ludic_core.batching.saw import SAWItem
from ludic_core.training.distributed import cleanup, init_distributed
from ludic_core.training.teacher import with_teacher_logprobs


def items() -> list[SAWItem]:
    """7 items of different lengths: the 2 ranks' shares are uneven (4 and 3)."""
    out = []
    for i in range(7):
        prompt, completion = 3 + i % 4, 2 + i
        ids = [(7 * i + 3 * k) % 50 + 4 for k in range(prompt + completion)]
        out.append(SAWItem(ids, [1] * len(ids), [0] * prompt + [1] * completion, 1.0, {"i": i}))
    return out


class Recording:
    """A teacher that notes which items it scored; its log-probs depend on the item alone, with
    values float32 could not hold (-1/3) and one below the floor, so a lossy exchange would show."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    def score(self, batch):
        self.asked += [item.meta["i"] for item in batch]
        return [[0.0 if not m else -(i + 1) / 3 - k * 1e-9 - (40.0 if k == len(item) - 1 else 0.0)
                 for k, m in enumerate(item.action_mask)] for i, item in ((it.meta["i"], it) for it in batch)]


    def score_top_k(self, batch, k):
        """The sampled log-probs as `score` gives them, and k ids and log-probs that depend on the item
        and the position alone (one below the floor)."""
        sampled = self.score(batch)
        out = []
        for item, values in zip(batch, sampled):
            i = item.meta["i"]
            ids = [[(i + p + j) % 50 for j in range(k)] if m else [0] * k for p, m in enumerate(item.action_mask)]
            lps = [[-(i + 1) / 7 - j - (50.0 if p == 3 else 0.0) for j in range(k)] if m else [0.0] * k
                   for p, m in enumerate(item.action_mask)]
            out.append((values, ids, lps))
        return out


class Failing(Recording):
    """Rank 1's teacher raises (a server error, an item too long): rank 0 must not wait for its scores."""

    def __init__(self, rank: int) -> None:
        super().__init__()
        self.rank = rank

    def score(self, batch):
        if self.rank == 1:
            raise ValueError("item 1 is longer than the teacher's max_model_len")
        return super().score(batch)


def main(out_dir: str, mode: str = "share") -> None:
    ctx = init_distributed("cpu")
    if mode == "fail":
        try:
            with_teacher_logprobs(Failing(ctx.rank), items(), ctx)
            error = "none"
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / f"rank{ctx.rank}.json").write_text(json.dumps({"error": error}))
        cleanup(ctx)
        return
    teacher = Recording()
    scored, metrics = with_teacher_logprobs(teacher, items(), ctx, top_k=2 if mode == "top_k" else None)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    (Path(out_dir) / f"rank{ctx.rank}.json").write_text(json.dumps(
        {"asked": teacher.asked, "teacher_logprobs": [i.teacher_logprobs for i in scored], "metrics": metrics,
         "top_ids": [i.teacher_top_ids for i in scored], "top_logprobs": [i.teacher_top_logprobs for i in scored]}))
    cleanup(ctx)


if __name__ == "__main__":
    main(*sys.argv[1:])
