"""Trains SFT with a checkpoint every step; optionally SIGKILLs itself at the end.

usage: _worker_resume.py MODEL_DIR CKPT_DIR UNTIL_STEP [--kill]
"""

import os
import signal
import sys

from ludic_core.algorithms import make_sft
from ludic_core.batching.sources import OfflineBatchSource
from ludic_core.config import TrainerConfig
from ludic_core.models import load_model_and_tokenizer
from ludic_core.recipes.tic_tac_toe import keep_by_reward, teacher_rollouts
from ludic_core.training.distributed import cleanup
from ludic_core.training.trainer import Trainer

model_dir, ckpt, until = sys.argv[1], sys.argv[2], int(sys.argv[3])
model, tok = load_model_and_tokenizer(model_dir)
kept, _ = keep_by_reward(teacher_rollouts(tok, games=16, seed=5), min_reward=0.5)
source = OfflineBatchSource(make_sft().prepare(kept).items, batch_size=6, seed=0)
trainer = Trainer(model, make_sft(), source, TrainerConfig(lr=3e-3, checkpoint_every=1, warmup_steps=2, dtype="float32"),
                  tokenizer=tok, checkpoint_dir=ckpt)
if trainer.resume():
    print(f"resumed at step {trainer.step}", flush=True)
trainer.train(until)
print(f"scored from hidden states: {trainer.scorer.fused}", flush=True)
if "--kill" in sys.argv:
    os.kill(os.getpid(), signal.SIGKILL)
cleanup(trainer.ctx)  # orderly gloo shutdown (see distributed.cleanup)
