"""The demo's RL stage with its settings changed, from the demo's own SFT students: the
experiments pages' tic-tac-toe runs, repeatable with one command.

Per seed, the demo's rejection sampling and SFT (`flows.demo.teacher_to_sft`, at the recipe's
settings) make the student once, under STUDENTS/seedS, and every later run reuses it: a change to
RL is then measured from the same start. The RL stage is the demo's own (`flows.demo.rl_stage`,
the `rl_train` flow) with the recipe's RL settings overridden:

- `--set KEY=JSON`: a recipe field of the RL stage (`rl_steps`, `rl_lr`, `rl_requests_per_step`,
  `rl_temperature`, `rl_branch`);
- `--algorithm KEY=JSON`: a field of its algorithm's config (GRPO's `group_size`, `credit`,
  `normalize_std`, `reuse` as `{"mini_batches": 2, "epochs": 1}`, ...); with `type` another
  algorithm, from its defaults (`--algorithm type='"cispo"' --algorithm group_size=2`);
- `--env-kwarg KEY=JSON`: a kwarg of its env (on top of the recipe's `rl_env_kwargs`);
- `--trainer KEY=JSON`: a field of its `TrainerConfig` (`schedule`, `warmup_steps`, `betas`, ...).

The students before and after RL, and the teacher, are scored exactly: expected win+draw against
the random opponent with every opponent move enumerated (`ludic_core.envs.tic_tac_toe.exact`), as
X / O / their mean, the measure the experiments pages report. The demo's 400 games estimate it to
about +-0.03; the exact score has no sampling noise (a run's own noise, ~0.02, remains). The RL
stage's last checkpoint before its end (its half-way step: the demo's RL runs in two stages) is
scored too: whether RL was still climbing.

    .venv/bin/python benchmarks/demo_rl.py [--seeds 0 1 2] [--set KEY=JSON ...]
        [--algorithm KEY=JSON ...] [--env-kwarg KEY=JSON ...] [--trainer KEY=JSON ...]
        [--students runs/demo-rl/students] [--out runs/demo-rl/NAME]
    .venv/bin/python benchmarks/demo_rl.py --smoke   # CI: every stage once, at toy sizes

Seeds run one after another. On a 2-core machine two processes (`--seeds 1` and `--seeds 2`, one
`--out` each, `OMP_NUM_THREADS=1`, each its own `PREFECT_HOME` or one `prefect server start`) finish
two seeds in little more than one's time. An `--out` that holds a run with other settings is
refused; with the same settings the flow resumes from its checkpoints.

The last line: the student after RL over the teacher, exact mean win+draw, mean over the seeds.
"""

from __future__ import annotations

from ludic_core import openmp

openmp.configure()  # first: OpenMP's spin-wait, set before torch loads (ludic_core/openmp.py)

import argparse
import contextlib
import json
import statistics
import tempfile
import time
from pathlib import Path

RECIPE = "tic_tac_toe"  # the exact score is tic-tac-toe's
#: the recipe fields `--set` may change: the RL stage's (the student is made at the recipe's own settings)
RL_FIELDS = ("rl_steps", "rl_lr", "rl_requests_per_step", "rl_temperature", "rl_branch")
#: --smoke: every stage runs, on a handful of games and steps
SMOKE = {"teacher_episodes": 8, "sft_steps": 1}
SMOKE_RL = {"rl_steps": 2, "rl_requests_per_step": 2}  # two steps: a checkpoint before the last


def variant(recipe, sets: dict, algorithm: dict, env_kwargs: dict):
    """The recipe with RL's settings changed, validated as the recipe is (a bad key or value fails here)."""
    from ludic_core.recipes.recipe import Recipe

    unknown = sorted(set(sets) - set(RL_FIELDS))
    if unknown:
        raise SystemExit(f"--set {', '.join(unknown)}: only the RL stage's fields can change here "
                         f"({', '.join(RL_FIELDS)}); the students are made at the recipe's settings")
    data = recipe.model_dump()
    data.update(sets)
    # another algorithm's config starts from its own defaults, not from fields it may not have
    data["rl_algorithm"] = algorithm if "type" in algorithm else {**data["rl_algorithm"], **algorithm}
    data["rl_env_kwargs"] = {**data["rl_env_kwargs"], **env_kwargs}
    try:
        return Recipe.model_validate(data)
    except ValueError as e:
        raise SystemExit(f"the RL settings given: {e}") from None


