"""Synchronous vs pipelined RL on the same budget: `rl_train` then `pipeline_rl`.

Both start from the same SFT checkpoint with the same algorithm (GRPO, group
8), rollout settings and learning rate, for the same number of steps. The
synchronous run goes first; the pipeline then trains the same number of items
per step (the synchronous run's mean), with `max_lag` 1 and `--actors` rounds
in flight (1: on 2 shared cores a second actor only produces stale items).
Printed: wall time of each and their ratio, the pipeline's trainer idle
fraction, items trained per second, stale drops, and X/O win+draw after the
same number of steps (greedy).

    .venv/bin/python benchmarks/pipeline_rl.py --start MODEL_DIR [--steps 20] [--out runs/bench_pipeline]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--start", default="runs/demo/tic_tac_toe/sft/checkpoints/step_00000400/model",
                    help="SFT model dir (`ludic demo` makes this one)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--actors", type=int, default=1)
    ap.add_argument("--out", default="runs/bench_pipeline")
    args = ap.parse_args()

    from flows.demo import rl_agent
    from flows.pipeline_rl import PipelineRLConfig, pipeline_rl
    from flows.rl_train import RLTrainConfig, rl_train
    from ludic_core.config import GRPOConfig, TrainerConfig
    from ludic_core.eval import evaluate_policy
    from ludic_core.inference import LocalChatClient
    from ludic_core.recipes.recipe import get_recipe

    recipe = get_recipe("tic_tac_toe")
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    trainer = TrainerConfig(lr=1e-4, micro_token_budget=16384, max_seq_len=512)
    common = dict(model_path=args.start, env=recipe.env, agent=rl_agent(recipe),
                  algorithm=GRPOConfig(group_size=8), steps=args.steps, steps_per_stage=args.steps // 2,
                  trainer=trainer, eval_episodes=0)

    t = time.perf_counter()
    sync_model = rl_train(RLTrainConfig(out_dir=str(out / "sync"), requests_per_step=8, **common))
    sync_s = time.perf_counter() - t
    rows = [json.loads(line) for line in (out / "sync" / "metrics.jsonl").read_text().splitlines() if line.strip()]
    items_per_step = round(statistics.fmean(r["items"] for r in rows))

    t = time.perf_counter()
    pipe = pipeline_rl(PipelineRLConfig(out_dir=str(out / "pipeline"), requests_per_round=8, actors=args.actors,
                                        items_per_step=items_per_step, max_lag=1, **common))
    pipe_s = time.perf_counter() - t

    seeds = list(range(recipe.eval_seed, recipe.eval_seed + recipe.eval_episodes))
    evals = {name: evaluate_policy(LocalChatClient(path), recipe.eval_env, recipe.agent, seeds=seeds, temperature=0.0)
             for name, path in (("sync", sync_model), ("pipeline", pipe["model_path"]))}
    print(f"\n{args.steps} steps of GRPO from {args.start}; {items_per_step} items per step")
    print(f"{'run':<10} {'wall s':>8} {'items/s':>8} {'idle':>6} {'stale':>6} {'X w+d':>6} {'O w+d':>6}")
    sync_items = sum(r["items"] for r in rows)
    print(f"{'rl_train':<10} {sync_s:>8.1f} {sync_items / sync_s:>8.2f} {'-':>6} {'-':>6} "
          f"{evals['sync']['X/win_draw_rate']:>6.3f} {evals['sync']['O/win_draw_rate']:>6.3f}")
    print(f"{'pipeline':<10} {pipe_s:>8.1f} {pipe['items_trained'] / pipe_s:>8.2f} {pipe['trainer_idle_frac']:>6.2f} "
          f"{pipe['stale_dropped']:>6} {evals['pipeline']['X/win_draw_rate']:>6.3f} "
          f"{evals['pipeline']['O/win_draw_rate']:>6.3f}")
    print(f"pipeline / synchronous wall time: {pipe_s / sync_s:.2f} (target <= 0.8); lag histogram "
          f"{pipe['lag_histogram']}; produced {pipe['items_produced']}, left in stream {pipe['left_in_stream']}")
    (out / "pipeline_rl.json").write_text(json.dumps({"sync_s": sync_s, "pipeline_s": pipe_s, "pipeline": pipe,
                                                      "evals": evals, "items_per_step": items_per_step}, indent=1))


if __name__ == "__main__":
    main()
