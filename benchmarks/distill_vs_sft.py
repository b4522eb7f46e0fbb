"""On-policy distillation against SFT on the teacher's samples, from the same student start.

A tiny-10m teacher (SFT'd on a scripted expert's episodes: good, not perfect) and tiny-1m
students, on one task (`--task`): tic-tac-toe (the expert is the minimax player, as in
`teacher_student.py`; the score is the mean of X's and O's greedy win+draw rate against the
random opponent, half the games as X) or one reasoning-gym task (the expert answers each
entry with its own answer; the score is greedy accuracy on entries of another dataset seed).
Per seed:

1. the start: a fresh tiny-1m student after `--warm-steps` of SFT on the teacher's own
   kept episodes (rejection sampling), so that it answers in format at all;
2. SFT: `--sft-steps` more steps on the same data, evaluated along the way;
3. on-policy distillation: `--opd-steps` steps from the same start (the student samples,
   the teacher scores every token it wrote), evaluated along the way. `--opd-top-k K`
   (default 32) trains on the exact reverse KL to the teacher's K likeliest tokens at each
   position; `--opd-top-k 0` on the sampled tokens' log-ratio alone.

Compute is the student's training process CPU time (user + system, all threads) of the
training stages: for SFT its steps, for distillation its steps including the student's own
sampling and the teacher's scoring (reported apart, as `teacher s`). The teacher's training
and its rejection sampling are paid once and shared by every seed; they are printed, not
charged to either side. The last lines give, per seed, the compute distillation needed to
reach SFT's final score, as a ratio of SFT's.

    .venv/bin/python benchmarks/distill_vs_sft.py [--task tic_tac_toe] [--out DIR] [--teacher DIR] [--seeds 0 1 2]
    .venv/bin/python benchmarks/distill_vs_sft.py --task count_bits   # a reasoning-gym task
    .venv/bin/python benchmarks/distill_vs_sft.py --smoke   # CI: proves the code path in about a minute
"""

from __future__ import annotations

from ludic_core import openmp

openmp.configure()  # first: OpenMP's spin-wait, set before torch loads (ludic_core/openmp.py)

import argparse
import json
from dataclasses import dataclass
from typing import Any
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


@dataclass(frozen=True)
class Task:
    """What a comparison plays: the env (training and evaluation), the agent, the keep rule of the
    teacher's samples, the scripted expert the teacher learns from, and the score."""

    name: str
    env: Any
    eval_env: Any
    agent: Any
    keep: Any
    expert: Any  # a ScriptedPolicy
    eval_seed: int
    score_keys: tuple[str, ...]  # the score is their mean

    def score(self, model: str, episodes: int) -> dict[str, float]:
        from ludic_core.compose.policy import ModelPolicy, open_client
        from ludic_core.eval import evaluate_policy

        client, _ = open_client(ModelPolicy(model_path=model), None, None)
        m = evaluate_policy(client, self.eval_env, self.agent, temperature=0.0,
                            seeds=list(range(self.eval_seed, self.eval_seed + episodes)))
        parts = {k.split("/")[0]: m[k] for k in self.score_keys}
        return {**parts, "score": sum(parts.values()) / len(parts)}


def make_task(name: str) -> Task:
    """`tic_tac_toe`, or the name of one task of the reasoning-gym recipe's mix."""
    from ludic_core.compose.policy import ScriptedPolicy

    if name == "tic_tac_toe":
        from ludic_core.recipes.tic_tac_toe import AGENT, ENV, RECIPE

        return Task(name, ENV, ENV, AGENT, RECIPE.keep, ScriptedPolicy(policy="tic_tac_toe_minimax"), 100_000,
                    ("X/win_draw_rate", "O/win_draw_rate"))
    from ludic_core.recipes import reasoning_gym as rg

    if name not in rg.CONFIG:
        raise SystemExit(f"--task {name!r}: tic_tac_toe or one of the reasoning-gym recipe's tasks {sorted(rg.CONFIG)}")
    mix = {"tasks": {name: 1.0}, "config": {name: rg.CONFIG[name]}, "size": 100_000}
    env = rg.RECIPE.env.model_copy(update={"kwargs": {**mix, "seed": 0}})
    eval_env = rg.RECIPE.eval_env.model_copy(update={"kwargs": {**mix, "seed": 1}})
    return Task(name, env, eval_env, rg.RECIPE.agent, rg.RECIPE.keep,
                ScriptedPolicy(policy=rg.RECIPE.teacher, kwargs={**mix, "seed": 0}), 0, (f"{name}/accuracy",))


