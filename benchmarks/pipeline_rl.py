"""Synchronous vs pipelined RL on the same budget: `rl_train` then `pipeline_rl`.

Both start from the same SFT checkpoint with the same algorithm (GRPO, group
8), rollout settings and learning rate, for the same number of steps. The
synchronous run goes first; the pipeline then trains the same number of items
per step (the synchronous run's mean), with `trainer.max_lag` 1 and `--actors` rounds
in flight (1: on 2 shared cores a second actor only produces stale items).
Printed: wall time of each and their ratio, the pipeline's trainer idle
fraction, items trained per second, stale drops, and X/O win+draw after the
same number of steps (greedy).

    .venv/bin/python benchmarks/pipeline_rl.py --start MODEL_DIR [--steps 20] [--out runs/bench_pipeline]
    .venv/bin/python benchmarks/pipeline_rl.py --smoke   # CI: 2 steps of 2 prompts x 2, a random tiny-1m
"""

from __future__ import annotations

from ludic_core import openmp

openmp.configure()  # first: OpenMP's spin-wait, set before torch loads (ludic_core/openmp.py)

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

START = "runs/demo/tic_tac_toe/sft/checkpoints/step_00000800/model"  # `ludic demo` makes this one


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--start", help=f"SFT model dir (default {START}; with --smoke a random-weights tiny-1m)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--actors", type=int, default=1)
    ap.add_argument("--max-backlog", type=int, default=None,
                    help="unread items actors may leave queued (default: the flow's, items_per_step x (trainer.max_lag - 1))")
    ap.add_argument("--launch", nargs="+", choices=["thread", "process"], default=["thread", "process"],
                    help="where actor rounds run (each choice is one pipeline run)")
    ap.add_argument("--out", help="the runs' directory, emptied first (default runs/bench_pipeline; with --smoke "
                                  "a temporary one)")
    ap.add_argument("--smoke", action="store_true",
                    help="CI: 2 steps of 2 prompts x group 2, 2 evaluation games, from a random-weights tiny-1m "
                         "built here (unless --start); both launches; proves the code path")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ludic-pipeline-smoke-") as tmp:
        if args.smoke:
            args.steps, args.out = 2, args.out or f"{tmp}/runs"
            if args.start is None:
                from ludic_core.models import build_tiny_model

                args.start = str(build_tiny_model(f"{tmp}/tiny-1m", "tiny-1m", seed=0))
        args.start, args.out = args.start or START, args.out or "runs/bench_pipeline"
        run(args, group=2 if args.smoke else 8, requests=2 if args.smoke else 8,
            eval_episodes=2 if args.smoke else None)


def run(args: argparse.Namespace, *, group: int, requests: int, eval_episodes: int | None) -> None:
    from flows.demo import rl_agent
    from flows.pipeline_rl import ActorLaunch, PipelineRLConfig, pipeline_rl
    from flows.rl_train import RLTrainConfig, rl_train
    from ludic_core.config import RL_TRAINER, GRPOConfig
    from ludic_core.eval import evaluate_policy
    from ludic_core.inference import LocalChatClient
    from ludic_core.recipes.recipe import get_recipe

    recipe = get_recipe("tic_tac_toe")
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    trainer = RL_TRAINER
    common = dict(model_path=args.start, env=recipe.env, agent=rl_agent(recipe),
                  algorithm=GRPOConfig(group_size=group), steps=args.steps, steps_per_stage=args.steps // 2,
                  trainer=trainer, eval_episodes=0)

    t = time.perf_counter()
    sync_model = rl_train(RLTrainConfig(out_dir=str(out / "sync"), requests_per_step=requests, **common))
    sync_s = time.perf_counter() - t
    rows = [json.loads(line) for line in (out / "sync" / "metrics.jsonl").read_text().splitlines() if line.strip()]
    items_per_step = round(statistics.fmean(r["items"] for r in rows))

    pipes: dict[str, tuple[float, dict]] = {}
    for launch in args.launch:
        t = time.perf_counter()
        pipe = pipeline_rl(PipelineRLConfig(out_dir=str(out / f"pipeline_{launch}"), requests_per_round=requests,
                                            actors=args.actors, items_per_step=items_per_step,
                                            max_backlog=args.max_backlog, actor_launch=ActorLaunch(mode=launch),
                                            **{**common, "trainer": trainer.model_copy(update={"max_lag": 1})}))
        pipes[launch] = (time.perf_counter() - t, pipe)

    seeds = list(range(recipe.eval_seed, recipe.eval_seed + (eval_episodes or recipe.eval_episodes)))
    models = {"rl_train": sync_model, **{f"pipeline/{k}": p["model_path"] for k, (_, p) in pipes.items()}}
    evals = {name: evaluate_policy(LocalChatClient(path), recipe.eval_env, recipe.agent, seeds=seeds, temperature=0.0)
             for name, path in models.items()}
    print(f"\n{args.steps} steps of GRPO from {args.start}; {items_per_step} items per step, "
          f"{args.actors} actor(s)")
    print(f"{'run':<18} {'wall s':>8} {'ratio':>6} {'items/s':>8} {'idle':>6} {'stale':>6} {'X w+d':>6} {'O w+d':>6}")
    sync_items = sum(r["items"] for r in rows)
    print(f"{'rl_train':<18} {sync_s:>8.1f} {1.0:>6.2f} {sync_items / sync_s:>8.2f} {'-':>6} {'-':>6} "
          f"{evals['rl_train']['X/win_draw_rate']:>6.3f} {evals['rl_train']['O/win_draw_rate']:>6.3f}")
    for launch, (pipe_s, pipe) in pipes.items():
        e = evals[f"pipeline/{launch}"]
        print(f"{'pipeline/' + launch:<18} {pipe_s:>8.1f} {pipe_s / sync_s:>6.2f} "
              f"{pipe['items_trained'] / pipe_s:>8.2f} {pipe['trainer_idle_frac']:>6.2f} {pipe['stale_dropped']:>6} "
              f"{e['X/win_draw_rate']:>6.3f} {e['O/win_draw_rate']:>6.3f}")
        print(f"  lag histogram {pipe['lag_histogram']}; produced {pipe['items_produced']}, "
              f"left in stream {pipe['left_in_stream']}")
    print("ratio = pipeline / synchronous wall time (target <= 0.8); idle = trainer idle fraction (target <= 0.1)")
    for launch, (pipe_s, _) in pipes.items():
        print(f"ratio (pipeline/{launch} / rl_train) wall s: {pipe_s / sync_s:.2f}x")
    (out / "pipeline_rl.json").write_text(json.dumps(
        {"sync_s": sync_s, "pipelines": {k: {"wall_s": s, **p} for k, (s, p) in pipes.items()}, "evals": evals,
         "items_per_step": items_per_step}, indent=1))


if __name__ == "__main__":
    main()
