"""On-policy distillation against SFT on the teacher's samples, from the same student start.

A tiny-10m teacher (SFT'd on the minimax player's tic-tac-toe games, as in
`teacher_student.py`: good, not perfect) and tiny-1m students. Per seed:

1. the start: a fresh tiny-1m student after `--warm-steps` of SFT on the teacher's own
   kept games (rejection sampling), so that it writes moves at all;
2. SFT: `--sft-steps` more steps on the same data, evaluated along the way;
3. on-policy distillation: `--opd-steps` steps from the same start (the student plays,
   the teacher scores every token it wrote), evaluated along the way.

The score is the mean of X's and O's win+draw rate against the random opponent (greedy,
`--eval-episodes` games, half as X). Compute is the student's training process CPU time
(user + system, all threads) of the training stages: for SFT its steps, for distillation its
steps including the student's own sampling and the teacher's scoring (reported apart, as
`teacher s`). The teacher's training and its rejection sampling are paid once and shared by
every seed; they are printed, not charged to either side. The last lines give, per seed, the
compute distillation needed to reach SFT's final score, as a ratio of SFT's.

    .venv/bin/python benchmarks/distill_vs_sft.py [--out runs/distill_vs_sft] [--teacher DIR] [--seeds 0 1 2]
    .venv/bin/python benchmarks/distill_vs_sft.py --smoke   # CI: proves the code path in about a minute
"""

from __future__ import annotations

from ludic_core import openmp

openmp.configure()  # first: OpenMP's spin-wait, set before torch loads (ludic_core/openmp.py)

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def cpu_seconds() -> float:
    """This process's CPU time so far, every thread, user and system."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def score(model: str, episodes: int) -> dict[str, float]:
    from ludic_core.compose.policy import ModelPolicy, open_client
    from ludic_core.eval import evaluate_policy
    from ludic_core.recipes.tic_tac_toe import AGENT, ENV

    client, _ = open_client(ModelPolicy(model_path=model), None, None)
    m = evaluate_policy(client, ENV, AGENT, seeds=list(range(100_000, 100_000 + episodes)), temperature=0.0)
    return {"X": m["X/win_draw_rate"], "O": m["O/win_draw_rate"], "score": (m["X/win_draw_rate"] + m["O/win_draw_rate"]) / 2}


def smoke_teacher_and_data(out: Path) -> tuple[str, str]:
    """The smoke's stand-ins, made in seconds: an untrained tiny-1m teacher, and the minimax player's
    kept games as SFT's data (the code path of both arms, not a result)."""
    from ludic_core.models import build_tiny_model, load_model_and_tokenizer, tokenizer_fingerprint
    from ludic_core.recipes.tic_tac_toe import RECIPE, teacher_rollouts
    from ludic_core.rejection import keep_episodes, rollouts_to_dataset, save_dataset

    teacher = str(build_tiny_model(out / "models" / "teacher", "tiny-1m", seed=3))
    _, tok = load_model_and_tokenizer(teacher)
    kept, _ = keep_episodes(teacher_rollouts(tok, games=16, seed=11), RECIPE.keep)
    data = save_dataset(rollouts_to_dataset(kept, tokenizer=tokenizer_fingerprint(tok)), out / "minimax-games")
    return teacher, str(data)


def teacher_data(teacher: str, out: Path, games: int) -> str:
    """The teacher's own games through the student's agent stack, kept by the recipe's rule."""
    from ludic_core.compose.policy import ModelPolicy, open_client
    from ludic_core.models import load_model_and_tokenizer, tokenizer_fingerprint
    from ludic_core.recipes.tic_tac_toe import AGENT, ENV, RECIPE
    from ludic_core.rejection_sampling import rejection_sample

    if (out / "teacher-samples" / "dataset").exists():
        return str(out / "teacher-samples" / "dataset")
    client, _ = open_client(ModelPolicy(model_path=teacher), None, None)
    _, tok = load_model_and_tokenizer(teacher)
    done = rejection_sample(client, ENV, AGENT, seeds=list(range(games)), samples=1, keep=RECIPE.keep,
                            out_dir=out / "teacher-samples", fingerprint=tokenizer_fingerprint(tok))
    print(f"teacher samples: kept {done['kept']:.0f} of {done['sampled']:.0f} games", flush=True)
    return str(done["dataset_path"])


