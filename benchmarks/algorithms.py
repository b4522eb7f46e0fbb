"""The algorithm table: which RL algorithm improves an SFT policy most, per
second of this CPU.

Every cell starts from the same SFT checkpoint (the demo's: rejection sampling
from the recipe's teacher, then SFT), trains for the same wall-clock budget
with the same rollout settings (64 episodes per step: 8 prompts x group 8, or
64 prompts without groups; the recipe's RL temperature, learning rate and RL
env, e.g. tic-tac-toe's move shaping; `--env-kwarg move_shaping=0` turns it off),
then plays the recipe's greedy evaluation. Printed: mean, min and max
over seeds of the headline metric (tic-tac-toe: mean of X and O win+draw;
arithmetic: accuracy), its change over the SFT row, and the steps each cell
managed. The `sft_more` row is the control every RL row needs: the same start,
lr and budget spent on more SFT on the teacher's data (64 examples a step),
so a change the RL rows share with it comes from training further at all,
not from RL.
Written: results.json (per cell also the share of groups whose episodes do
not all end alike, by step: the part of each batch that teaches anything) and
curves.png (reward_mean by step, mean over seeds with a min-max band).

    .venv/bin/python benchmarks/algorithms.py [--recipes tic_tac_toe arithmetic]
        [--seeds 3] [--first-seed 0] [--budget-s 45 | --steps N] [--lr LR] [--warmup-steps W]
        [--temperature T] [--sft-steps N] [--teacher-episodes K] [--eval-at STEP ...]
        [--env-kwarg KEY=JSON ...]
        [--out runs/algorithms]
    .venv/bin/python benchmarks/algorithms.py --merge RUN [RUN ...] [--out DIR]
    .venv/bin/python benchmarks/algorithms.py --smoke   # CI: tic-tac-toe, grpo and the control, one step

The last lines give, per recipe, the best RL row's mean score over the `sft_more`
control's (`ratio (best RL row / sft_more control) ...`).

An SFT checkpoint is made by the demo's own stages (flows.demo.teacher_to_sft,
under --demo-dir/RECIPE) unless `--start RECIPE=MODEL_DIR` names one; the
control's teacher data likewise, unless `--data RECIPE=DATASET_DIR` does.
`--steps N` trains every cell N steps instead of for the wall-clock budget:
a wall-clock cell gets fewer updates on a slower machine, a step-count cell
the same number on any machine. `--merge` makes one table of runs made side by
side (one process per seed, `--first-seed S --seeds 1`): on a 2-core machine
three one-thread processes finish three seeds sooner than one process does.
"""

from __future__ import annotations

from ludic_core import openmp

openmp.configure()  # first: OpenMP's spin-wait, set before torch loads (ludic_core/openmp.py)

import argparse
import json
import statistics
import time
from pathlib import Path

from ludic_core.config import (
    CISPOConfig,
    DynamicSampling,
    GRPOConfig,
    GSPOConfig,
    ReinforceBaselineConfig,
    ScaleRLConfig,
    SFTConfig,
)

GROUP = 8
ALGORITHMS = {
    "reinforce_baseline": ReinforceBaselineConfig(),
    "grpo": GRPOConfig(group_size=GROUP),
    "grpo_turn": GRPOConfig(group_size=GROUP, credit="turn"),
    "dapo_grpo": GRPOConfig(group_size=GROUP, clip_high=0.28, dynamic_sampling=DynamicSampling(min_groups=4)),
    "gspo": GSPOConfig(group_size=GROUP),
    "cispo": CISPOConfig(group_size=GROUP),
    "scalerl": ScaleRLConfig(group_size=GROUP),
    # the control: more SFT on the teacher's data, same lr, budget and examples per step
    "sft_more": SFTConfig(),
}
MULTI_TURN_ONLY = {"grpo_turn"}  # identical to grpo on one-turn episodes


def headline(recipe_name: str, m: dict[str, float]) -> float:
    if recipe_name == "tic_tac_toe":
        return (m["X/win_draw_rate"] + m["O/win_draw_rate"]) / 2
    return m["success_rate"]


def parse_key_json(items: list[str], error, flag: str = "--env-kwarg") -> dict:
    """`FLAG KEY=JSON` items as a dict; `error(message)` (argparse's) on a bad one."""
    out = {}
    for kv in items:
        key, sep, value = kv.partition("=")
        if not sep or not key:
            error(f"{flag} {kv!r}: expected KEY=JSON")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError as e:
            error(f"{flag} {kv!r}: the value must be JSON ({e})")
    return out


