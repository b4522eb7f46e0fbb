"""torchrun worker for test_rollout_reuse_with.py: rollout reuse (4 mini-batches x 2 epochs) under FSDP2.

usage: _worker_reuse.py MODEL_DIR OUT_DIR   (also run as one plain process, the reference)

Two train steps on one batch of 4 groups: 2 items, 2 items of weight 0 (skipped as inert: an update
of nothing but them runs no forward anywhere), 2 items, 1 item (its update leaves a second rank only
padding). Each rank writes OUT_DIR/rank<R>.json: per optimiser update, the ids of the items it scored;
its optimiser step count; `update_history`; the trainer's counters. Rank 0 also writes the final
full weights (OUT_DIR/weights.safetensors).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

from ludic_core.algorithms import make_grpo
from ludic_core.batching.saw import SAWBatch, SAWItem
from ludic_core.config import RolloutReuse, TrainerConfig
from ludic_core.models import load_model_and_tokenizer
from ludic_core.training.distributed import cleanup, init_distributed
from ludic_core.training.micro_batches import is_pad
from ludic_core.training.trainer import Trainer

from _worker_skip import Batches  # noqa: E402  # this script's folder is on sys.path: the fixed-batch source

GROUPS = [("g0", 1.0), ("g0", -1.0), ("g1", 0.0), ("g1", 0.0), ("g2", 0.5), ("g2", -0.5), ("g3", 0.8)]


def items(model) -> list[SAWItem]:
    """The batch; actor log-probs are the model's own, so each step's first update has ratio 1."""
    g = torch.Generator().manual_seed(5)
    out = []
    for i, (group, weight) in enumerate(GROUPS):
        prompt, completion = 10 + i, 5 + i % 3
        ids = torch.randint(4, 200, (prompt + completion,), generator=g).tolist()
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), -1)
        lps = [0.0] * prompt + [float(logp[t - 1, ids[t]]) for t in range(prompt, len(ids))]
        out.append(SAWItem(ids, [1] * len(ids), [0] * prompt + [1] * completion, weight,
                           {"group_id": group, "i": i, "sampling_temperature": 1.0}, actor_logprobs=lps))
    return out



def main(model_dir: str, out_dir: str) -> None:
    ctx = init_distributed("cpu")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model, tok = load_model_and_tokenizer(model_dir)
    batch = items(model)
    cfg = TrainerConfig(lr=1e-3, weight_decay=0.1, dtype="float32", micro_token_budget=100_000, max_seq_len=512,
                        device="cpu")
    tr = Trainer(model, make_grpo(reuse=RolloutReuse(mini_batches=4, epochs=2)),
                 Batches(SAWBatch(batch), SAWBatch(batch)), cfg, tokenizer=tok, ctx=ctx)
    scored: list[list[int]] = []  # per update: the items this rank ran a forward on
    split = tr.batcher.split

    def recording_split(part):
        mbs = split(part)
        scored.append(sorted(m["i"] for mb in mbs if not is_pad(mb) for m in mb.meta))
        return mbs

    tr.batcher.split = recording_split
    steps = []
    tr.optimizer.register_step_post_hook(lambda *_: steps.append(1))
    tr.train(2)
    record = {"rank": ctx.rank, "world": ctx.world_size, "scored": scored, "optimizer_steps": len(steps),
              "updates": tr.updates, "policy_version": tr.policy_version, "update_history": tr.update_history,
              "history": tr.history}
    (out / f"rank{ctx.rank}.json").write_text(json.dumps(record))
    weights = {k: v.detach().cpu().clone() for k, v in tr.full_weights().items()}
    if ctx.is_main:
        save_file(weights, out / "weights.safetensors")
    cleanup(ctx)


if __name__ == "__main__":
    main(*sys.argv[1:3])
