"""What does Prefect cost? The demo chain through Prefect vs the same library
calls with no Prefect, side by side, on identical (reduced) budgets.

Both sides do exactly the same work (the demo's settings, smaller budgets): build the tiny model, evaluate, rejection
sample, SFT in checkpointed stages, RL in checkpointed stages, evaluate after
each. The Prefect side runs `flows.demo.demo` on the embedded API (its start-up
counted separately); the plain side calls the ludic_core functions the tasks
wrap. Target: ratio <= 1.05x.

    .venv/bin/python benchmarks/orchestration_overhead.py [--sft-steps 30 --rl-steps 4]
    .venv/bin/python benchmarks/orchestration_overhead.py --smoke   # CI: both chains, 1 SFT and 1 RL step
"""

from __future__ import annotations

from ludic_core import openmp

openmp.configure()  # first: OpenMP's spin-wait, set before torch loads (ludic_core/openmp.py)

import argparse
import shutil
import tempfile
import time
from pathlib import Path


def plain_chain(run: Path, a: argparse.Namespace) -> None:
    from ludic_core.config import RL_TRAINER, SFT_TRAINER, GRPOConfig, SFTConfig
    from ludic_core.inference import LocalChatClient
    from ludic_core.models import build_tiny_model, load_model_and_tokenizer
    from ludic_core.recipes.tic_tac_toe import evaluate_tic_tac_toe, keep_by_reward, teacher_rollouts
    from ludic_core.rejection import rollouts_to_dataset, save_dataset
    from ludic_core.models import tokenizer_fingerprint
    from ludic_core.recipes.tic_tac_toe import AGENT, ENV
    from ludic_core.stages.run import DatasetData, RolloutData, StageSpec, run_stage

    model = str(build_tiny_model(run / "models" / "tiny-1m", "tiny-1m", seed=0))
    evaluate_tic_tac_toe(LocalChatClient(model), games_per_mark=a.eval_games)
    _, tok = load_model_and_tokenizer(model)
    (run / "rejection").mkdir(parents=True, exist_ok=True)
    rollouts = teacher_rollouts(tok, games=a.teacher_games, seed=1, jsonl_path=str(run / "rejection" / "r.jsonl"))
    kept = keep_by_reward(rollouts, min_reward=1.0)[0]
    dataset = str(save_dataset(rollouts_to_dataset(kept, tokenizer=tokenizer_fingerprint(tok)), run / "rejection" / "dataset"))
    sft_trainer = SFT_TRAINER.model_copy(update={"total_steps": a.sft_steps})
    sft = StageSpec(model_path=model, checkpoint_dir=str(run / "sft" / "checkpoints"), algorithm=SFTConfig(),
                    trainer=sft_trainer, data=DatasetData(path=dataset), until_step=a.sft_steps,
                    metrics_path=str(run / "sft" / "metrics.jsonl"))
    per = max(a.sft_steps // 4, 1)
    for target in list(range(per, a.sft_steps, per)) + [a.sft_steps]:
        res = run_stage(sft.model_copy(update={"until_step": target}))
    sft_model = res["model_path"]
    evaluate_tic_tac_toe(LocalChatClient(sft_model), games_per_mark=a.eval_games)
    rl = StageSpec(model_path=sft_model, checkpoint_dir=str(run / "rl" / "checkpoints"),
                   algorithm=GRPOConfig(group_size=8), data=RolloutData(env=ENV, agent=AGENT.model_copy(update={"sampling": AGENT.sampling.model_copy(update={"temperature": 0.7})})), until_step=a.rl_steps,
                   trainer=RL_TRAINER,
                   metrics_path=str(run / "rl" / "metrics.jsonl"))
    per = max(a.rl_steps // 2, 1)
    for target in list(range(per, a.rl_steps, per)) + [a.rl_steps]:
        res = run_stage(rl.model_copy(update={"until_step": target}))
    evaluate_tic_tac_toe(LocalChatClient(res["model_path"]), games_per_mark=a.eval_games)


def prefect_chain(run: Path, a: argparse.Namespace) -> None:
    from flows.demo import DemoConfig, demo

    demo(DemoConfig(run_dir=str(run), teacher_episodes=a.teacher_games, sft_steps=a.sft_steps, rl_steps=a.rl_steps,
                    eval_episodes=2 * a.eval_games, progress_bar=False))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--teacher-games", type=int, default=256)
    ap.add_argument("--sft-steps", type=int, default=30)
    ap.add_argument("--rl-steps", type=int, default=4)
    ap.add_argument("--eval-games", type=int, default=50)
    ap.add_argument("--smoke", action="store_true",
                    help="CI: 8 teacher games, 1 SFT step, 1 RL step, 1 game per mark per evaluation")
    a = ap.parse_args()
    if a.smoke:
        a.teacher_games, a.sft_steps, a.rl_steps, a.eval_games = 8, 1, 1, 1
    root = Path(tempfile.mkdtemp(prefix="ludic-orch-"))
    try:
        t = time.perf_counter()
        from prefect import flow

        @flow
        def _warm() -> None:  # start the embedded API once, outside both timings
            return None

        _warm()
        startup = time.perf_counter() - t
        t = time.perf_counter(); plain_chain(root / "plain", a); plain = time.perf_counter() - t
        t = time.perf_counter(); prefect_chain(root / "prefect", a); pref = time.perf_counter() - t
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{'chain':<26}{'seconds':>9}")
    print(f"{'plain library calls':<26}{plain:>9.1f}")
    print(f"{'Prefect flows + tasks':<26}{pref:>9.1f}")
    print(f"ratio (Prefect / plain): {pref / plain:.3f}x   (target <= 1.05x); "
          f"embedded API start-up, paid once per process: {startup:.1f} s")


if __name__ == "__main__":
    main()
