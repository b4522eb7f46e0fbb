"""Learning speed: wall time to a target reward, ludic vs TRL's GRPOTrainer, side by side.

The task is `grpo_step.py`'s one-move tic-tac-toe (a board, one reply of at most 24 tokens,
the reward `_tic_tac_toe_policy.recipe()` pins: -1 for a cut-off or unparsable reply, -2 for
an illegal cell (-1 before 2026-11-30), else -0.5 x the move's minimax regret), from the same warm-start checkpoint (`_tic_tac_toe_policy.py`),
with the same prompts in the same order (8 boards x 8 completions a generated batch, T=0.7),
the same reward function and the same evaluation: the expected reward at the sampling
temperature (0.7) on held-out boards (64 seeds from 50,000: X's empty board and O's boards after a random opening),
computed exactly from the model being trained (`expected_score`); its time is off both clocks.
The ceiling is 0 (an optimal legal move on every board); the target is `--fraction` (0.9)
of the way from the warm start's score to it.

Each side trains until its evaluation (every `--eval-every` optimiser steps) reaches the
target, or `--max-steps`. Printed per contestant: training seconds to the target (the sum of
its step times), optimiser steps, rollouts consumed (generated completions), and the ratio
of ludic's time to the best TRL setting's. The TRL settings tried are those of `--trl`
(learning rate x num_iterations, TRL's reuse of each generated batch); ludic's of `--ludic`
(learning rate x mini-batches x epochs). Nothing is asserted about time; the goal printed is
ludic / TRL <= 0.33x.

    .venv/bin/python benchmarks/time_to_target.py
    .venv/bin/python benchmarks/time_to_target.py --trl 3e-5:1 1e-4:1 1e-4:2 3e-4:1 --ludic 1e-4:1x1 1e-4:2x2
    .venv/bin/python benchmarks/time_to_target.py --smoke        # CI: a few steps, prints the ratio line
"""

from __future__ import annotations

from ludic_core import openmp

openmp.configure()  # first: OpenMP's spin-wait, set before torch loads (ludic_core/openmp.py)

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _tic_tac_toe_policy import DEFAULT_SFT_STEPS, policy_dir  # noqa: E402
from grpo_step import GROUP, PROMPTS, TEMPERATURE, ludic_trainer, make_reward, one_move_task, trl_train  # noqa: E402

EVAL_SEEDS = range(50_000, 50_064)
GOAL = 0.33


def expected_score(model, tok, boards: dict[int, str], reward_fn, temperature: float = TEMPERATURE) -> float:
    """The policy's expected reward at the sampling temperature on the held-out boards, exactly:
    for each distinct board the probability of each well-formed reply "<move>k</move>"
    (teacher-forced, one batch of 9, logits / T) times its reward, and every other reply (the rest
    of the mass) at -1, the reward of a reply that does not parse or is cut off. Smooth and
    deterministic, unlike a greedy score over the task's 10 distinct boards. At the temperature
    both trainers sample at: from the warm start, malformed replies hold 17% of the mass at T=1
    (-0.171 of its score of -0.314) but 1.6% at 0.7, a tail that sampling at 0.7 almost never
    draws and so barely moves: a T=1 score hid what the trainers learn."""
    model.eval()
    per_board: dict[str, list[tuple[float, list[int], str]]] = {}
    with torch.no_grad():
        for text in set(boards.values()):
            prompt = list(tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                                  tokenize=True, return_dict=True)["input_ids"])
            replies = [f"<move>{k}</move>" for k in range(1, 10)]
            completions = [list(tok.encode(r, add_special_tokens=False)) + [tok.eos_token_id] for r in replies]
            width = max(len(c) for c in completions)
            ids = torch.tensor([prompt + c + [tok.eos_token_id] * (width - len(c)) for c in completions])
            logp = torch.log_softmax(model(ids).logits.float() / temperature, -1)
            probs = []
            for row, c in enumerate(completions):
                pos = torch.arange(len(prompt) - 1, len(prompt) - 1 + len(c))
                probs.append(float(logp[row, pos, torch.tensor(c)].sum().exp()))
            per_board[text] = [(p, c, r) for p, c, r in zip(probs, completions, replies)]
    model.train()
    total = 0.0
    for seed, text in boards.items():
        mass = sum(p for p, _, _ in per_board[text])
        total += sum(p * reward_fn(r, c, seed) for p, c, r in per_board[text]) + (1.0 - mass) * -1.0
    return total / len(boards)


def parse_setting(text: str, ludic: bool) -> tuple[float, tuple[int, int]]:
    """'LR:MxE' (ludic) or 'LR:N' (TRL) -> (lr, (mini-batches, epochs)) / (lr, (num_iterations, 1))."""
    lr, _, reuse = text.partition(":")
    if ludic:
        m, _, e = (reuse or "1x1").partition("x")
        return float(lr), (int(m), int(e or 1))
    return float(lr), (int(reuse or 1), 1)


def run_ludic(model_dir, seeds, lr, reuse, target, score, max_steps, eval_every) -> dict:
    trainer, source, client, tok = ludic_trainer(model_dir, seeds, lr=lr, reuse=reuse)
    clock, curve = 0.0, []
    while trainer.updates < max_steps:  # optimiser steps, as TRL counts them
        before = trainer.updates
        t0 = time.perf_counter()
        trainer.train_step()
        clock += time.perf_counter() - t0
        if trainer.updates // eval_every > before // eval_every:
            curve.append((trainer.updates, score(trainer.model)))
            if curve[-1][1] >= target:
                break
    reached = bool(curve) and curve[-1][1] >= target
    return {"seconds": clock, "steps": trainer.updates, "rollouts": trainer.step * PROMPTS * GROUP,
            "reached": reached, "curve": curve}


