"""torchrun worker: `_worker_fsdp.py`'s train / resume with LoRA adapters applied before sharding.

    torchrun --standalone --nproc_per_node=2 _worker_fsdp_lora.py train  MODEL_DIR OUT_ROOT
    torchrun --standalone --nproc_per_node=2 _worker_fsdp_lora.py resume MODEL_DIR OUT_ROOT CKPT
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import _worker_fsdp as base  # noqa: E402

from ludic_core.config import LoRAConfig  # noqa: E402
from ludic_core.lora.peft_model import apply_lora  # noqa: E402


def make_training(model_dir, ctx):
    from transformers import AutoModelForCausalLM

    model = apply_lora(AutoModelForCausalLM.from_pretrained(model_dir), LoRAConfig(r=4, alpha=8))
    model = base.shard_model(model, ctx)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2, eps=1e-6)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 4))
    return model, opt, sched


base.make_training = make_training  # base.main builds through this module global

if __name__ == "__main__":
    base.main(sys.argv[1:])
