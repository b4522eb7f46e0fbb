"""A tic-tac-toe policy for benchmarks to roll out: the tiny model, briefly SFT'd on the teacher.

Shared by benchmarks/grpo_step.py and benchmarks/multi_turn.py (not a benchmark itself).

Why not the random-weights model: it never writes "<move>N</move>" and an end of turn
within 24 tokens, so every reply is cut off at the token limit, every game ends on its
first turn with the same -1, and every GRPO group has zero spread. A timing on that is
a timing of nothing the demo does: no variable completion lengths, no multi-turn games,
no advantage to train on. So the model first gets `sft_steps` steps of SFT on the
demo's data (the minimax teacher's games through the recipe's agent, as rejection
sampling keeps them; 64 moves a step at the demo's peak lr 2e-3, 10 warm-up steps, then
constant), few enough that it is still unsure. Measured on tiny-1m (64 games, T=0.7):
after 10 steps no reply parses; after 40 (the default) about half of the one-move
groups of 8 (GRPO's unit) disagree on the reward, and full games last about 3 turns,
most ending on an illegal move, the rest in wins and losses; by 70 steps every first
move is legal and optimal, so every one-move group is uniform again.
The result is saved once under runs/bench/ (or the temp dir) and reused; every
contestant of a benchmark loads the same saved weights.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from ludic_core.compose.configs import AgentConfig
from ludic_core.recipes.recipe import Recipe

TEACHER_GAMES = 512
SFT_BATCH = 64
SFT_LR = 2e-3  # flows.demo.DemoConfig.sft_lr
DEFAULT_SFT_STEPS = 40


def bench_root() -> Path:
    """runs/bench when run from the repo root (like rollout_throughput.py), else the temp dir."""
    return Path("runs/bench") if Path("runs").is_dir() else Path(tempfile.gettempdir()) / "ludic_bench"


def recipe() -> Recipe:
    """The tic-tac-toe recipe with the RL task these benchmarks measure, pinned: T 0.7, lr 3e-5,
    the game's outcome plus move shaping 0.5 (an illegal move -2). The demo's RL settings moved
    on (2026-11-30: per-move regret only, T 1.0); the benchmarks' timings and the time-to-target
    curves stay comparable with the runs on docs/results.md."""
    from ludic_core.recipes.recipe import get_recipe

    return get_recipe("tic_tac_toe").model_copy(update={
        "rl_temperature": 0.7, "rl_lr": 3e-5, "rl_env_kwargs": {"move_shaping": 0.5}})


def rl_agent(r: Recipe) -> AgentConfig:
    """The recipe's agent at its RL temperature (flows.demo.rl_agent, without importing Prefect)."""
    return r.agent.model_copy(update={"sampling": r.agent.sampling.model_copy(
        update={"temperature": r.rl_temperature})})


def policy_dir(preset: str, sft_steps: int, *, seed: int = 0, log=print) -> Path:
    """The model directory every contestant loads: `preset` built offline (seed `seed`), then
    `sft_steps` SFT steps on the teacher's games (0: the random-weights model itself)."""
    from ludic_core.models import build_tiny_model

    root = bench_root()
    base = build_tiny_model(root / f"{preset}-seed{seed}", preset, seed=seed)
    if sft_steps <= 0:
        return base
    out = root / f"{preset}-seed{seed}-ttt-sft{sft_steps}"
    stamp = {"preset": preset, "seed": seed, "sft_steps": sft_steps, "teacher_games": TEACHER_GAMES,
             "batch": SFT_BATCH, "lr": SFT_LR, "schedule": "constant", "warmup_steps": 10}
    stamp_file = out / "ludic_bench_sft.json"
    if stamp_file.exists() and json.loads(stamp_file.read_text()) == stamp:
        return out
    from ludic_core.algorithms import make_sft
    from ludic_core.batching.saw import build_saw_batch
    from ludic_core.batching.sources import OfflineBatchSource
    from ludic_core.config import RL_TRAINER
    from ludic_core.models import load_model_and_tokenizer
    from ludic_core.recipes.tic_tac_toe import teacher_rollouts
    from ludic_core.training.trainer import Trainer

    t0 = time.perf_counter()
    model, tok = load_model_and_tokenizer(base, dtype="float32")
    games = teacher_rollouts(tok, games=TEACHER_GAMES, seed=seed)
    items = build_saw_batch(games, [[1.0] * g.length for g in games]).items
    for item in items:  # SFT needs no sampler log-probs (the scripted teacher has none)
        item.actor_logprobs = None
    cfg = RL_TRAINER.model_copy(update={"lr": SFT_LR, "warmup_steps": 10, "device": "cpu", "seed": seed})
    trainer = Trainer(model, make_sft(), OfflineBatchSource(items, batch_size=SFT_BATCH, seed=seed), cfg,
                      tokenizer=tok)
    log(f"(one-time warm start: {sft_steps} SFT steps of {preset} on {len(items)} teacher moves "
        f"from {TEACHER_GAMES} games -> {out})")
    last = trainer.train(sft_steps)[-1]
    out.mkdir(parents=True, exist_ok=True)
    trainer.model.save_pretrained(out)
    tok.save_pretrained(out)
    stamp_file.write_text(json.dumps(stamp))
    log(f"(warm start done in {time.perf_counter() - t0:.0f} s, final SFT loss {last['loss']:.3f})")
    return out
