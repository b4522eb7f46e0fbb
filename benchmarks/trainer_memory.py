"""Trainer peak memory at a 151,936-token vocabulary on the CPU: now vs the old computation.

The old trainer scored tokens with `log_softmax(logits.float()).gather(...)`
over every position: at a real vocabulary that keeps an fp32 [tokens, vocab]
log-softmax alive for backward, beside the logits and their gradient. The
current `Trainer.train_step` scores only positions from the first action
position on, in chunks, without an fp32 [tokens, vocab] buffer (see
ludic_core/training/scoring.py for how: from the hidden states where the
output layer is a plain linear map, else from the model's own logits).

Both sides run ONE optimizer step (forward + backward over the same
micro-batches, grad clipping, AdamW) on the same weights and SAW items, each in
a fresh subprocess so neither inherits the other's allocator state. Peak memory
is the kernel's high-water mark of the process's resident set (VmHWM in
/proc/self/status), reset just before the step by writing 5 to
/proc/self/clear_refs, minus the RSS right before the step; where that reset is
not allowed it falls back to getrusage's ru_maxrss (peak since process start).
The AdamW state (2 x parameters, created on the first step) is in both peaks.
Both report the same loss and gradient norm: the math is identical.

The default budget is 2048 tokens per micro-batch, not the trainer's 8192:
the old computation's peak grows with the budget (~4.5 GB at 2048, so roughly
4x that at 8192, extrapolated, not run), too much beside a test suite on a
24 GiB machine. Everything runs on one torch thread by default.

    .venv/bin/python benchmarks/trainer_memory.py [--items 16] [--budget 2048]
    .venv/bin/python benchmarks/trainer_memory.py --smoke   # CI: 2 items, vocab 8192 (proves the code path)
"""

from __future__ import annotations

import argparse
import json
import random
import re
import resource
import subprocess
import sys
import time

VOCAB = 151_936


def rss_kib(field: str) -> int:
    """VmRSS / VmHWM of this process in KiB."""
    with open("/proc/self/status") as f:
        return int(re.search(rf"{field}:\s+(\d+)", f.read()).group(1))