def stage(model: str, ckpt: Path, algorithm, data, until: int, trainer) -> tuple[str, float]:
    from ludic_core.stages.run import StageSpec, run_stage

    spec = StageSpec(model_path=model, checkpoint_dir=str(ckpt), algorithm=algorithm, trainer=trainer, data=data,
                     until_step=until, metrics_path=str(ckpt.parent / "metrics.jsonl"))
    t = cpu_seconds()
    return run_stage(spec)["model_path"], cpu_seconds() - t


def arm(name: str, start: str, out: Path, algorithm, data, marks: list[int], trainer, episodes: int) -> list[dict]:
    """Train from `start`, evaluating at each step count in `marks`: rows of (step, cpu s, score)."""
    rows, spent = [], 0.0
    for until in marks:
        model, cpu = stage(start, out / name / "checkpoints", algorithm, data, until, trainer)
        spent += cpu
        rows.append({"arm": name, "step": until, "cpu_s": round(spent, 1), **score(model, episodes)})
        print(json.dumps(rows[-1]), flush=True)
    teacher_s = 0.0
    metrics = out / name / "metrics.jsonl"
    if metrics.exists():
        teacher_s = sum(json.loads(line).get("teacher_seconds", 0.0) for line in metrics.read_text().splitlines())
    for r in rows:
        r["teacher_s_total"] = round(teacher_s, 1)
    return rows


def run_seed(a: argparse.Namespace, seed: int, teacher: str, data_path: str, out: Path) -> list[dict]:
    from ludic_core.algorithms import DistillTeacher, OnPolicyDistillConfig
    from ludic_core.config import RL_TRAINER, SFT_TRAINER, SFTConfig
    from ludic_core.models import build_tiny_model
    from ludic_core.recipes.tic_tac_toe import AGENT, ENV
    from ludic_core.stages.run import DatasetData, RolloutData

    out = out / f"seed-{seed}"
    base = str(build_tiny_model(out / "student-base", "tiny-1m", seed=seed))
    data = DatasetData(path=data_path)
    warm_trainer = SFT_TRAINER.model_copy(update={"seed": seed, "total_steps": a.warm_steps})
    start, _ = stage(base, out / "start" / "checkpoints", SFTConfig(), data, a.warm_steps, warm_trainer)
    rows = [{"arm": "start", "step": 0, "cpu_s": 0.0, **score(start, a.eval_episodes)}]
    print(json.dumps(rows[-1]), flush=True)
    sft_trainer = SFT_TRAINER.model_copy(update={"seed": seed, "lr": a.sft_lr, "warmup_steps": 0,
                                                 "total_steps": a.sft_steps})
    rows += arm("sft", start, out, SFTConfig(), data, _marks(a.sft_steps, a.evals), sft_trainer, a.eval_episodes)
    opd = OnPolicyDistillConfig(teacher=DistillTeacher(model_path=teacher))
    opd_trainer = RL_TRAINER.model_copy(update={"seed": seed, "lr": a.opd_lr, "max_seq_len": 1024})
    rollouts = RolloutData(env=ENV, agent=AGENT, requests_per_step=a.opd_requests)
    rows += arm("distill", start, out, opd, rollouts, _marks(a.opd_steps, a.evals), opd_trainer, a.eval_episodes)
    return rows


def _marks(steps: int, evals: int) -> list[int]:
    return sorted({max(1, round(steps * (i + 1) / evals)) for i in range(evals)})


