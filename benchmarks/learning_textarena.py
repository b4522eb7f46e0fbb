"""Does it learn TextArena's TicTacToe? Next to our own tic-tac-toe, same budget.

For each recipe (`tic_tac_toe`, ours; `textarena_tic_tac_toe`,
`ludic_core.recipes.textarena`) the demo chain's generic flows run with the same
budget: rejection sampling from the recipe's minimax teacher -> SFT of a fresh
tiny model -> (optionally) GRPO against a random opponent, and a greedy evaluation
against that opponent (seats alternate by seed) before SFT, after SFT and after RL. It
prints the win+draw rate per seat and the stage wall times. Both recipes train
on the game's outcome (our recipe's move shaping is left out, so the rewards
compare), with max_seq_len 1024 (TextArena's first observation alone is ~650
tokens).

    .venv/bin/python benchmarks/learning_textarena.py [--sft-steps 40] [--rl-steps 0] [--out runs/learn-textarena]
    .venv/bin/python benchmarks/learning_textarena.py --smoke   # CI: every stage once (RL too), a few episodes

The defaults are what a 2-core CPU shared with other jobs could afford (docs/results.md): an
SFT step on TextArena's ~500-token items took 23 s there at batch 64. The last line is the ratio of
TextArena's first-seat win+draw to ours after the last stage (n/a where ours is 0 or one recipe ran).
"""

from __future__ import annotations

from ludic_core import openmp

openmp.configure()  # first: OpenMP's spin-wait, set before torch loads (ludic_core/openmp.py)

import argparse
import json
import tempfile
import time
from pathlib import Path

RECIPES = ("tic_tac_toe", "textarena_tic_tac_toe")
#: (label, metric key) per recipe: the seat that moves first, then the other, then bad moves
COLUMNS = {
    "tic_tac_toe": [("first win+draw", "X/win_draw_rate"), ("second win+draw", "O/win_draw_rate"),
                    ("bad move rate", None)],
    "textarena_tic_tac_toe": [("first win+draw", "P0/win_draw_rate"), ("second win+draw", "P1/win_draw_rate"),
                              ("bad move rate", "invalid_move_rate")],
}


#: --smoke: every stage of both chains, GRPO included, on a handful of episodes and steps
SMOKE = {"teacher_episodes": 4, "sft_steps": 1, "sft_batch": 2, "rl_steps": 1, "rl_requests": 1, "group_size": 2,
         "eval_episodes": 2}


def score_ratio(rows: list[dict]) -> str:
    """TextArena's first-seat win+draw over ours, after the last stage each ran."""
    last = {row["recipe"]: row["first win+draw"] for row in rows}  # rows run in stage order
    if set(last) != set(RECIPES):
        return "ratio (textarena_tic_tac_toe / tic_tac_toe) first win+draw: n/a, one recipe ran"
    ours, theirs = last["tic_tac_toe"], last["textarena_tic_tac_toe"]
    return ("ratio (textarena_tic_tac_toe / tic_tac_toe) first win+draw, last stage: "
            + (f"{theirs / ours:.2f}x" if ours > 0 else "n/a, ours scored 0"))


def _recipe(name: str):
    from ludic_core.recipes import textarena, tic_tac_toe

    return {"tic_tac_toe": tic_tac_toe.RECIPE, "textarena_tic_tac_toe": textarena.RECIPE}[name]


def _evaluate(model_dir: str, recipe, episodes: int) -> dict[str, float]:
    from ludic_core.eval import evaluate_policy
    from ludic_core.inference import LocalChatClient

    seeds = range(recipe.eval_seed, recipe.eval_seed + episodes)
    m = evaluate_policy(LocalChatClient(model_dir), recipe.eval_env, recipe.agent, seeds=seeds, temperature=0.0)
    if "X/legal_move_rate" in m:  # ours reports legal moves; turn them into the bad-move rate
        m["bad_move_rate"] = 1.0 - m["legal_move_rate"]
    return m


def _row(stage: str, name: str, m: dict[str, float], seconds: float) -> dict:
    cols = {label: round(m.get(key or "bad_move_rate", float("nan")), 3) for label, key in COLUMNS[name]}
    return {"recipe": name, "stage": stage, **cols, "seconds": round(seconds, 1)}


