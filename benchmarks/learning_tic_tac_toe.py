"""Does it learn on this CPU? Tic-tac-toe from a model that knows nothing.

Runs the demo chain itself (`flows.demo`: rejection sampling from the minimax
teacher -> SFT -> GRPO against a random opponent), so it prints the numbers
`ludic demo` prints for the same settings: legal-move and win+draw rates as X
and as O (greedy) before SFT, after SFT and after GRPO, with each stage's wall
time. Targets (issue 11): X win+draw >= 0.95 with X losses <= 3%, O win+draw
>= 0.75, in under 10 minutes.

    .venv/bin/python benchmarks/learning_tic_tac_toe.py [--out runs/learn]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def main(recipe: str = "tic_tac_toe", out: str = "runs/learn", doc: str = __doc__) -> None:
    """The demo chain on `recipe`, timed, its table printed (learning_arithmetic.py reuses this)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--out", default=out)
    ap.add_argument("--sft-steps", type=int)
    ap.add_argument("--rl-steps", type=int)
    ap.add_argument("--rl-lr", type=float)
    ap.add_argument("--seed", type=int)
    args = ap.parse_args()

    from flows.demo import DemoConfig, demo

    overrides = {"sft_steps": args.sft_steps, "rl_steps": args.rl_steps, "rl_lr": args.rl_lr, "seed": args.seed}
    cfg = DemoConfig(recipe=recipe, run_dir=args.out, progress_bar=False,
                     **{k: v for k, v in overrides.items() if v is not None})
    t = time.perf_counter()
    result = demo(cfg)
    total = time.perf_counter() - t
    cols = [c for c in result["rows"][0] if c != "stage"]
    print(f"\n{'stage':<12}" + "".join(f"{c:>12}" for c in cols))
    for row in result["rows"]:
        print(f"{row['stage']:<12}" + "".join(f"{row[c]:>12}" for c in cols))
    print(f"total wall time {total:.1f} s ({result['eval_episodes']} greedy episodes per evaluation)")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "learning.json").write_text(json.dumps({**result, "total_s": total, "config": cfg.model_dump()},
                                                             indent=1))


if __name__ == "__main__":
    main()
