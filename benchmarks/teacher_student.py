"""Teacher != student, through the flows: a served teacher, and one with another tokenizer.

1. A teacher: a tiny-10m model SFT'd on the minimax teacher's tic-tac-toe games
   (library calls; `--teacher DIR` reuses one).
2. The `rejection_sampling` flow with the teacher served by vLLM (CPU build):
   same tokenizer as the student, so the dataset carries exact token ids;
   the `sft` flow trains a fresh tiny-1m student on them.
3. A copy of the teacher whose tokenizer has extra tokens (another vocabulary,
   so another fingerprint), as an in-process model teacher: the dataset holds
   chat messages only, and `sft` renders them with the student's template.
4. The `evaluate` flow on each teacher and student: X and O win+draw vs random.

    .venv/bin/python benchmarks/teacher_student.py [--out runs/teacher_student] [--teacher DIR]
    .venv/bin/python benchmarks/teacher_student.py --smoke   # CI: a 60-step tiny-1m teacher, 16 prompts

The last lines are each student's win+draw (X + O) over its teacher's.
"""

from __future__ import annotations

from ludic_core import openmp

openmp.configure()  # first: OpenMP's spin-wait, set before torch loads (ludic_core/openmp.py)

import argparse
import json
import tempfile
import time
from pathlib import Path


def train_teacher(out: Path, steps: int, preset: str, games: int = 4096) -> str:
    from ludic_core.config import SFT_TRAINER, SFTConfig
    from ludic_core.models import build_tiny_model, load_model_and_tokenizer, tokenizer_fingerprint
    from ludic_core.recipes.tic_tac_toe import RECIPE, teacher_rollouts
    from ludic_core.rejection import keep_episodes, rollouts_to_dataset, save_dataset
    from ludic_core.stages.run import DatasetData, StageSpec, run_stage

    base = build_tiny_model(out / "models" / preset, preset, seed=3)
    _, tok = load_model_and_tokenizer(base)
    kept, _ = keep_episodes(teacher_rollouts(tok, games=games, seed=11), RECIPE.keep)
    data = save_dataset(rollouts_to_dataset(kept, tokenizer=tokenizer_fingerprint(tok)), out / "teacher-data")
    spec = StageSpec(model_path=str(base), checkpoint_dir=str(out / "teacher" / "checkpoints"), algorithm=SFTConfig(),
                     trainer=SFT_TRAINER.model_copy(update={"lr": 1e-3, "total_steps": steps}),
                     data=DatasetData(path=str(data)), until_step=steps, progress_bar=True, title="teacher SFT")
    return run_stage(spec)["model_path"]


def foreign_copy(teacher: str, out: Path) -> str:
    """The teacher with 16 extra vocabulary entries: same behaviour, another tokenizer."""
    from ludic_core.models import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer(teacher)
    tok.add_tokens([f"<extra_{i}>" for i in range(16)])
    model.resize_token_embeddings(len(tok))
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return str(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="the run's directory (default runs/teacher_student; with --smoke a temporary one)")
    ap.add_argument("--teacher", help="an already trained teacher model dir")
    ap.add_argument("--teacher-preset", default="tiny-10m")
    ap.add_argument("--teacher-steps", type=int, default=300)
    ap.add_argument("--prompts", type=int, default=2048)
    ap.add_argument("--sft-steps", type=int, default=400)
    ap.add_argument("--eval-episodes", type=int, default=400)
    ap.add_argument("--smoke", action="store_true",
                    help="CI: a tiny-1m teacher of 60 SFT steps, 16 prompts, 1 student SFT step, 2 evaluation "
                         "games; proves the code path (the vLLM teacher too)")
    a = ap.parse_args()
    if a.smoke:
        a.teacher_preset, a.teacher_steps, a.prompts, a.sft_steps, a.eval_episodes = "tiny-1m", 60, 16, 1, 2
    with tempfile.TemporaryDirectory(prefix="ludic-teacher-student-smoke-") as tmp:
        a.out = a.out or (tmp if a.smoke else "runs/teacher_student")
        run(a)