def exact(policy) -> dict[str, float]:
    from ludic_core.envs.tic_tac_toe.exact import exact_win_draw

    x, o = exact_win_draw(policy, "X"), exact_win_draw(policy, "O")
    return {"X": x, "O": o, "mean": (x + o) / 2}


def teacher_exact(recipe) -> dict[str, float]:
    """The recipe's teacher's greedy play, exactly (the demo table's teacher row)."""
    from ludic_core.envs.tic_tac_toe.exact import chat_board_policy
    from ludic_core.registry.names import call_with_kwargs, resolve

    player = call_with_kwargs(resolve("policy", recipe.teacher), recipe.teacher_kwargs, f"teacher {recipe.teacher}")
    return exact(chat_board_policy(player))


def student(seed: int, students: str, smoke: bool) -> str:
    """The seed's SFT student, made by the demo's stages at the recipe's settings (reused when there)."""
    from flows.demo import DemoConfig, teacher_to_sft
    from ludic_core.models import build_tiny_model
    from ludic_core.recipes.recipe import get_recipe

    cfg = DemoConfig(recipe=RECIPE, run_dir=f"{students}/seed{seed}", seed=seed, progress_bar=False,
                     **(SMOKE if smoke else {}))
    model = str(build_tiny_model(cfg.model_dir, cfg.preset, seed=cfg.seed))
    return teacher_to_sft(cfg, get_recipe(RECIPE), model)[1]


def rl_stage_for(seed: int, recipe, sft_model: str, out: Path, trainer: dict):
    """The demo's RL stage from `sft_model` into out/seedS, its trainer's fields `trainer` changed (validated)."""
    from flows.demo import DemoConfig, rl_stage
    from flows.rl_train import RLTrainConfig

    cfg = DemoConfig(recipe=RECIPE, run_dir=str(out / f"seed{seed}"), seed=seed, progress_bar=False)
    stage = rl_stage(cfg, recipe, sft_model)
    if not trainer:
        return cfg, stage
    try:
        return cfg, RLTrainConfig.model_validate({**stage.model_dump(),
                                                  "trainer": {**stage.trainer.model_dump(), **trainer}})
    except ValueError as e:
        raise SystemExit(f"the trainer settings given: {e}") from None


def run_rl(seed: int, recipe, sft_model: str, out: Path, trainer: dict) -> tuple[str, float, tuple[int, str] | None]:
    """The demo's RL stage from `sft_model` into out/seedS: (the model after RL, seconds, (step, model) of the
    stage's last checkpoint before its end, or None where it made none)."""
    from flows.rl_train import rl_train

    cfg, stage = rl_stage_for(seed, recipe, sft_model, out, trainer)
    settings = Path(cfg.out) / "rl-settings.json"
    wanted = stage.model_dump(mode="json")
    if settings.exists() and json.loads(settings.read_text()) != wanted:
        raise SystemExit(f"{settings.parent} holds an RL run with other settings: give another --out")
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text(json.dumps(wanted, indent=1))
    t = time.perf_counter()
    model = rl_train(stage)
    seconds = time.perf_counter() - t
    return model, seconds, earlier_checkpoint(model)


def earlier_checkpoint(final_model: str) -> tuple[int, str] | None:
    """(step, model dir) of the RL stage's last complete checkpoint before the final one (beside it:
    CHECKPOINTS/step_N/model), or None where there is none. Its score beside the final one says whether RL
    was still climbing."""
    from ludic_core.training.checkpoint import complete_checkpoints

    final = Path(final_model).parent
    earlier = [(step, p) for step, p in complete_checkpoints(final.parent) if p.name != final.name]
    return (earlier[-1][0], str(earlier[-1][1] / "model")) if earlier else None