def expert_teacher(task: Task, out: Path, steps: int, episodes: int) -> str:
    """A tiny-10m teacher: SFT on the expert's kept episodes (tic-tac-toe: `teacher_student.py`'s)."""
    if task.name == "tic_tac_toe":
        from teacher_student import train_teacher

        return train_teacher(out, steps, "tiny-10m", episodes)
    from ludic_core.config import SFT_TRAINER, SFTConfig
    from ludic_core.models import build_tiny_model
    from ludic_core.stages.run import DatasetData, StageSpec, run_stage

    base = build_tiny_model(out / "models" / "tiny-10m", "tiny-10m", seed=3)
    data = expert_samples(task, str(base), out, range(10_000, 10_000 + episodes))
    spec = StageSpec(model_path=str(base), checkpoint_dir=str(out / "teacher" / "checkpoints"), algorithm=SFTConfig(),
                     trainer=SFT_TRAINER.model_copy(update={"lr": 1e-3, "total_steps": steps}),
                     data=DatasetData(path=data), until_step=steps, title="teacher SFT")
    return run_stage(spec)["model_path"]


def smoke_teacher_and_data(task: Task, out: Path) -> tuple[str, str]:
    """The smoke's stand-ins, made in seconds: an untrained tiny-1m teacher, and the expert's
    kept episodes as SFT's data (the code path of both arms, not a result)."""
    from ludic_core.models import build_tiny_model

    teacher = str(build_tiny_model(out / "models" / "teacher", "tiny-1m", seed=3))
    return teacher, expert_samples(task, teacher, out, range(16))


def expert_samples(task: Task, model: str, out: Path, seeds: range) -> str:
    """The expert's episodes on `seeds`, kept by the task's rule, in `model`'s token ids: a saved dataset."""
    from ludic_core.compose.policy import open_client
    from ludic_core.models import load_model_and_tokenizer
    from ludic_core.rejection_sampling import rejection_sample

    _, tok = load_model_and_tokenizer(model)
    client, fingerprint = open_client(task.expert, tok)
    done = rejection_sample(client, task.env, task.agent, seeds=list(seeds), samples=1, keep=task.keep,
                            out_dir=out / "expert-samples", fingerprint=fingerprint)
    return str(done["dataset_path"])


def teacher_data(task: Task, teacher: str, out: Path, episodes: int) -> str:
    """The teacher's own episodes through the student's agent stack, kept by the task's rule."""
    from ludic_core.compose.policy import ModelPolicy, open_client
    from ludic_core.models import load_model_and_tokenizer, tokenizer_fingerprint
    from ludic_core.rejection_sampling import rejection_sample

    if (out / "teacher-samples" / "dataset").exists():
        return str(out / "teacher-samples" / "dataset")
    client, _ = open_client(ModelPolicy(model_path=teacher), None, None)
    _, tok = load_model_and_tokenizer(teacher)
    done = rejection_sample(client, task.env, task.agent, seeds=list(range(episodes)), samples=1, keep=task.keep,
                            out_dir=out / "teacher-samples", fingerprint=tokenizer_fingerprint(tok))
    print(f"teacher samples: kept {done['kept']:.0f} of {done['sampled']:.0f} episodes", flush=True)
    return str(done["dataset_path"])


def stage(model: str, ckpt: Path, algorithm, data, until: int, trainer) -> tuple[str, float]:
    from ludic_core.stages.run import StageSpec, run_stage

    spec = StageSpec(model_path=model, checkpoint_dir=str(ckpt), algorithm=algorithm, trainer=trainer, data=data,
                     until_step=until, metrics_path=str(ckpt.parent / "metrics.jsonl"))
    t = cpu_seconds()
    return run_stage(spec)["model_path"], cpu_seconds() - t


def arm(task: Task, name: str, start: str, out: Path, algorithm, data, marks: list[int], trainer,
        episodes: int) -> list[dict]:
    """Train from `start`, evaluating at each step count in `marks`: rows of (step, cpu s, score)."""
    rows, spent = [], 0.0
    for until in marks:
        model, cpu = stage(start, out / name / "checkpoints", algorithm, data, until, trainer)
        spent += cpu
        rows.append({"arm": name, "step": until, "cpu_s": round(spent, 1), **task.score(model, episodes)})
        print(json.dumps(rows[-1]), flush=True)
    teacher_s = 0.0
    metrics = out / name / "metrics.jsonl"
    if metrics.exists():
        teacher_s = sum(json.loads(line).get("teacher_seconds", 0.0) for line in metrics.read_text().splitlines())
    for r in rows:
        r["teacher_s_total"] = round(teacher_s, 1)
    return rows