def run(a: argparse.Namespace) -> None:
    from flows.evaluate import EvaluateConfig, evaluate
    from flows.policies import VLLMPolicy
    from flows.rejection_sampling import RejectionSamplingConfig, rejection_sampling
    from flows.sft import SupervisedFinetuneConfig, sft
    from ludic_core.compose.policy import ModelPolicy
    from ludic_core.config import SFT_TRAINER
    from ludic_core.models import build_tiny_model
    from ludic_core.recipes.tic_tac_toe import AGENT, ENV, RECIPE
    from ludic_core.rejection import KeepRule
    from ludic_core.vllm.server import VLLMServerConfig

    out, times = Path(a.out), {}
    t = time.perf_counter()
    teacher = a.teacher or train_teacher(out, a.teacher_steps, a.teacher_preset, 64 if a.smoke else 4096)
    times["teacher SFT"] = time.perf_counter() - t
    foreign = foreign_copy(teacher, out / "foreign-teacher")
    student_base = str(build_tiny_model(out / "models" / "student-tiny-1m", "tiny-1m", seed=0))
    trainer = SFT_TRAINER.model_copy(update={"total_steps": a.sft_steps})

    def score(model: str) -> dict[str, float]:
        return evaluate(EvaluateConfig(policy=ModelPolicy(model_path=model), env=ENV, agent=AGENT,
                                       episodes=a.eval_episodes))

    # a smoke's teacher (60 SFT steps of tiny-1m) writes a move only greedily, and never wins: it samples at
    # temperature 0 and keeps every episode (the same code path; nothing to learn from)
    keep = KeepRule() if a.smoke else RECIPE.keep
    sampler = AGENT.model_copy(update={"sampling": AGENT.sampling.model_copy(update={"temperature": 0.0})}) \
        if a.smoke else AGENT
    rows = []
    vllm = VLLMPolicy(model_path=teacher, server=VLLMServerConfig(log_dir=str(out / "vllm-logs")))
    for name, policy in (("vllm", vllm), ("foreign", ModelPolicy(model_path=foreign))):
        t = time.perf_counter()
        data = rejection_sampling(RejectionSamplingConfig(
            env=ENV, agent=sampler, teacher=policy, student_path=student_base, prompts=a.prompts, keep=keep,
            out_dir=str(out / f"rejection-{name}")))
        done = json.loads((out / f"rejection-{name}" / "done.json").read_text())
        times[f"rejection sampling ({name})"] = time.perf_counter() - t
        t = time.perf_counter()
        student = sft(SupervisedFinetuneConfig(model_path=student_base, dataset_path=data,
                                               out_dir=str(out / f"sft-{name}"), steps=a.sft_steps, trainer=trainer))
        times[f"student SFT ({name})"] = time.perf_counter() - t
        teacher_dir = teacher if name == "vllm" else foreign
        for who, model in ((f"teacher ({name})", teacher_dir), (f"student of {name} teacher", student)):
            m = score(model)
            rows.append({"policy": who, "data": "token ids" if done["token_ids"] else "messages",
                         "kept": int(done["kept"]), **{k: round(m[k], 3) for k in
                                                       ("X/legal_move_rate", "X/win_draw_rate", "O/legal_move_rate",
                                                        "O/win_draw_rate")}})
    print(f"\n{'policy':<26}{'data':>11}{'kept':>6}{'X legal':>9}{'X w+d':>7}{'O legal':>9}{'O w+d':>7}")
    for r in rows:
        print(f"{r['policy']:<26}{r['data']:>11}{r['kept']:>6}{r['X/legal_move_rate']:>9.3f}"
              f"{r['X/win_draw_rate']:>7.3f}{r['O/legal_move_rate']:>9.3f}{r['O/win_draw_rate']:>7.3f}")
    print("\n" + "\n".join(f"{k}: {v:.0f} s" for k, v in times.items()))
    by = {r["policy"]: r["X/win_draw_rate"] + r["O/win_draw_rate"] for r in rows}
    for name in ("vllm", "foreign"):
        teacher, student = by[f"teacher ({name})"], by[f"student of {name} teacher"]
        print(f"ratio (student / teacher) X + O win+draw, {name} teacher: "
              + (f"{student / teacher:.2f}x" if teacher > 0 else "n/a, the teacher scored 0"))
    (out / "teacher_student.json").write_text(json.dumps({"rows": rows, "seconds": times}, indent=2))


if __name__ == "__main__":
    main()
