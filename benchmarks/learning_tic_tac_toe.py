"""Does it learn on this CPU? Tic-tac-toe from a model that knows nothing.

Runs the demo chain itself (`flows.demo`: rejection sampling from the recipe's
teacher -> SFT -> GRPO against a random opponent), so it prints the numbers
`ludic demo` prints for the same settings: legal-move and win+draw rates as X
and as O (greedy) before SFT, after SFT and after GRPO, with each stage's wall
time. Targets (issue 11, set with the minimax teacher): X win+draw >= 0.95 with
X losses <= 3%, O win+draw >= 0.75, in under 10 minutes (today's demo: X 0.975-0.995
after RL, seeds 0-2; docs/results.md). `--out` is the demo's run dir: a second run
there with other settings is refused rather than reusing the first one's stages.

    .venv/bin/python benchmarks/learning_tic_tac_toe.py [--out runs/learn]
    .venv/bin/python benchmarks/learning_tic_tac_toe.py --smoke   # CI: every stage once, a few episodes

The last line is the ratio of the student after GRPO to the teacher on the recipe's score
(win+draw as X and O; arithmetic: accuracy).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

#: --smoke: every stage of the chain runs, on a handful of episodes and steps (seconds, not minutes)
SMOKE = {"teacher_episodes": 8, "sft_steps": 1, "rl_steps": 1, "group_size": 2, "eval_episodes": 2}


def score_ratio(rows: list[dict]) -> str:
    """The student after RL over the teacher, on the win+draw columns (summed), else the first column."""
    cols = [c for c in rows[0] if c not in ("stage", "seconds")]
    cols = [c for c in cols if "win+draw" in c] or cols[:1]
    by = {row["stage"]: sum(row[c] for c in cols) for row in rows}
    value = f"{by['after RL'] / by['teacher']:.2f}x" if by["teacher"] > 0 else "n/a, the teacher scored 0"
    return f"ratio (after RL / teacher) {' + '.join(cols)}: {value}"


def main(recipe: str = "tic_tac_toe", out: str = "runs/learn", doc: str = __doc__) -> None:
    """The demo chain on `recipe`, timed, its table printed (learning_arithmetic.py reuses this)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--out", help=f"the run's directory (default {out}; with --smoke a temporary one)")
    ap.add_argument("--sft-steps", type=int)
    ap.add_argument("--rl-steps", type=int)
    ap.add_argument("--rl-lr", type=float)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--smoke", action="store_true",
                    help=f"CI: {', '.join(f'{k} {v}' for k, v in SMOKE.items())}; proves the chain runs")
    args = ap.parse_args()

    from flows.demo import DemoConfig, demo

    overrides = {"sft_steps": args.sft_steps, "rl_steps": args.rl_steps, "rl_lr": args.rl_lr, "seed": args.seed}
    if args.smoke:
        overrides.update(SMOKE)
    with tempfile.TemporaryDirectory(prefix="ludic-learning-smoke-") as tmp:
        # a smoke never writes into (or reuses the stages of) a real run's directory
        args.out = args.out or (tmp if args.smoke else out)
        cfg = DemoConfig(recipe=recipe, run_dir=args.out, progress_bar=False,
                         **{k: v for k, v in overrides.items() if v is not None})
        t = time.perf_counter()
        result = demo(cfg)
        total = time.perf_counter() - t
        report(result, total, cfg, args.out)


def report(result: dict, total: float, cfg, out: str) -> None:
    cols = [c for c in result["rows"][0] if c != "stage"]
    print(f"\n{'stage':<12}" + "".join(f"{c:>12}" for c in cols))
    for row in result["rows"]:
        print(f"{row['stage']:<12}" + "".join(f"{row[c]:>12}" for c in cols))
    print(f"total wall time {total:.1f} s ({result['eval_episodes']} greedy episodes per evaluation)")
    print(score_ratio(result["rows"]))
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / "learning.json").write_text(json.dumps({**result, "total_s": total, "config": cfg.model_dump()},
                                                        indent=1))


if __name__ == "__main__":
    main()