def with_env_kwargs(recipe, env_kwargs: dict):
    """The recipe with these kwargs on its RL env (on top of its own `rl_env_kwargs`;
    the teacher's env and the eval env untouched)."""
    if not env_kwargs:
        return recipe
    return recipe.model_copy(update={"rl_env_kwargs": {**recipe.rl_env_kwargs, **env_kwargs}})


def signal_note(signal: list[tuple[int, float]]) -> str:
    """'; groups with signal: 0.09 -> 0.21' (mean share in the first and last sixth of the run)."""
    if not signal:
        return ""
    n = max(len(signal) // 6, 1)
    first, last = (sum(v for _, v in part) / len(part) for part in (signal[:n], signal[-n:]))
    return f"; groups with signal: {first:.2f} -> {last:.2f}"


def evaluate(client, recipe) -> dict[str, float]:
    from ludic_core.eval import evaluate_policy

    seeds = list(range(recipe.eval_seed, recipe.eval_seed + recipe.eval_episodes))
    return evaluate_policy(client, recipe.eval_env, recipe.agent, seeds=seeds, temperature=0.0)


def demo_stages(recipe_name: str, demo_dir: str, *, sft: bool, sft_steps: int | None = None,
                teacher_episodes: int | None = None) -> tuple[str, str | None]:
    """(teacher dataset, SFT checkpoint or None), made by the demo's own stages
    under demo_dir/RECIPE (RECIPE-sftN for a step count other than the recipe's,
    -kK for K teacher episodes instead of the recipe's); a rerun finds what exists."""
    from flows.demo import DemoConfig, teacher_data, teacher_to_sft
    from ludic_core.models import build_tiny_model
    from ludic_core.recipes.recipe import get_recipe

    run_dir = (f"{demo_dir}/{recipe_name}" + (f"-sft{sft_steps}" if sft_steps else "")
               + (f"-k{teacher_episodes}" if teacher_episodes else ""))
    extra = {"teacher_episodes": teacher_episodes} if teacher_episodes else {}
    cfg = DemoConfig(recipe=recipe_name, run_dir=run_dir, sft_steps=sft_steps, progress_bar=False, **extra)
    model = str(build_tiny_model(cfg.model_dir, cfg.preset, seed=cfg.seed))
    recipe = get_recipe(recipe_name)
    return teacher_to_sft(cfg, recipe, model) if sft else (teacher_data(cfg, recipe, model), None)


def run_cell(recipe, start: str, algorithm, seed: int, budget_s: float, lr: float, episodes: int = 64,
             dataset: str | None = None, warmup_steps: int = 0, steps: int | None = None,
             eval_at: tuple[int, ...] = ()) -> dict:
    """Train from `start` for `budget_s` seconds (whole steps), or exactly `steps`
    steps when given, then evaluate. An SFT `algorithm` trains on `dataset`,
    `episodes` examples a step. `eval_at` adds the greedy evaluation after those
    steps too (the lr schedule is constant after warmup, so step N of a longer
    run is what an N-step run would be), to read one run's score at several lengths."""
    from flows.demo import rl_agent
    from ludic_core.algorithms import build_algorithm
    from ludic_core.compose.configs import SeedSchedule
    from ludic_core.config import RL_TRAINER, group_size_of
    from ludic_core.models import load_model_and_tokenizer
    from ludic_core.stages.data import batch_source, inference
    from ludic_core.stages.spec import DatasetData, RolloutData, StageSpec
    from ludic_core.training.trainer import Trainer

    per_step = max(episodes // group_size_of(algorithm), 1)  # the same episodes per step with or without groups
    if isinstance(algorithm, SFTConfig):
        data = DatasetData(path=dataset, batch_size=episodes)
    else:
        data = RolloutData(env=recipe.rl_env, agent=rl_agent(recipe), requests_per_step=per_step,
                           schedule=SeedSchedule(start=1_000 + 100_000 * seed))
    spec = StageSpec(model_path=start, checkpoint_dir="/nonexistent", algorithm=algorithm, until_step=1,
                     trainer=RL_TRAINER.model_copy(update={"lr": lr, "warmup_steps": warmup_steps, "seed": seed}),
                     data=data)
    model, tok = load_model_and_tokenizer(start)
    client, publisher = inference(spec, start)
    algo = build_algorithm(algorithm)
    trainer = Trainer(model, algo, batch_source(spec, algo, tok, client), spec.trainer, tokenizer=tok,
                      publisher=publisher)
    curve, signal, evals, t0, eval_s = [], [], [], time.perf_counter(), 0.0
    try:
        while trainer.step < steps if steps is not None else time.perf_counter() - t0 - eval_s < budget_s:
            (m,) = trainer.train(trainer.step + 1)
            curve.append((trainer.step, float(m.get("reward_mean", float("nan")))))  # NaN for SFT
            if m.get("groups"):  # the share of groups whose episodes do not all end alike
                signal.append((trainer.step, m["signal_groups"] / m["groups"]))
            if trainer.step in eval_at and trainer.step != steps:
                e0 = time.perf_counter()
                mid = evaluate(client, recipe)  # the publisher keeps the client on the trainer's weights
                eval_s += time.perf_counter() - e0
                evals.append({"step": trainer.step, "score": headline(recipe.name, mid), "metrics": mid})
                print(f"    step {trainer.step}: {evals[-1]['score']:.3f}", flush=True)
    finally:
        trainer.close()
    seconds = time.perf_counter() - t0 - eval_s
    metrics = evaluate(client, recipe)
    evals.append({"step": trainer.step, "score": headline(recipe.name, metrics), "metrics": metrics})
    return {"steps": trainer.step, "train_s": round(seconds, 1), "curve": curve, "signal": signal, "metrics": metrics,
            "score": headline(recipe.name, metrics), "evals": evals}


#: settings that must agree for runs to share one table (top level, then per recipe)
_SAME_RUN = ("budget_s", "steps", "warmup_steps", "episodes", "env_kwargs", "teacher_episodes", "sft_steps")
_SAME_RECIPE = ("start", "sft", "lr", "temperature", "rl_env_kwargs")


def merge(paths: list[Path]) -> dict:
    """One results dict from several runs' results.json (e.g. one process per
    seed, run side by side). Runs must share their settings and starts, and no
    (recipe, algorithm, seed) may appear twice: otherwise the table would mix
    cells that are not comparable, so that is an error naming the file."""
    merged: dict | None = None
    for path in paths:
        f = path / "results.json" if path.is_dir() else path
        try:
            res = json.loads(f.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise SystemExit(f"--merge: cannot read {f}: {e}")
        if not (isinstance(res, dict) and isinstance(res.get("recipes"), dict) and isinstance(res.get("seeds"), list)
                and all(isinstance(c, dict) and "seed" in c for rec in res["recipes"].values()
                        for runs in rec.get("cells", {}).values() for c in runs)):
            raise SystemExit(f"--merge: {f} is not a results.json of this script (recipes, seeds, cells with a seed)")
        if merged is None:
            merged = {**res, "recipes": {}, "seeds": []}
        for key in _SAME_RUN:
            if res.get(key) != merged.get(key):
                raise SystemExit(f"--merge: {f} has {key}={res.get(key)!r}, the first run {merged.get(key)!r}")
        merged["seeds"] = sorted(set(merged["seeds"]) | set(res["seeds"]))
        for name, rec in res["recipes"].items():
            into = merged["recipes"].setdefault(name, {**rec, "cells": {}})
            for key in _SAME_RECIPE:
                if rec.get(key) != into.get(key):
                    raise SystemExit(f"--merge: {f}: {name} has {key}={rec.get(key)!r}, "
                                     f"the first run {into.get(key)!r}")
            for algo, runs in rec.get("cells", {}).items():
                have = into["cells"].setdefault(algo, [])
                seen = {r["seed"] for r in have}
                for r in runs:
                    if r["seed"] in seen:
                        raise SystemExit(f"--merge: {f}: {name} {algo} seed {r['seed']} is already in an earlier run")
                    have.append(r)
                have.sort(key=lambda r: r["seed"])
    if merged is None:
        raise SystemExit("--merge: no runs given")
    return merged


def ratio_line(name: str, rec: dict) -> str:
    """The best RL row's mean score over the `sft_more` control's: same start, lr and budget."""
    head = f"ratio (best RL row / sft_more control) mean score, {name}: "
    means = {algo: statistics.fmean(r["score"] for r in runs) for algo, runs in rec["cells"].items() if runs}
    control = means.pop("sft_more", None)
    if not means or control is None:
        return head + "n/a, " + ("no RL row" if not means else "no sft_more row")
    if control <= 0:
        return head + f"n/a, the control scores {control:.3f}"
    best = max(means, key=means.__getitem__)
    return head + f"{means[best] / control:.2f}x   ({best} {means[best]:.3f} vs {control:.3f})"


def _row(name: str, algo: str, scores: list[float], sft: float, extra: str) -> str:
    mean = statistics.fmean(scores)
    return (f"{name:<12} {algo:<19} {extra}{mean:>6.3f} {min(scores):>6.3f} {max(scores):>6.3f} "
            f"{mean - sft:>+7.3f}")


def report(results: dict, out: Path) -> None:
    """Print the table (and the by-step one when cells were scored along the
    way); write results.json and curves.png under `out`."""
    (out / "results.json").write_text(json.dumps(results, indent=1))
    print(f"\n{'recipe':<12} {'algorithm':<19} {'mean':>6} {'min':>6} {'max':>6} {'vs SFT':>7} {'steps':>6}")
    for name, rec in results["recipes"].items():
        print(f"{name:<12} {'SFT start':<19} {rec['sft']:>6.3f}")
        for algo, runs in rec["cells"].items():
            print(_row(name, algo, [r["score"] for r in runs], rec["sft"], "")
                  + f" {statistics.fmean(r['steps'] for r in runs):>6.1f}")
    by_steps = any(len(r.get("evals", ())) > 1 for rec in results["recipes"].values()
                   for runs in rec["cells"].values() for r in runs)
    if by_steps:
        print(f"\n{'recipe':<12} {'algorithm':<19} {'step':>6} {'mean':>6} {'min':>6} {'max':>6} {'vs SFT':>7}"
              f" {'seeds':>5}")
        for name, rec in results["recipes"].items():
            for algo, runs in rec["cells"].items():
                by_step: dict[int, list[float]] = {}
                for r in runs:
                    for e in r.get("evals", ()):
                        by_step.setdefault(e["step"], []).append(e["score"])
                for step, scores in sorted(by_step.items()):
                    print(_row(name, algo, scores, rec["sft"], f"{step:>6} ") + f" {len(scores):>5}")
    from ludic_core.logging.curves import curves_png

    panels = {name: {algo: [r["curve"] for r in runs] for algo, runs in rec["cells"].items()
                     if not isinstance(ALGORITHMS[algo], SFTConfig)}  # no samples, no reward curve
              for name, rec in results["recipes"].items()}
    png = curves_png(panels, out / "curves.png", xlabel="step", ylabel="reward_mean (training samples)")
    lrs = ", ".join(f"{name} {rec['lr']}" for name, rec in results["recipes"].items())
    per_cell = f"{results['budget_s']:.0f} s" if results["steps"] is None else f"{results['steps']} steps"
    print(f"\n{len(results['seeds'])} seeds x {per_cell} per cell, lr {lrs}; {out / 'results.json'}, {png}")
    for name, rec in results["recipes"].items():
        print(ratio_line(name, rec))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipes", nargs="+", default=["tic_tac_toe", "arithmetic"])
    ap.add_argument("--algorithms", nargs="+", default=list(ALGORITHMS), choices=list(ALGORITHMS))
    ap.add_argument("--seeds", type=int, default=3, help="seeds per cell (0: build and score the starts only)")
    ap.add_argument("--first-seed", type=int, default=0, help="seeds run are first-seed .. first-seed+seeds-1")
    budget = ap.add_mutually_exclusive_group()
    budget.add_argument("--budget-s", type=float, default=45.0, help="training wall-clock seconds per cell")
    budget.add_argument("--steps", type=int, help="train every cell exactly this many steps instead")
    ap.add_argument("--lr", type=float, help="learning rate of every cell (default: each recipe's rl_lr)")
    ap.add_argument("--warmup-steps", type=int, default=0, help="linear lr warmup of every cell (fresh Adam state)")
    ap.add_argument("--temperature", type=float, help="RL sampling temperature of every cell (default: each recipe's)")
    ap.add_argument("--episodes", type=int, default=64, help="episodes per step (prompts x group size)")
    ap.add_argument("--env-kwarg", action="append", default=[], metavar="KEY=JSON",
                    help="set a kwarg of the env RL trains on (not the evaluation's), e.g. move_shaping=0.5")
    ap.add_argument("--eval-episodes", type=int,
                    help="greedy episodes per evaluation (default: each recipe's eval_episodes)")
    ap.add_argument("--eval-at", type=int, nargs="+", default=[], metavar="STEP",
                    help="also evaluate every cell after these steps (the final one always is)")
    ap.add_argument("--start", action="append", default=[], metavar="RECIPE=MODEL_DIR")
    ap.add_argument("--data", action="append", default=[], metavar="RECIPE=DATASET_DIR",
                    help="the teacher data of the sft_more control (default: the demo's, made when missing)")
    ap.add_argument("--demo-dir", default="runs/demo", help="where SFT checkpoints are made when not given")
    ap.add_argument("--sft-steps", type=int, help="SFT steps of the starts made here (default: each recipe's)")
    ap.add_argument("--teacher-episodes", type=int,
                    help="teacher episodes behind the starts made here and the control's data (default: the "
                         "recipe's: 16384 for tic-tac-toe, 4096 for the others); a few hundred give a start that "
                         "more SFT on the same data cannot improve")
    ap.add_argument("--out", default="runs/algorithms")
    ap.add_argument("--merge", nargs="+", type=Path, metavar="RUN",
                    help="train nothing: one table from these runs' results.json (or their --out dirs), e.g. "
                         "one process per seed; written to --out")
    ap.add_argument("--smoke", action="store_true",
                    help="CI: tic-tac-toe, grpo and the sft_more control, 1 seed x 1 step of 16 episodes, 8 eval "
                         "games, from a start of 16 teacher episodes and 2 SFT steps (made once under the bench "
                         "dir, runs/bench); proves the code path, measures nothing")
    args = ap.parse_args()
    if args.smoke:
        from _tic_tac_toe_policy import bench_root  # benchmarks/, on the path of a script run from there

        args.recipes, args.algorithms, args.seeds, args.first_seed = ["tic_tac_toe"], ["grpo", "sft_more"], 1, 0
        args.steps, args.episodes, args.eval_episodes, args.sft_steps, args.teacher_episodes = 1, 16, 8, 2, 16
        args.demo_dir = str(bench_root() / "algorithms-smoke")
        args.out = f"{args.demo_dir}/out"
    if args.merge:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        report(merge(args.merge), out)
        return

    from ludic_core.inference import LocalChatClient
    from ludic_core.recipes.recipe import get_recipe

    env_kwargs = parse_key_json(args.env_kwarg, ap.error)
    starts = dict(s.split("=", 1) for s in args.start)
    datasets = dict(s.split("=", 1) for s in args.data)
    if args.steps is not None and args.steps < 1:
        ap.error(f"--steps must be at least 1, got {args.steps}")
    if args.first_seed < 0:
        ap.error(f"--first-seed must be at least 0, got {args.first_seed}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict = {"budget_s": args.budget_s if args.steps is None else None, "steps": args.steps,
                     "seeds": list(range(args.first_seed, args.first_seed + args.seeds)), "sft_steps": args.sft_steps,
                     "warmup_steps": args.warmup_steps, "episodes": args.episodes, "env_kwargs": env_kwargs,
                     "teacher_episodes": args.teacher_episodes, "recipes": {}}
    for name in args.recipes:
        recipe = get_recipe(name)
        if args.temperature is not None:
            recipe = type(recipe).model_validate({**recipe.model_dump(), "rl_temperature": args.temperature})
        if args.eval_episodes is not None:
            recipe = type(recipe).model_validate({**recipe.model_dump(), "eval_episodes": args.eval_episodes})
        recipe = with_env_kwargs(recipe, env_kwargs)  # RL's env only: the evaluation keeps the recipe's
        dataset, start = datasets.get(name), starts.get(name)
        if start is None:
            made, start = demo_stages(name, args.demo_dir, sft=True, sft_steps=args.sft_steps,
                                      teacher_episodes=args.teacher_episodes)
            dataset = dataset or made
        elif dataset is None and "sft_more" in args.algorithms:
            dataset = demo_stages(name, args.demo_dir, sft=False, sft_steps=args.sft_steps,
                                  teacher_episodes=args.teacher_episodes)[0]
        sft_metrics = evaluate(LocalChatClient(start), recipe)
        lr = args.lr or recipe.rl_lr
        rec = results["recipes"][name] = {"start": start, "sft": headline(name, sft_metrics),
                                          "sft_metrics": sft_metrics, "lr": lr,
                                          "temperature": recipe.rl_temperature,
                                          "rl_env_kwargs": recipe.rl_env_kwargs, "cells": {}}
        print(f"\n{name}: SFT checkpoint {start} scores {rec['sft']:.3f}; lr {lr}; RL env {recipe.rl_env.kwargs}",
              flush=True)
        for algo in args.algorithms if args.seeds > 0 else ():
            if algo in MULTI_TURN_ONLY and recipe.agent.max_turns == 1:
                continue
            runs = []
            for seed in results["seeds"]:
                cell = run_cell(recipe, start, ALGORITHMS[algo], seed, args.budget_s, lr, args.episodes, dataset,
                                args.warmup_steps, args.steps, tuple(args.eval_at))
                cell["seed"] = seed
                runs.append(cell)
                print(f"  {algo:<19} seed {seed}: {cell['score']:.3f} after {cell['steps']} steps"
                      + signal_note(cell["signal"]), flush=True)
            rec["cells"][algo] = runs
        (out / "results.json").write_text(json.dumps(results, indent=1))

    report(results, out)


if __name__ == "__main__":
    main()
