"""torchrun worker for test_distributed.py (also imported there for the 1-process reference).

    torchrun --standalone --nproc_per_node=2 _worker_fsdp.py train  MODEL_DIR OUT_ROOT
    torchrun --standalone --nproc_per_node=2 _worker_fsdp.py resume MODEL_DIR OUT_ROOT CKPT

`train` runs steps 0-1 from MODEL_DIR and saves step 2; `resume` loads CKPT and
runs one more step, saving it. Each rank trains on its `shard_batch` slice in two
micro-batches (gradients synced on the last only), with the summed token loss
divided by the GLOBAL token count and multiplied by world_size (FSDP averages
over ranks), so the update equals the 1-process full-batch update.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from ludic_core.training.checkpoint import load_checkpoint, save_checkpoint
from ludic_core.training.distributed import (
    DistContext,
    all_reduce_sum,
    cleanup,
    init_distributed,
    set_gradient_sync,
    shard_batch,
    shard_model,
)

PAD = 0
N_SEQ = 8


def make_training(model_dir, ctx: DistContext):
    from transformers import AutoModelForCausalLM

    model = shard_model(AutoModelForCausalLM.from_pretrained(model_dir), ctx)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, eps=1e-6)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 4))
    return model, opt, sched


def step_data(step: int) -> list[list[int]]:
    """The full (global) batch of step `step`: N_SEQ token lists of different lengths."""
    g = torch.Generator().manual_seed(step)
    return [torch.randint(4, 260, (int(n),), generator=g).tolist() for n in torch.randint(6, 20, (N_SEQ,), generator=g)]


def _summed_token_loss(model, seqs: list[list[int]]) -> torch.Tensor:
    width = max(map(len, seqs))
    ids = torch.tensor([s + [PAD] * (width - len(s)) for s in seqs])
    mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs])
    labels = ids.masked_fill(mask == 0, -100)
    logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1]
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1), reduction="sum")


def train_steps(model, opt, sched, ctx: DistContext, steps) -> None:
    for step in steps:
        mine = shard_batch(step_data(step), ctx)
        global_tokens = all_reduce_sum(float(sum(len(s) - 1 for s in mine)), ctx)
        half = (len(mine) + 1) // 2
        micro = [mine[:half], mine[half:]]
        for i, seqs in enumerate(micro):
            set_gradient_sync(model, i == len(micro) - 1)
            (_summed_token_loss(model, seqs) * ctx.world_size / global_tokens).backward()
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)


def main(argv: list[str]) -> None:
    mode, model_dir, out_root = argv[:3]
    torch.manual_seed(0)
    ctx = init_distributed()
    model, opt, sched = make_training(model_dir, ctx)
    start = 0
    if mode == "resume":
        start = load_checkpoint(argv[3], model=model, optimizer=opt, scheduler=sched, ctx=ctx)["step"]
    end = start + (2 if mode == "train" else 1)
    train_steps(model, opt, sched, ctx, range(start, end))
    save_checkpoint(out_root, end, model=model, optimizer=opt, scheduler=sched, ctx=ctx,
                    data_state={"next_step": end, "world_size": ctx.world_size})  # fmt: skip
    cleanup(ctx)


if __name__ == "__main__":
    main(sys.argv[1:])