def fmt(s: dict[str, float]) -> str:
    return f"{s['X']:.3f} / {s['O']:.3f} / {s['mean']:.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0], help="the students' seeds (default 0)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=JSON", help=f"one of {', '.join(RL_FIELDS)}")
    ap.add_argument("--algorithm", action="append", default=[], metavar="KEY=JSON",
                    help="a field of the recipe's RL algorithm; type=JSON starts another from its defaults")
    ap.add_argument("--env-kwarg", action="append", default=[], metavar="KEY=JSON", help="a kwarg of RL's env")
    ap.add_argument("--trainer", action="append", default=[], metavar="KEY=JSON",
                    help="a field of the RL stage's TrainerConfig")
    ap.add_argument("--students", default="runs/demo-rl/students", help="where the SFT students are made, per seed")
    ap.add_argument("--out", default="runs/demo-rl/run", help="the RL runs, per seed, and results.json")
    ap.add_argument("--smoke", action="store_true", help="CI: toy sizes in a temporary directory; measures nothing")
    args = ap.parse_args()

    from algorithms import parse_key_json  # this script's directory is on sys.path
    from ludic_core.envs.tic_tac_toe.exact import model_board_policy
    from ludic_core.recipes.recipe import get_recipe

    sets = {**parse_key_json(args.set, ap.error, "--set"), **(SMOKE_RL if args.smoke else {})}
    algorithm = parse_key_json(args.algorithm, ap.error, "--algorithm")
    env_kwargs = parse_key_json(args.env_kwarg, ap.error)
    recipe = variant(get_recipe(RECIPE), sets, algorithm, env_kwargs)
    trainer = parse_key_json(args.trainer, ap.error, "--trainer")
    rl_stage_for(args.seeds[0], recipe, "<student>", Path("<out>"), trainer)  # a bad field fails before any stage
    # a smoke never writes into (or reuses the students of) a real run's directories
    with tempfile.TemporaryDirectory(prefix="ludic-demo-rl-smoke-") if args.smoke else contextlib.nullcontext() as tmp:
        students, out = (f"{tmp}/students", Path(tmp) / "out") if tmp else (args.students, Path(args.out))
        teacher = teacher_exact(recipe)
        rows = []
        for seed in args.seeds:
            sft_model = student(seed, students, args.smoke)
            rl_model, seconds, earlier = run_rl(seed, recipe, sft_model, out, trainer)
            rows.append({"seed": seed, "sft": exact(model_board_policy(sft_model)),
                         "rl_earlier": earlier and {"step": earlier[0], **exact(model_board_policy(earlier[1]))},
                         "rl": exact(model_board_policy(rl_model)), "rl_seconds": seconds, "rl_model": rl_model})
        overrides = {**sets, **{f"{part}.{k}": v for part, given in (("algorithm", algorithm), ("env", env_kwargs),
                                                                     ("trainer", trainer)) for k, v in given.items()}}
        report(rows, teacher, recipe, out, overrides)


def report(rows: list[dict], teacher: dict, recipe, out: Path, sets: dict) -> None:
    print(f"\noverrides: {sets or 'none'}")
    algorithm = recipe.rl_algorithm
    print(f"RL: {recipe.rl_requests_per_step} prompts x {algorithm.samples_per_prompt()}, {recipe.rl_steps} steps, "
          f"lr {recipe.rl_lr}, T {recipe.rl_temperature}; {algorithm.type} {algorithm.model_dump(exclude_defaults=True)}"
          f"; env {recipe.rl_env_kwargs}")
    print("exact win+draw vs the random opponent, X / O / mean")
    print(f"teacher     {fmt(teacher)}")
    print(f"{'seed':<6}{'after SFT':>24}{'RL, earlier step':>30}{'after RL':>24}{'RL - SFT':>10}{'RL - teacher':>14}"
          f"{'RL s':>8}")
    for r in rows:
        earlier = r["rl_earlier"]
        at = f"{fmt(earlier)} at {earlier['step']}" if earlier else "-"
        print(f"{r['seed']:<6}{fmt(r['sft']):>24}{at:>30}{fmt(r['rl']):>24}{r['rl']['mean'] - r['sft']['mean']:>+10.3f}"
              f"{r['rl']['mean'] - teacher['mean']:>+14.3f}{r['rl_seconds']:>8.0f}")
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"teacher": teacher, "rows": rows, "overrides": sets,
                                                  "recipe": recipe.model_dump(mode="json")}, indent=1))
    mean_rl = statistics.fmean(r["rl"]["mean"] for r in rows)
    print(f"ratio (after RL / teacher) exact mean win+draw, mean over {len(rows)} seed(s): "
          f"{mean_rl / teacher['mean']:.3f}x")


if __name__ == "__main__":
    main()
