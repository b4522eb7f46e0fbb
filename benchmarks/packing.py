"""Trainer step time with packed micro-batches vs padded ones, same items, same model.

Workloads: `dialogs`, multi-turn tic-tac-toe turns (the full dialog in each
prompt, as `trainer_overhead.py` builds them: lengths cluster, so sorted
padding already wastes little and the trainer keeps it), and `mixed`, lengths
drawn uniformly from 16 to 400 tokens (mixed prompts and completions). Padded: length-sorted cutting
(`collate_micro_batches`). Packed: items end to end in rows
(`pack_micro_batches`), document-masked attention via position ids. Steps
alternate between the two trainers to share machine noise; the gradients are
the same (tests/training/test_trainer_packing.py), so only time differs.

    .venv/bin/python benchmarks/packing.py [--workload mixed] [--preset tiny-10m] [--budgets 4096 16384]
    .venv/bin/python benchmarks/packing.py --smoke   # CI: tiny-1m, 4 items, one budget, one timed step
"""

from __future__ import annotations

from ludic_core import openmp

openmp.configure()  # first: OpenMP's spin-wait, set before torch loads (ludic_core/openmp.py)

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
from trainer_overhead import FixedSource, full_dialog_items

from ludic_core.algorithms import make_reinforce
from ludic_core.batching.saw import SAWItem
from ludic_core.config import TrainerConfig
from ludic_core.models import build_tiny_model, load_model_and_tokenizer
from ludic_core.training.trainer import Trainer


def mixed_items(n: int) -> list[SAWItem]:
    """Random token ids, lengths uniform in [16, 400], the last quarter of each an action."""
    g = torch.Generator().manual_seed(0)
    out = []
    for length in torch.randint(16, 401, (n,), generator=g).tolist():
        acting = max(1, length // 4)
        out.append(SAWItem(torch.randint(4, 200, (length,), generator=g).tolist(), [1] * length,
                           [0] * (length - acting) + [1] * acting, 1.0, {}))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="tiny-10m")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=64, help="items per optimizer step")
    ap.add_argument("--budgets", type=int, nargs="+", default=[4096, 16384])
    ap.add_argument("--workload", choices=["dialogs", "mixed"], default="mixed")
    ap.add_argument("--smoke", action="store_true", help="CI: tiny-1m, 4 items, budget 1024, one timed step")
    args = ap.parse_args()
    if args.smoke:
        args.preset, args.steps, args.batch, args.budgets = "tiny-1m", 1, 4, [1024]
    model_dir = build_tiny_model(Path(tempfile.gettempdir()) / f"ludic-bench-{args.preset}", args.preset)
    _, tok = load_model_and_tokenizer(model_dir)
    items = full_dialog_items(tok, games=48)[: args.batch] if args.workload == "dialogs" else mixed_items(args.batch)
    lengths = sorted(len(i) for i in items)
    print(f"{args.preset}, {args.workload}, {len(items)} items, lengths {lengths[0]}..{lengths[-1]}, "
          f"{sum(lengths)} tokens, {args.steps} timed steps each")
    print(f"{'budget':>7} {'layout':<8}{'micro-batches':>14}{'padding':>9}{'median step s':>15}{'tokens/s':>10}")
    for budget in args.budgets:
        trainers = {}
        for packing in (False, True):
            cfg = TrainerConfig(lr=1e-4, micro_token_budget=budget, max_seq_len=4096, packing=packing)
            trainers[packing] = Trainer(load_model_and_tokenizer(model_dir)[0], make_reinforce(),
                                        FixedSource(items), cfg, tokenizer=tok)
        times: dict[bool, list[float]] = {False: [], True: []}
        last = {}
        for packing, tr in trainers.items():
            tr.train_step()  # warm-up (and the packed trainer's one-off check)
        for _ in range(args.steps):
            for packing, tr in trainers.items():
                t = time.perf_counter()
                last[packing] = tr.train_step()
                times[packing].append(time.perf_counter() - t)
        for packing in (False, True):
            m, s = last[packing], statistics.median(times[packing])
            print(f"{budget:>7} {'packed' if packing else 'padded':<8}{m['micro_batches']:>14.0f}"
                  f"{m['padding_waste'] * 100:>8.1f}%{s:>15.3f}{sum(lengths) / s:>10.0f}")
        ratio = statistics.median(times[True]) / statistics.median(times[False])
        print(f"ratio (packed / padded) step time, budget {budget}: {ratio:.3f}x")


if __name__ == "__main__":
    main()