def run(name: str, args: argparse.Namespace) -> list[dict]:
    """The chain on one recipe (each stage's output is reused by a rerun)."""
    from flows.rejection_sampling import RejectionSamplingConfig, rejection_sampling
    from flows.rl_train import RLTrainConfig, rl_train
    from flows.sft import SupervisedFinetuneConfig, sft
    from ludic_core.compose.policy import ScriptedPolicy
    from ludic_core.config import RL_TRAINER, SFT_TRAINER, GRPOConfig
    from ludic_core.recipes.textarena import MAX_SEQ_LEN
    from tasks.models import build_model

    recipe, out = _recipe(name), f"{args.out}/{name}"
    model = build_model(f"{out}/models/tiny-1m", "tiny-1m", args.seed)
    t = time.perf_counter()
    rows = [_row("before SFT", name, _evaluate(model, recipe, args.eval_episodes), time.perf_counter() - t)]
    t = time.perf_counter()
    dataset = rejection_sampling(RejectionSamplingConfig(
        env=recipe.env, agent=recipe.agent, student_path=model, prompts=args.teacher_episodes,
        teacher=ScriptedPolicy(policy=recipe.teacher, kwargs=recipe.teacher_kwargs), keep=recipe.keep,
        out_dir=f"{out}/rejection"))
    sft_model = sft(SupervisedFinetuneConfig(
        model_path=model, dataset_path=dataset, out_dir=f"{out}/sft", steps=args.sft_steps,
        steps_per_stage=args.sft_steps, batch_size=args.sft_batch, trainer=SFT_TRAINER.model_copy(
            update={"total_steps": args.sft_steps, "max_seq_len": MAX_SEQ_LEN, "seed": args.seed})))
    rows.append(_row("after SFT", name, _evaluate(sft_model, recipe, args.eval_episodes), time.perf_counter() - t))
    if not args.rl_steps:
        return rows
    t = time.perf_counter()
    agent = recipe.agent.model_copy(update={"sampling": recipe.agent.sampling.model_copy(
        update={"temperature": recipe.rl_temperature})})
    rl_model = rl_train(RLTrainConfig(
        model_path=sft_model, out_dir=f"{out}/rl", env=recipe.env, agent=agent,
        algorithm=GRPOConfig(group_size=args.group_size), requests_per_step=args.rl_requests, steps=args.rl_steps,
        steps_per_stage=args.rl_steps, eval_episodes=0,
        trainer=RL_TRAINER.model_copy(update={"lr": recipe.rl_lr, "max_seq_len": MAX_SEQ_LEN, "seed": args.seed})))
    rows.append(_row("after RL", name, _evaluate(rl_model, recipe, args.eval_episodes), time.perf_counter() - t))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipes", nargs="+", choices=RECIPES, default=list(RECIPES))
    ap.add_argument("--teacher-episodes", type=int, default=512)
    ap.add_argument("--sft-steps", type=int, default=40)
    ap.add_argument("--sft-batch", type=int, default=32, help="examples per SFT step")
    ap.add_argument("--rl-steps", type=int, default=0, help="GRPO steps after SFT (0 = none)")
    ap.add_argument("--rl-requests", type=int, default=4, help="prompts (env seeds) per GRPO step")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--eval-episodes", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="the run's directory (default runs/learn-textarena; with --smoke a temporary one)")
    ap.add_argument("--smoke", action="store_true",
                    help=f"CI: {', '.join(f'{k} {v}' for k, v in SMOKE.items())}; proves both chains run")
    args = ap.parse_args()
    if args.smoke:
        vars(args).update(SMOKE)
    with tempfile.TemporaryDirectory(prefix="ludic-learning-smoke-") as tmp:
        # a smoke never writes into (or reuses the stages of) a real run's directory
        args.out = args.out or (tmp if args.smoke else "runs/learn-textarena")
        rows: list[dict] = []
        start = time.perf_counter()
        for name in args.recipes:
            rows += run(name, args)
        cols = list(rows[0])
        print("\n" + " | ".join(cols))
        for row in rows:
            print(" | ".join(str(row[c]) for c in cols))
        print(f"total wall time {time.perf_counter() - start:.1f} s ({args.eval_episodes} greedy games per evaluation)")
        print(score_ratio(rows))
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "learning.json").write_text(json.dumps({"rows": rows, "args": vars(args)}, indent=1))


if __name__ == "__main__":
    main()