def run_seed(a: argparse.Namespace, task: Task, seed: int, teacher: str, data_path: str, out: Path) -> list[dict]:
    from ludic_core.algorithms import DistillTeacher, OnPolicyDistillConfig
    from ludic_core.config import RL_TRAINER, SFT_TRAINER, SFTConfig
    from ludic_core.models import build_tiny_model
    from ludic_core.stages.run import DatasetData, RolloutData

    out = out / f"seed-{seed}"
    base = str(build_tiny_model(out / "student-base", "tiny-1m", seed=seed))
    data = DatasetData(path=data_path)
    warm_trainer = SFT_TRAINER.model_copy(update={"seed": seed, "total_steps": a.warm_steps})
    start, _ = stage(base, out / "start" / "checkpoints", SFTConfig(), data, a.warm_steps, warm_trainer)
    rows = [{"arm": "start", "step": 0, "cpu_s": 0.0, **task.score(start, a.eval_episodes)}]
    print(json.dumps(rows[-1]), flush=True)
    sft_trainer = SFT_TRAINER.model_copy(update={"seed": seed, "lr": a.sft_lr, "warmup_steps": 0,
                                                 "total_steps": a.sft_steps})
    rows += arm(task, "sft", start, out, SFTConfig(), data, _marks(a.sft_steps, a.evals), sft_trainer,
                a.eval_episodes)
    opd = OnPolicyDistillConfig(teacher=DistillTeacher(model_path=teacher), top_k=a.opd_top_k or None)
    opd_trainer = RL_TRAINER.model_copy(update={"seed": seed, "lr": a.opd_lr, "max_seq_len": 1024,
                                                "warmup_steps": a.opd_warmup})
    rollouts = RolloutData(env=task.env, agent=task.agent, requests_per_step=a.opd_requests)
    rows += arm(task, "distill", start, out, opd, rollouts, _marks(a.opd_steps, a.evals), opd_trainer,
                a.eval_episodes)
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
    ap.add_argument("--task", default="tic_tac_toe", help="tic_tac_toe, or one reasoning-gym task of the recipe's mix "
                                                           "(basic_arithmetic, count_bits, spell_backward)")
    ap.add_argument("--out", help="the run's directory (default runs/distill_vs_sft/TASK; with --smoke a temporary "
                                  "one)")
    ap.add_argument("--teacher", help="an already trained teacher model dir (e.g. teacher_student.py's)")
    ap.add_argument("--teacher-steps", type=int, default=300)
    ap.add_argument("--expert-episodes", type=int, default=4096, help="the expert's episodes the teacher learns from")
    ap.add_argument("--games", type=int, default=1024, help="teacher episodes sampled for SFT (kept by the task's "
                                                            "rule)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--warm-steps", type=int, default=300, help="the start's SFT steps (100 left a student that "
                                                                 "barely reads the board: docs/results.md)")
    ap.add_argument("--sft-steps", type=int, default=300)
    ap.add_argument("--sft-lr", type=float, default=1e-3)
    ap.add_argument("--opd-steps", type=int, default=30)
    ap.add_argument("--opd-lr", type=float, default=3e-4)
    ap.add_argument("--opd-top-k", type=int, default=32, help="the teacher's likeliest tokens the KL is exact over "
                                                              "(0: the sampled tokens' log-ratio)")
    ap.add_argument("--opd-requests", type=int, default=32, help="episodes the student plays per distillation step")
    ap.add_argument("--opd-warmup", type=int, default=5, help="distillation's lr warm-up steps (none: the first "
                                                              "steps at full lr broke a weak student's play)")
    ap.add_argument("--evals", type=int, default=3, help="evaluations along each arm")
    ap.add_argument("--eval-episodes", type=int, default=200)
    ap.add_argument("--smoke", action="store_true",
                    help="CI: an untrained teacher, the expert's episodes as SFT's data, 2 steps per arm")
    a = ap.parse_args()
    if a.smoke:
        a.seeds = [0]
        a.warm_steps, a.sft_steps, a.opd_steps, a.evals, a.eval_episodes, a.opd_requests, a.opd_warmup = \
            2, 2, 2, 1, 2, 2, 0
    with tempfile.TemporaryDirectory(prefix="ludic-distill-smoke-") as tmp:
        out = Path(a.out or (tmp if a.smoke else f"runs/distill_vs_sft/{a.task}"))
        task = make_task(a.task)
        times = {}
        if a.smoke:
            teacher, data_path = smoke_teacher_and_data(task, out)
        else:
            t = time.perf_counter()
            teacher = a.teacher or expert_teacher(task, out, a.teacher_steps, a.expert_episodes)
            times["teacher SFT"] = time.perf_counter() - t
            t = time.perf_counter()
            data_path = teacher_data(task, teacher, out, a.games)
            times["teacher samples"] = time.perf_counter() - t
        teacher_row = task.score(teacher, a.eval_episodes)
        print(json.dumps({"teacher": teacher_row}), flush=True)
        results = {}
        for seed in a.seeds:
            rows = run_seed(a, task, seed, teacher, data_path, out)
            results[seed] = {"rows": rows, "summary": summary(rows)}
        parts = [k for k in teacher_row if k != "score"]
        print(f"\nteacher: " + ", ".join(f"{k} {v:.3f}" for k, v in teacher_row.items()) + "; "
              + ", ".join(f"{k} {v:.0f} s" for k, v in times.items()))
        print(f"{'seed':>4} {'arm':>8} {'step':>5} {'cpu s':>8} {'teacher s':>9} "
              + " ".join(f"{k[:8]:>8}" for k in parts) + f" {'score':>6}")
        for seed, res in results.items():
            for r in res["rows"]:
                print(f"{seed:>4} {r['arm']:>8} {r['step']:>5} {r['cpu_s']:>8.1f} {r.get('teacher_s_total', 0):>9.1f} "
                      + " ".join(f"{r[k]:>8.3f}" for k in parts) + f" {r['score']:>6.3f}")
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
