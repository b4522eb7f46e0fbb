"""Does it learn on this CPU? Tic-tac-toe from a model that knows nothing.

Chain: rejection sampling from a scripted minimax teacher (through the same
agent stack, so the kept games carry real token traces) -> SFT -> GRPO against
a random opponent. Prints legal-move and win+draw rates as X and as O (greedy,
`--eval-games` each) before SFT, after SFT and after GRPO, with each stage's
wall time. Target: X win+draw >= 0.9 within 10 minutes in total.

    .venv/bin/python benchmarks/learning_tic_tac_toe.py [--out runs/learn]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from ludic_core.algorithms import make_grpo, make_sft
from ludic_core.batching.sources import OfflineBatchSource, RolloutBatchSource
from ludic_core.config import TrainerConfig
from ludic_core.inference import LocalChatClient
from ludic_core.logging import ConsoleLogger, JsonlLogger
from ludic_core.models import build_tiny_model, load_model_and_tokenizer
from ludic_core.publish import InProcessPublisher
from ludic_core.recipes.tic_tac_toe import (
    RECIPE,
    evaluate_tic_tac_toe,
    teacher_rollouts,
    tic_tac_toe_engine,
    tic_tac_toe_requests,
)
from ludic_core.rejection import keep_episodes
from ludic_core.rollout import GRPORequestStrategy
from ludic_core.training.trainer import Trainer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/learn")
    ap.add_argument("--teacher-games", type=int, default=4096)
    ap.add_argument("--sft-steps", type=int, default=400)
    ap.add_argument("--sft-lr", type=float, default=2e-3)
    ap.add_argument("--rl-steps", type=int, default=30)
    ap.add_argument("--rl-requests", type=int, default=8, help="requests per RL step (x group size)")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--rl-lr", type=float, default=1e-4)
    ap.add_argument("--rl-temperature", type=float, default=0.7)
    ap.add_argument("--eval-games", type=int, default=200)
    args = ap.parse_args()
    out = Path(args.out)
    rows: list[tuple[str, dict, float]] = []
    t_all = time.perf_counter()

    model_dir = build_tiny_model(out / "models" / "tiny-1m", "tiny-1m", seed=0)
    policy, tok = load_model_and_tokenizer(model_dir)
    client = LocalChatClient(*load_model_and_tokenizer(model_dir))
    publisher = InProcessPublisher(client)

    t = time.perf_counter()
    rows.append(("before SFT", evaluate_tic_tac_toe(client, games_per_mark=args.eval_games), time.perf_counter() - t))

    t = time.perf_counter()
    kept, rs = keep_episodes(teacher_rollouts(tok, games=args.teacher_games, seed=1), RECIPE.keep)
    items = make_sft().prepare(kept).items
    sft_cfg = TrainerConfig(lr=args.sft_lr, warmup_steps=10, schedule="cosine", total_steps=args.sft_steps,
                            micro_token_budget=16384, max_seq_len=512)
    sft = Trainer(policy, make_sft(), OfflineBatchSource(items, batch_size=64, seed=0), sft_cfg,
                  tokenizer=tok, publisher=publisher,
                  loggers=[ConsoleLogger(args.sft_steps, ("loss",), "SFT"), JsonlLogger(out / "sft.jsonl")])
    sft.train(args.sft_steps)
    sft.close()
    print(f"rejection sampling kept {int(rs['kept'])}/{int(rs['sampled'])} teacher games -> {len(items)} SFT items")
    sft_secs = time.perf_counter() - t
    rows.append(("after SFT", evaluate_tic_tac_toe(client, games_per_mark=args.eval_games), sft_secs))

    t = time.perf_counter()
    grpo = make_grpo(group_size=args.group_size)
    source = RolloutBatchSource(
        tic_tac_toe_engine(client),
        lambda i: tic_tac_toe_requests(args.rl_requests, seed=1_000 + i * args.rl_requests,
                                       temperature=args.rl_temperature),
        grpo, max_steps=9, strategy=GRPORequestStrategy(args.group_size, seed=0), max_seq_len=512,
    )
    rl_cfg = TrainerConfig(lr=args.rl_lr, micro_token_budget=16384, max_seq_len=512, sync_every_steps=1)
    rl = Trainer(policy, grpo, source, rl_cfg, tokenizer=tok, publisher=publisher,
                 loggers=[ConsoleLogger(args.rl_steps, ("loss", "reward_mean"), "GRPO"),
                          JsonlLogger(out / "grpo.jsonl")])
    rl.train(args.rl_steps)
    rl.close()
    rows.append(("after GRPO", evaluate_tic_tac_toe(client, games_per_mark=args.eval_games),
                 time.perf_counter() - t))

    total = time.perf_counter() - t_all
    print(f"\n{'stage':<12} {'X legal':>8} {'X win+draw':>11} {'O legal':>8} {'O win+draw':>11} {'stage s':>8}")
    for name, m, secs in rows:
        print(f"{name:<12} {m['X/legal_move_rate']:>8.3f} {m['X/win_draw_rate']:>11.3f} "
              f"{m['O/legal_move_rate']:>8.3f} {m['O/win_draw_rate']:>11.3f} {secs:>8.1f}")
    print(f"total wall time {total:.1f} s ({args.eval_games} greedy games per mark per evaluation)")
    (out / "learning.json").write_text(json.dumps({"rows": [[n, m, s] for n, m, s in rows], "total_s": total}))


if __name__ == "__main__":
    main()