def run_trl(model_dir, rows, reward_fn, lr, iterations, target, score, max_steps, eval_every) -> dict:
    curve: list[tuple[int, float]] = []

    def on_step(model) -> bool:
        curve.append((len(curve) + 1, float("nan")))
        if len(curve) % eval_every:
            return False
        curve[-1] = (len(curve), score(model))
        return curve[-1][1] >= target

    clock = trl_train(model_dir, rows, max_steps, reward_fn, on_step, lr=lr, num_iterations=iterations)
    if clock is None:
        return {}
    done = [c for c in curve if c[1] == c[1]]
    steps = len(clock.steps)
    generations = -(-steps // iterations)  # TRL generates once per num_iterations optimiser steps
    return {"seconds": sum(clock.steps), "steps": steps, "rollouts": generations * PROMPTS * GROUP,
            "reached": bool(done) and done[-1][1] >= target, "curve": done}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ludic", nargs="+", default=["1e-4:2x2"], help="LR:MINIBATCHESxEPOCHS per ludic run")
    ap.add_argument("--trl", nargs="+", default=["1e-4:1", "1e-4:2"], help="LR:NUM_ITERATIONS per TRL run")
    ap.add_argument("--fraction", type=float, default=0.9, help="target: this far from the start to the ceiling")
    ap.add_argument("--max-steps", type=int, default=120, help="optimiser steps at most per run")
    ap.add_argument("--eval-every", type=int, default=2, help="optimiser steps between evaluations")
    ap.add_argument("--sft-steps", type=int, default=DEFAULT_SFT_STEPS, help="warm-start SFT steps (cached)")
    ap.add_argument("--smoke", action="store_true", help="a few steps of each side (CI): runs, prints the ratio")
    args = ap.parse_args()
    if args.smoke:
        args.max_steps, args.eval_every, args.ludic, args.trl = 2, 1, args.ludic[:1], args.trl[:1]

    model_dir = policy_dir("tiny-1m", args.sft_steps)
    make_env, env_kwargs, seeds, obs, parser = one_move_task(args.max_steps + 1)
    from ludic_core.agents.agent import Agent
    from ludic_core.models import load_model_and_tokenizer

    start_model, tok = load_model_and_tokenizer(model_dir, dtype="float32")
    reward_fn = make_reward(make_env, env_kwargs, parser, {tok.eos_token_id}, Agent(None).truncation_penalty)
    boards = {s: make_env(**env_kwargs).env_reset(seed=s)[0] for s in EVAL_SEEDS}

    def score(model) -> float:
        return expected_score(model, tok, boards, reward_fn)

    start = score(start_model)
    target = start + args.fraction * (0.0 - start)
    print(f"== time to target, one-move tic-tac-toe ({PROMPTS} boards x {GROUP} completions a batch, T=0.7), "
          f"tiny-1m warm start {model_dir}")
    print(f"expected reward (T={TEMPERATURE}) on {len(boards)} held-out boards: start {start:+.3f}, ceiling 0, "
          f"target {target:+.3f} "
          f"({args.fraction:.0%} of the way); evaluated every {args.eval_every} steps, off the clock")
    rows = [{"prompt": [{"role": "user", "content": obs[s]}], "seed": s} for step in seeds for s in step]
    results = []
    for text in args.ludic:
        lr, reuse = parse_setting(text, ludic=True)
        r = run_ludic(model_dir, seeds, lr, reuse, target, score, args.max_steps, args.eval_every)
        results.append((f"ludic lr {lr:g}, reuse {reuse[0]}x{reuse[1]}", "ludic", r))
    for text in args.trl:
        lr, (iterations, _) = parse_setting(text, ludic=False)
        r = run_trl(model_dir, rows, reward_fn, lr, iterations, target, score, args.max_steps, args.eval_every)
        if r:
            results.append((f"TRL lr {lr:g}, num_iterations {iterations}", "trl", r))
    print(f"{'contestant':<36}{'reached':>8}{'seconds':>9}{'steps':>7}{'rollouts':>10}  curve (step: score)")
    for name, _, r in results:
        curve = " ".join(f"{s}:{v:+.2f}" for s, v in r["curve"][-6:])
        print(f"{name:<36}{'yes' if r['reached'] else 'no':>8}{r['seconds']:>9.1f}{r['steps']:>7}{r['rollouts']:>10}"
              f"  {curve}")
    best = {side: min((r for _, s, r in results if s == side and r["reached"]), key=lambda r: r["seconds"],
                      default=None) for side in ("ludic", "trl")}
    if best["ludic"] and best["trl"]:
        ratio = best["ludic"]["seconds"] / best["trl"]["seconds"]
        print(f"ratio (ludic seconds to target / TRL's, best setting each): {ratio:.2f}x   goal <= {GOAL}x: "
              f"{'met' if ratio <= GOAL else 'NOT met'}   rollouts: {best['ludic']['rollouts']} vs "
              f"{best['trl']['rollouts']}")
    else:
        print("ratio (ludic seconds to target / TRL's): n/a, a side did not reach the target "
              f"(ludic {'yes' if best['ludic'] else 'no'}, TRL {'yes' if best['trl'] else 'no'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