def summary(rows: list[dict]) -> dict[str, float | None]:
    sft = [r for r in rows if r["arm"] == "sft"]
    opd = [r for r in rows if r["arm"] == "distill"]
    target = sft[-1]["score"]
    reached = next((r for r in opd if r["score"] >= target), None)
    return {"start": rows[0]["score"], "sft_final": target, "sft_cpu_s": sft[-1]["cpu_s"],
            "distill_best": max(r["score"] for r in opd), "distill_cpu_s": opd[-1]["cpu_s"],
            "distill_cpu_to_sft_final": reached["cpu_s"] if reached else None,
            "ratio": round(reached["cpu_s"] / sft[-1]["cpu_s"], 3) if reached and sft[-1]["cpu_s"] else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="the run's directory (default runs/distill_vs_sft; with --smoke a temporary one)")
    ap.add_argument("--teacher", help="an already trained teacher model dir (e.g. teacher_student.py's)")
    ap.add_argument("--teacher-steps", type=int, default=300)
    ap.add_argument("--games", type=int, default=1024, help="teacher games sampled for SFT (kept by the recipe)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--warm-steps", type=int, default=100)
    ap.add_argument("--sft-steps", type=int, default=300)
    ap.add_argument("--sft-lr", type=float, default=1e-3)
    ap.add_argument("--opd-steps", type=int, default=60)
    ap.add_argument("--opd-lr", type=float, default=3e-4)
    ap.add_argument("--opd-requests", type=int, default=8, help="games the student plays per distillation step")
    ap.add_argument("--evals", type=int, default=3, help="evaluations along each arm")
    ap.add_argument("--eval-episodes", type=int, default=100)
    ap.add_argument("--smoke", action="store_true", help="CI: an untrained teacher, minimax games as SFT's data, "
                                                         "2 steps per arm")
    a = ap.parse_args()
    if a.smoke:
        a.seeds = [0]
        a.warm_steps, a.sft_steps, a.opd_steps, a.evals, a.eval_episodes, a.opd_requests = 2, 2, 2, 1, 2, 2
    with tempfile.TemporaryDirectory(prefix="ludic-distill-smoke-") as tmp:
        out = Path(a.out or (tmp if a.smoke else "runs/distill_vs_sft"))
        from teacher_student import train_teacher

        times = {}
        if a.smoke:
            teacher, data_path = smoke_teacher_and_data(out)
        else:
            t = time.perf_counter()
            teacher = a.teacher or train_teacher(out, a.teacher_steps, "tiny-10m", 4096)
            times["teacher SFT"] = time.perf_counter() - t
            t = time.perf_counter()
            data_path = teacher_data(teacher, out, a.games)
            times["teacher samples"] = time.perf_counter() - t
        teacher_row = score(teacher, a.eval_episodes)
        print(json.dumps({"teacher": teacher_row}), flush=True)
        results = {}
        for seed in a.seeds:
            rows = run_seed(a, seed, teacher, data_path, out)
            results[seed] = {"rows": rows, "summary": summary(rows)}
        print(f"\nteacher: X {teacher_row['X']:.3f}, O {teacher_row['O']:.3f}, score {teacher_row['score']:.3f}; "
              + ", ".join(f"{k} {v:.0f} s" for k, v in times.items()))
        print(f"{'seed':>4} {'arm':>8} {'step':>5} {'cpu s':>8} {'teacher s':>9} {'X':>6} {'O':>6} {'score':>6}")
        for seed, res in results.items():
            for r in res["rows"]:
                print(f"{seed:>4} {r['arm']:>8} {r['step']:>5} {r['cpu_s']:>8.1f} {r.get('teacher_s_total', 0):>9.1f} "
                      f"{r['X']:>6.3f} {r['O']:>6.3f} {r['score']:>6.3f}")
        for seed, res in results.items():
            s = res["summary"]
            print(f"seed {seed}: SFT {s['sft_final']:.3f} in {s['sft_cpu_s']:.0f} CPU s; distillation best "
                  f"{s['distill_best']:.3f} in {s['distill_cpu_s']:.0f} CPU s; "
                  + (f"reached SFT's final score in {s['distill_cpu_to_sft_final']:.0f} CPU s: {s['ratio']:.2f}x SFT's"
                     if s["ratio"] is not None else "did not reach SFT's final score"))
        for seed, res in results.items():
            ratio = res["summary"]["ratio"]
            print(f"ratio (distillation CPU s to SFT's final score / SFT's CPU s), seed {seed}: "
                  + (f"{ratio:.2f}x" if ratio is not None else "n/a, not reached"))
        (out / "distill_vs_sft.json").write_text(json.dumps({"teacher": teacher_row, "seconds": times,
                                                             "results": results}, indent=2))


if __name__ == "__main__":
    main()
