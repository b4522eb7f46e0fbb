"""Trainer step time vs a bare hand-written policy-gradient loop, same batches.

Both sides get identical SAW items, the same model weights and the same math
(REINFORCE: -A * log p on action tokens, normalised by the step's action-token
count, AdamW, grad clipping at 1.0). The bare loop is what a researcher would
write by hand; the ratio is what the Trainer's bookkeeping (filtering,
collation, metrics, schedule) costs. Steps are interleaved to share machine
noise. Also prints the padding waste of length-sorted packing at the default
micro-token budget, on variable-length multi-turn rollouts.

    .venv/bin/python benchmarks/trainer_overhead.py [--steps 8] [--batch 64]
    .venv/bin/python benchmarks/trainer_overhead.py --smoke   # CI: 4 items, one timed step
"""

from __future__ import annotations

from ludic_core import openmp

openmp.configure()  # first: OpenMP's spin-wait, set before torch loads (ludic_core/openmp.py)

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import torch

from ludic_core.agents import Agent
from ludic_core.algorithms import make_reinforce
from ludic_core.batching.collate import collate_micro_batches, padding_waste
from ludic_core.batching.saw import SAWBatch
from ludic_core.config import TrainerConfig
from ludic_core.envs import TicTacToeEnv, scripted_tic_tac_toe_policy
from ludic_core.inference import ScriptedChatClient
from ludic_core.interaction import SingleAgentSyncProtocol
from ludic_core.models import build_tiny_model, load_model_and_tokenizer
from ludic_core.parsers import xml_tag_parser
from ludic_core.training.trainer import Trainer


def full_dialog_items(tok, games: int):
    """Multi-turn games with the full dialog in the prompt: lengths vary a lot."""
    client = ScriptedChatClient(scripted_tic_tac_toe_policy("minimax", seed=0), tok)

    async def play(seed):
        proto = SingleAgentSyncProtocol(Agent(client, parser=xml_tag_parser("move")))
        return await proto.run(TicTacToeEnv(agent_mark="XO"[seed % 2]), max_steps=9, env_seed=seed)

    async def run():
        return [r for rs in await asyncio.gather(*[play(s) for s in range(games)]) for r in rs]

    rollouts = asyncio.run(run())
    weights = [[r.total_reward] * r.length for r in rollouts]
    from ludic_core.batching.saw import build_saw_batch

    items = build_saw_batch(rollouts, weights).items
    for it in items:  # REINFORCE needs no actor log-probs, the scripted teacher has none
        it.actor_logprobs = None
    return items


class FixedSource:
    def __init__(self, items): self.items = items
    def next_batch(self): return SAWBatch(items=list(self.items))
    def state_dict(self): return {}
    def load_state_dict(self, state): pass


def bare_step(model, opt, mbs, num_tokens: float) -> None:
    for mb in mbs:
        logits = model(input_ids=mb.input_ids, attention_mask=mb.attention_mask).logits
        logp = torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, mb.input_ids[:, 1:, None]).squeeze(-1)
        loss = -(mb.weights[:, None] * logp * mb.action_mask[:, 1:]).sum() / num_tokens
        loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="tiny-1m")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--batch", type=int, default=64, help="items per optimizer step")
    ap.add_argument("--budget", type=int, default=TrainerConfig().micro_token_budget)
    ap.add_argument("--smoke", action="store_true", help="CI: 4 items, one timed step; proves the code path")
    args = ap.parse_args()
    if args.smoke:
        args.steps, args.batch = 1, 4
    model_dir = build_tiny_model(Path(tempfile.gettempdir()) / f"ludic-bench-{args.preset}", args.preset)
    _, tok = load_model_and_tokenizer(model_dir)
    items = full_dialog_items(tok, games=48)[: args.batch]
    cfg = TrainerConfig(lr=1e-4, micro_token_budget=args.budget, max_seq_len=4096)

    trainer = Trainer(load_model_and_tokenizer(model_dir)[0], make_reinforce(), FixedSource(items), cfg, tokenizer=tok)
    bare_model = load_model_and_tokenizer(model_dir)[0].train()
    bare_opt = torch.optim.AdamW(bare_model.parameters(), lr=1e-4, betas=cfg.betas)
    mbs = collate_micro_batches(items, micro_token_budget=args.budget, pad_id=tok.pad_token_id)
    num_tokens = sum(mb.action_tokens for mb in mbs)

    trainer.train_step()  # warm-up both
    bare_step(bare_model, bare_opt, mbs, num_tokens)
    t_trainer, t_bare = [], []
    for _ in range(args.steps):
        t = time.perf_counter(); trainer.train_step(); t_trainer.append(time.perf_counter() - t)
        t = time.perf_counter(); bare_step(bare_model, bare_opt, mbs, num_tokens); t_bare.append(time.perf_counter() - t)
    tt, tb = statistics.median(t_trainer), statistics.median(t_bare)
    real = sum(mb.real_tokens for mb in mbs)
    lengths = sorted(len(i) for i in items)
    print(f"batch: {len(items)} items, lengths {lengths[0]}..{lengths[-1]}, {real} real tokens, "
          f"{len(mbs)} micro-batches at budget {args.budget}")
    print(f"{'loop':<22}{'median step s':>14}{'tokens/s':>10}")
    print(f"{'ludic Trainer':<22}{tt:>14.3f}{real / tt:>10.0f}")
    print(f"{'bare PyTorch loop':<22}{tb:>14.3f}{real / tb:>10.0f}")
    print(f"ratio (Trainer / bare): {tt / tb:.3f}x   (target <= 1.10x)")
    print(f"padding waste at budget {args.budget}: {padding_waste(mbs) * 100:.2f}%   (target <= 5%)")


if __name__ == "__main__":
    main()
