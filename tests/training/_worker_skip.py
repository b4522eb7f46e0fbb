"""torchrun worker for test_trainer_skip.py: GRPO with inert items skipped, or not, under FSDP2.

usage: _worker_skip.py MODEL_DIR OUT_DIR

For skip in (on, off), from the same starting weights: one step on a batch whose one
non-zero item leaves every other rank only padding, then one step on zero weights only
(skipped, no rank runs a forward pass). Rank 0 writes OUT_DIR/<on|off>.json (both steps'
metrics) and OUT_DIR/<on|off>.safetensors (the first step's full gradients, the weights
after the second).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

from ludic_core.algorithms import make_grpo
from ludic_core.batching.saw import SAWBatch, SAWItem
from ludic_core.config import TrainerConfig
from ludic_core.models import load_model_and_tokenizer
from ludic_core.training.distributed import cleanup, init_distributed
from ludic_core.training.trainer import Trainer

WEIGHTS = [0.0, 0.7, 0.0, 0.0]  # one item to score; skipped: 3 items, 6 + 8 + 5 = 19 action tokens
COMPLETIONS = [6, 7, 8, 5]


def items(weights: list[float]) -> list[SAWItem]:
    g = torch.Generator().manual_seed(3)
    out = []
    for w, completion in zip(weights, COMPLETIONS):
        ids = torch.randint(4, 200, (16 + completion,), generator=g).tolist()
        lps = [0.0] * 16 + (-torch.rand(completion, generator=g) * 6).tolist()
        out.append(SAWItem(ids, [1] * len(ids), [0] * 16 + [1] * completion, w, {}, actor_logprobs=lps))
    return out


class Batches:
    def __init__(self, *batches: SAWBatch): self.batches = list(batches)
    def next_batch(self): return self.batches.pop(0)
    def state_dict(self): return {}
    def load_state_dict(self, s): pass


def run(model_dir: str, out: Path, skip: bool) -> None:
    model, tok = load_model_and_tokenizer(model_dir)
    cfg = TrainerConfig(lr=1e-2, weight_decay=0.1, dtype="float32", max_grad_norm=None, skip_inert=skip,
                        device="cpu")
    tr = Trainer(model, make_grpo(), Batches(SAWBatch(items(WEIGHTS)), SAWBatch(items([0.0] * 4))), cfg,
                 tokenizer=tok)
    grads: dict[str, torch.Tensor] = {}

    def keep(*_):
        for name, p in tr.model.named_parameters():  # every rank joins full_tensor's all-gather
            g = p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
            grads.setdefault(f"grad.{name}", g.detach().cpu().clone())

    hook = tr.optimizer.register_step_pre_hook(keep)
    metrics = [tr.train_step()]
    hook.remove()
    metrics.append(tr.train_step())
    weights = {f"weight.{k}": v.detach().cpu().clone() for k, v in tr.full_weights().items()}
    if tr.ctx.is_main:
        (out / f"{'on' if skip else 'off'}.json").write_text(json.dumps(metrics))
        save_file({**grads, **weights}, out / f"{'on' if skip else 'off'}.safetensors")


def main(model_dir: str, out_dir: str) -> None:
    ctx = init_distributed("cpu")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for skip in (True, False):
        run(model_dir, out, skip)
    cleanup(ctx)


if __name__ == "__main__":
    main(*sys.argv[1:3])