def reset_peak() -> bool:
    """Reset the kernel's peak-RSS counter (Linux >= 4.0); False where not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def build_model(hidden: int, layers: int, vocab: int = VOCAB):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=4,
                      max_position_embeddings=2048, tie_word_embeddings=False,
                      bos_token_id=None, eos_token_id=1, pad_token_id=0)
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).float().train()


def make_items(n: int, vocab: int = VOCAB):
    """RL-shaped items: a prompt of a few hundred tokens, a 64-128 token completion."""
    from ludic_core.batching.saw import SAWItem

    rng = random.Random(0)
    items = []
    for _ in range(n):
        prompt, completion = rng.randint(200, 400), rng.randint(64, 128)
        ids = [rng.randrange(2, vocab) for _ in range(prompt + completion)]
        items.append(SAWItem(ids, [1] * len(ids), [0] * prompt + [1] * completion,
                             weight=rng.uniform(-1.0, 1.0)))
    return items


class FixedSource:
    def __init__(self, items): self.items = items
    def next_batch(self):
        from ludic_core.batching.saw import SAWBatch
        return SAWBatch(items=list(self.items))
    def state_dict(self): return {}
    def load_state_dict(self, state): pass


def new_step(model, items, cfg) -> tuple:
    """Setup for the current `Trainer` (REINFORCE: same math as `old_step`)."""
    from ludic_core.algorithms import make_reinforce
    from ludic_core.training.trainer import Trainer

    trainer = Trainer(model, make_reinforce(), FixedSource(items), cfg)

    def step() -> tuple[float, float]:
        m = trainer.train_step()
        return m["loss"], m["grad_norm"]
    fused = getattr(getattr(trainer, "scorer", None), "fused", False)
    return step, "from hidden states (fused lm_head)" if fused else "chunked, from logits"


def old_step(model, items, cfg) -> tuple:
    """Setup for the old computation: full-vocab fp32 log-softmax at every position."""
    import torch
    from ludic_core.batching.collate import collate_micro_batches

    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
    pad_id = model.config.pad_token_id

    def step() -> tuple[float, float]:
        mbs = collate_micro_batches(items, micro_token_budget=cfg.micro_token_budget, pad_id=pad_id)
        num_tokens = sum(mb.action_tokens for mb in mbs)
        total = 0.0
        for mb in mbs:
            logits = model(input_ids=mb.input_ids, attention_mask=mb.attention_mask).logits
            logp = torch.log_softmax(logits.float(), dim=-1)[:, :-1].gather(
                -1, mb.input_ids[:, 1:, None]).squeeze(-1)
            loss = -(mb.weights[:, None] * logp * mb.action_mask[:, 1:]).sum() / num_tokens
            loss.backward()
            total += float(loss.detach())
        norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm))
        opt.step()
        opt.zero_grad(set_to_none=True)
        return total, norm
    return step, "full-vocab fp32 log_softmax"


def run_variant(args) -> None:
    """Child process: build everything, then measure one step; print one JSON line."""
    import torch
    from ludic_core.config import TrainerConfig

    torch.set_num_threads(args.threads)
    cfg = TrainerConfig(lr=1e-4, micro_token_budget=args.budget, max_seq_len=2048, device="cpu", dtype="float32")
    model, items = build_model(args.hidden, args.layers, args.vocab), make_items(args.items, args.vocab)
    step, path = (new_step if args.variant == "new" else old_step)(model, items, cfg)
    before = rss_kib("VmRSS")
    exact = reset_peak()
    t0 = time.perf_counter()
    loss, grad_norm = step()
    secs = time.perf_counter() - t0
    peak = rss_kib("VmHWM") if exact else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"variant": args.variant, "rss_before_mib": before / 1024, "peak_mib": peak / 1024,
                      "step_mib": (peak - before) / 1024, "loss": loss, "grad_norm": grad_norm,
                      "seconds": secs, "path": path, "method": "VmHWM after clear_refs" if exact else "ru_maxrss"}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=16)
    ap.add_argument("--budget", type=int, default=2048, help="micro_token_budget (padded tokens per micro-batch)")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="torch threads in each child (kept low: shared machine)")
    ap.add_argument("--vocab", type=int, default=VOCAB, help="vocabulary size (the point is a real one)")
    ap.add_argument("--smoke", action="store_true",
                    help="CI: 2 items, budget 1024, vocab 8192; proves the code path, not the memory saving")
    ap.add_argument("--variant", choices=["new", "old"], help=argparse.SUPPRESS)  # set for the children
    args = ap.parse_args()
    if args.smoke:
        args.items, args.budget, args.vocab = 2, 1024, 8192
    if args.variant:
        return run_variant(args)

    results = {}
    for variant in ("old", "new"):  # each in a fresh interpreter
        cmd = [sys.executable, __file__, "--variant", variant] + [
            f"--{k}={getattr(args, k)}" for k in ("items", "budget", "hidden", "layers", "threads", "vocab")]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        results[variant] = json.loads(out.strip().splitlines()[-1])
    old, new = results["old"], results["new"]
    print(f"vocab={args.vocab} hidden={args.hidden} layers={args.layers} fp32, {args.items} items "
          f"(prompt 200-400 + completion 64-128 tokens), micro_token_budget={args.budget}, "
          f"threads={args.threads}; peak = {new['method']}, minus RSS before the step")
    print(f"{'one optimizer step':<34}{'step peak MiB':>14}{'RSS before':>11}{'loss':>13}{'grad norm':>11}{'s':>7}")
    for name, r in (("before: full-vocab log_softmax", old), ("after: Trainer.train_step", new)):
        print(f"{name:<34}{r['step_mib']:>14.0f}{r['rss_before_mib']:>11.0f}{r['loss']:>13.6f}"
              f"{r['grad_norm']:>11.5f}{r['seconds']:>7.1f}")
    print(f"after: Trainer log-probs {new['path']}")
    print(f"ratio (after / before) peak step memory: {new['step_mib'] / old['step_mib']:.2f}x   "
          f"|loss diff| {abs(new['loss'] - old['loss']):.1e}   "
          f"|grad-norm diff| {abs(new['grad_norm'] - old['grad_norm']):.1e}")


if __name__ == "__main__":
    main()
