"""One GRPO step on the CPU, ludic vs TRL's GRPOTrainer, on the one-move tic-tac-toe task.

The task: the RL env `_tic_tac_toe_policy.recipe()` pins (the demo's until 2026-11-30: random
opponent, seats alternating by env seed, minimax-regret move shaping 0.5), one move per episode. A prompt is the board
the agent faces on its first turn (X: the empty board; O: after the opponent's opening);
a completion is one reply of at most 24 tokens; its reward is what the recipe's agent
and env give that reply: -1 if it is cut off at the token limit or does not parse as
<move>N</move>, else the env's reward for the move (an illegal cell -2 since 2026-11-30, -1
before; a legal one -0.5 x its regret). One step: 8 prompts x 8 completions at T=0.7, advantages within
each group of 8, one clipped-surrogate optimizer step, KL 0, no vLLM, fp32.

Why the comparison is fair:
- same weights: both load one saved model dir (the tiny preset built offline, then
  briefly SFT'd on the teacher's games: see benchmarks/_tic_tac_toe_policy.py; a
  random-weights model gives every reply the same -1 and every group zero spread);
- same prompts, rendered the same way: the env's observation as the only (user)
  message, through the tokenizer's chat template with the generation prompt; the run
  checks that TRL's rendering gives the token ids ludic's rollouts were decoded from;
- same reward: TRL's reward function replays each completion through the recipe's own
  parser and a fresh env reset with the prompt's seed; the run checks that it gives
  every one of ludic's warm-up rollouts the reward ludic's protocol gave it;
- same settings: 64 completions per step (TRL: per_device_train_batch_size 64,
  num_generations 8), max 24 new tokens, temperature 0.7, top_p 1, top_k 0, beta 0,
  eps 0.2, std-normalised group advantages, token-level loss normalisation (TRL's
  default `dapo`), AdamW lr 3e-5 (the recipe's RL lr) with betas (0.9, 0.95), no weight
  decay, a constant schedule, grad clip 1.0, one optimizer step per step, use_cpu;
- same machine state: one process, torch's default threads and OpenMP settings (the
  active wait policy `openmp.configure()` sets before torch loads: without it ludic's decode
  thread slows TRL's small ops too, ludic_core/openmp.py); steps are interleaved
  (ludic TRL, TRL ludic, ...) after one warm-up step each, medians reported, so drift
  on a shared machine hits both alike. TRL's train loop drives: ludic's steps run in a
  TRL callback between its steps, outside TRL's clock.
What each step time covers: ludic, `Trainer.train_step()` (rollouts through
RolloutEngine + LocalChatClient, credit, the update, publishing the new weights to the
client's own model copy); TRL, from handing control back to its loop to its next
`on_step_end` (batch fetch, generation with `model.generate`, rewards, the update,
and its per-step logging). Not identical work: ludic also returns the sampler's
per-token log-probs and builds its own episodes (env, agent, parser) per completion;
TRL scores the old policy's log-probs only when it needs them (it does not here). Where
ludic's Trainer leaves out items whose advantage is zero (a group whose 8 rewards are
equal), it says so in its step metrics (`skipped_items` / `skipped_tokens`, printed);
TRL runs forward and backward on all 64 completions. Where a group's completions share their
prompt, ludic's Trainer runs it once for them (`shared_prompt_positions`, printed); TRL runs
it once per completion. The warm start leaves about half
the groups with a reward spread, so both kinds of group are in every step.
Printed: median step seconds, split into the rollout part and the rest (the update),
mean completion tokens and mean reward per side, the ratio ludic / TRL (whole step and
per part) and every step's seconds. Nothing is asserted about time; the goal printed
is ludic step / TRL step <= 0.6x. The first run also makes the warm-start model (about
1.5 min for tiny-1m on 2 cores; cached), then the default run takes about 25 s.

    .venv/bin/python benchmarks/grpo_step.py                    # tiny-1m, 15 timed steps each
    .venv/bin/python benchmarks/grpo_step.py --preset tiny-10m --steps 3
    .venv/bin/python benchmarks/grpo_step.py --sft-steps 0      # random weights: every reward -1
    .venv/bin/python benchmarks/grpo_step.py --compile          # ludic's decode step compiled (inductor)
    .venv/bin/python benchmarks/grpo_step.py --smoke            # CI: one timed step each, a 2-step warm start
"""

from __future__ import annotations

from ludic_core import openmp

openmp.configure()  # first: OpenMP's spin-wait, set before torch loads (ludic_core/openmp.py)

import argparse
import copy
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _tic_tac_toe_policy import DEFAULT_SFT_STEPS, policy_dir, recipe, rl_agent  # noqa: E402

PROMPTS, GROUP, MAX_TOKENS, TEMPERATURE = 8, 8, 24, 0.7
SEED_START = 1_000  # flows.rl_train's default seed schedule starts there
GOAL = 0.6


def one_move_task(n_steps: int):
    """(env factory, env kwargs, seeds per step, one user message per seed, the recipe's parser)."""
    from ludic_core.compose.build import agent_factory, env_factory

    r = recipe()
    env, agent = r.rl_env, rl_agent(r)
    assert agent.sampling.max_tokens == MAX_TOKENS and agent.sampling.temperature == TEMPERATURE, agent.sampling
    make_env = env_factory(env)
    seeds = [[SEED_START + i * PROMPTS + k for k in range(PROMPTS)] for i in range(n_steps)]
    obs = {s: make_env(**env.kwargs).env_reset(seed=s)[0] for step in seeds for s in step}
    parser = agent_factory(agent)(None).parser
    return make_env, dict(env.kwargs), seeds, obs, parser


def make_reward(make_env, env_kwargs, parser, eos_ids: set[int], truncation_penalty: float):
    """The recipe's reward for one reply to seed `seed`'s board, as Agent + protocol + env give it."""

    def reward(text: str, completion_ids: list[int], seed: int) -> float:
        if not any(t in eos_ids for t in completion_ids):  # cut off at the token limit (Agent._finish)
            return truncation_penalty
        parsed = parser(text)
        if not parsed.ok:  # the env is not stepped; the parser's penalty is the step's reward
            return parsed.reward
        env = make_env(**env_kwargs)
        env.reset(seed=seed)
        (outcome,) = env.step({env.agent_ids[0]: parsed.action}).values()
        return outcome.reward + parsed.reward

    return reward


# ---- ludic ---------------------------------------------------------------------------
def ludic_trainer(model_dir: Path, seeds: list[list[int]], compile: bool | str = "auto", *, lr: float | None = None,
                  reuse: tuple[int, int] = (1, 1)):
    """ludic's Trainer on the one-move task; `reuse` = (mini-batches, epochs) per generated batch."""
    from ludic_core.algorithms import make_grpo
    from ludic_core.batching.sources import RolloutBatchSource
    from ludic_core.compose.build import build_engine, episode_requests
    from ludic_core.config import RL_TRAINER, RolloutReuse
    from ludic_core.inference import LocalChatClient
    from ludic_core.models import load_model_and_tokenizer
    from ludic_core.publish import InProcessPublisher
    from ludic_core.training.trainer import Trainer

    r = recipe()
    env, agent = r.rl_env, rl_agent(r)
    policy, tok = load_model_and_tokenizer(model_dir, dtype="float32")
    client = LocalChatClient(copy.deepcopy(policy), tok, device="cpu", max_batch_size=PROMPTS * GROUP,
                             compile=compile)
    engine = build_engine(env, agent, client, max_concurrency=PROMPTS * GROUP)
    algo = make_grpo(group_size=GROUP, kl_coef=0.0, reuse=RolloutReuse(mini_batches=reuse[0], epochs=reuse[1]))
    source = RolloutBatchSource(engine, lambda i: episode_requests(env, agent, seeds[i]), algo, max_steps=1,
                                strategy_seed=SEED_START, max_seq_len=512)
    cfg = RL_TRAINER.model_copy(update={"lr": lr or r.rl_lr, "device": "cpu", "seed": 0})
    trainer = Trainer(policy, algo, source, cfg, tokenizer=tok, publisher=InProcessPublisher(client))
    return trainer, source, client, tok


# ---- TRL -----------------------------------------------------------------------------
def trl_train(model_dir: Path, rows: list[dict], n_steps: int, reward_fn, on_step: Callable[..., Any], *,
              lr: float | None = None, num_iterations: int = 1):
    """Run TRL's GRPOTrainer for `n_steps`; call `on_step(model)` after each step, off its clock
    (a true return stops training). `num_iterations`: TRL's reuse of each generated batch.

    Returns the clock (per step: seconds, rollout seconds, mean completion length, mean
    reward), or None without TRL."""
    try:
        import datasets
        import trl
        from transformers import PrinterCallback, TrainerCallback
    except ImportError as exc:
        print(f"TRL GRPOTrainer: skipped: {exc.name} not installed (the dev extra pins trl)")
        return None
    from transformers.utils import logging as hf_logging

    from ludic_core.models import load_model_and_tokenizer

    hf_logging.set_verbosity_error()
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning)

    def env_reward(completions, completion_ids, seed, **_):
        return [reward_fn(c[0]["content"], list(ids), s) for c, ids, s in zip(completions, completion_ids, seed)]

    class StepClock(TrainerCallback):
        """TRL's step = from control coming back to its loop to its next on_step_end."""

        def __init__(self):
            self.steps, self.rollout, self.lengths, self.rewards, self.resumed = [], [], [], [], None

        def on_train_begin(self, *a, **kw):
            self.resumed = time.perf_counter()

        def on_step_end(self, _args, _state, control, **kw):
            self.steps.append(time.perf_counter() - self.resumed)
            if on_step(kw.get("model")):
                control.should_training_stop = True
            self.resumed = time.perf_counter()
            return control

        def on_log(self, _args, _state, _control, logs=None, **kw):
            if logs and "completions/mean_length" in logs:
                self.lengths.append(logs["completions/mean_length"])
                self.rewards.append(logs.get("reward", float("nan")))

    model, tok = load_model_and_tokenizer(model_dir, dtype="float32")
    clock = StepClock()
    with tempfile.TemporaryDirectory() as out:
        config = trl.GRPOConfig(
            output_dir=out, per_device_train_batch_size=PROMPTS * GROUP, gradient_accumulation_steps=1,
            num_generations=GROUP, max_completion_length=MAX_TOKENS, temperature=TEMPERATURE, top_p=1.0, top_k=0,
            beta=0.0, epsilon=0.2, scale_rewards="group", loss_type="dapo", num_iterations=num_iterations,
            use_vllm=False, gradient_checkpointing=False, bf16=False, use_cpu=True,
            learning_rate=lr or recipe().rl_lr, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
            adam_beta1=0.9, adam_beta2=0.95, max_grad_norm=1.0, max_steps=n_steps, logging_steps=1,
            report_to="none", save_strategy="no", shuffle_dataset=False, seed=0, disable_tqdm=True,
            dataloader_num_workers=0)
        trainer = trl.GRPOTrainer(model=model, reward_funcs=env_reward, args=config,
                                  train_dataset=datasets.Dataset.from_list(rows), processing_class=tok,
                                  callbacks=[clock])
        trainer.remove_callback(PrinterCallback)
        generate_and_score = trainer._generate_and_score_completions

        def timed(*a, **kw):  # TRL's rollout part: generation, rewards, advantages
            t0 = time.perf_counter()
            out = generate_and_score(*a, **kw)
            clock.rollout.append(time.perf_counter() - t0)
            return out

        trainer._generate_and_score_completions = timed
        trainer.train()
    print(f"(TRL {trl.__version__}, datasets {datasets.__version__})")
    return clock


# ---- the run -------------------------------------------------------------------------
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", choices=["tiny-1m", "tiny-10m"], default="tiny-1m")
    ap.add_argument("--steps", type=int, default=15, help="timed steps per contestant (after one warm-up step)")
    ap.add_argument("--sft-steps", type=int, default=DEFAULT_SFT_STEPS,
                    help="warm-start SFT steps on the teacher's games (0: random weights); made once, cached")
    ap.add_argument("--model-dir", help="an existing HF model dir with the byte tokenizer (skips the warm start)")
    ap.add_argument("--compile", action="store_true",
                    help="ludic decodes with a compiled step (inductor on the CPU; its one-off compile falls in "
                         "the warm-up step and is printed)")
    ap.add_argument("--smoke", action="store_true",
                    help="CI: one timed step each after the warm-up, a 2-step SFT warm start (cached; the one "
                         "benchmarks/multi_turn.py's smoke makes); proves the code path, measures nothing")
    args = ap.parse_args()
    if args.smoke:
        args.steps, args.sft_steps = 1, 2
    import transformers

    n = 1 + args.steps
    model_dir = Path(args.model_dir) if args.model_dir else policy_dir(args.preset, args.sft_steps)
    make_env, env_kwargs, seeds, obs, parser = one_move_task(n)
    trainer, source, client, tok = ludic_trainer(model_dir, seeds, compile=True if args.compile else "auto")
    from ludic_core.agents.agent import Agent

    reward_fn = make_reward(make_env, env_kwargs, parser, client._decoder.eos_ids,
                            Agent(None).truncation_penalty)
    n_params = sum(p.numel() for p in trainer.model.parameters())
    print(f"cpu, {torch.get_num_threads()} threads; torch {torch.__version__}, transformers "
          f"{transformers.__version__}; model {model_dir} ({n_params / 1e6:.2f}M params)")
    print(f"== GRPO step, one-move tic-tac-toe: {PROMPTS} prompts x {GROUP} completions, <= {MAX_TOKENS} new "
          f"tokens, T={TEMPERATURE}, KL 0, fp32, no vLLM; {args.steps} timed steps each after a warm-up step")

    ludic: list[dict[str, Any]] = []

    def ludic_step() -> None:
        t0 = time.perf_counter()
        metrics = trainer.train_step()
        secs = time.perf_counter() - t0
        rs = source.last_rollouts
        traces = [st.trace for r in rs for st in r.steps if st.trace]
        ludic.append({"s": secs, "rollout_s": source.engine.stats["seconds"], "metrics": metrics,
                      "len": sum(len(t.completion_token_ids) for t in traces) / max(len(traces), 1),
                      "reward": sum(r.total_reward for r in rs) / max(len(rs), 1)})
        if len(ludic) == 1:
            check_parity(rs, obs, tok, reward_fn)

    # interleaved: round 0 (warm-up) ludic TRL, round 1 TRL ludic, round 2 ludic TRL, ...
    order = [name for r in range(n) for name in (("ludic", "trl") if r % 2 == 0 else ("trl", "ludic"))]
    pos = [0]

    def run_ludic_until_trl() -> None:
        while pos[0] < len(order) and order[pos[0]] == "ludic":
            ludic_step()
            pos[0] += 1

    def after_trl_step(_model=None) -> None:
        pos[0] += 1  # the TRL step that just ended
        run_ludic_until_trl()

    run_ludic_until_trl()
    rows = [{"prompt": [{"role": "user", "content": obs[s]}], "seed": s} for step in seeds for s in step]
    trl_result = trl_train(model_dir, rows, n, reward_fn, after_trl_step)
    while len(ludic) < n:  # without TRL: the rest of ludic's steps
        ludic_step()

    timed = ludic[1:]
    med = statistics.median(x["s"] for x in timed)
    roll = statistics.median(x["rollout_s"] for x in timed)
    upd = statistics.median(x["s"] - x["rollout_s"] for x in timed)
    stats = client.stats
    signal = statistics.mean(x["metrics"].get("signal_groups", float("nan")) for x in timed)
    print(f"ludic decoded {stats.get('requests')} requests in {stats.get('batches')} batches "
          f"(largest {stats.get('max_batch')}); groups whose rewards differ: {signal:.1f} of {PROMPTS} a step")
    if stats.get("compile_seconds"):
        print(f"ludic's one-off decode compile (in its warm-up step): {stats['compile_seconds']:.1f} s")
    skipped = [(x["metrics"].get("skipped_items"), x["metrics"].get("skipped_tokens")) for x in timed]
    if any(a is not None or b is not None for a, b in skipped):
        print("ludic skipped_items / skipped_tokens per timed step: "
              + ", ".join(f"{a if a is None else int(a)}/{b if b is None else int(b)}" for a, b in skipped))
    else:
        print("ludic skipped_items / skipped_tokens: not reported by this Trainer")
    shared = [x["metrics"].get("shared_prompt_positions") for x in timed]
    if any(v is not None for v in shared):  # prompt positions run once for a group's rows
        print("ludic shared_prompt_positions per timed step: " + ", ".join(str(int(v or 0)) for v in shared))
    print(f"{'trainer':<18}{'median step s':>14}{'rollout s':>10}{'update s':>10}{'mean completion':>16}"
          f"{'mean reward':>12}")
    print(f"{'ludic':<18}{med:>14.3f}{roll:>10.3f}{upd:>10.3f}"
          f"{statistics.mean(x['len'] for x in timed):>16.1f}{statistics.mean(x['reward'] for x in timed):>+12.3f}")
    if not trl_result or len(trl_result.steps) < 2:
        return 1 if args.smoke else 0  # a smoke without its peer proves nothing (TRL: the dev extra)
    trl_med = statistics.median(trl_result.steps[1:])
    pairs = list(zip(trl_result.steps, trl_result.rollout))[1:]
    trl_roll = statistics.median(r for _, r in pairs) if pairs else float("nan")
    trl_upd = statistics.median(s - r for s, r in pairs) if pairs else float("nan")
    mean_len = statistics.mean(trl_result.lengths[1:]) if len(trl_result.lengths) > 1 else float("nan")
    mean_rew = statistics.mean(trl_result.rewards[1:]) if len(trl_result.rewards) > 1 else float("nan")
    print(f"{'TRL GRPOTrainer':<18}{trl_med:>14.3f}{trl_roll:>10.3f}{trl_upd:>10.3f}{mean_len:>16.1f}"
          f"{mean_rew:>+12.3f}")
    print("(medians over the timed steps. rollout s: ludic, RolloutEngine's episodes (decode, parse, env); TRL, "
          "_generate_and_score_completions (generate, decode, rewards, advantages). update s: the rest of the step)")
    ratio = med / trl_med
    print(f"ratio (ludic step s / TRL step s): {ratio:.2f}x   goal <= {GOAL}x: {'met' if ratio <= GOAL else 'NOT met'}"
          f"   rollout part: {roll / trl_roll:.2f}x   update part: {upd / trl_upd:.2f}x")
    print("all step seconds: ludic " + " ".join(f"{x['s']:.2f}" for x in ludic)
          + " | TRL " + " ".join(f"{s:.2f}" for s in trl_result.steps) + "  (first of each = warm-up)")
    return 0


def check_parity(rollouts, obs: dict[int, str], tok, reward_fn) -> None:
    """Print whether TRL's side sees ludic's prompt ids and scores ludic's replies the same."""
    same_prompt = same_reward = n = 0
    for r in rollouts:
        if r.failed or not r.steps or r.steps[0].trace is None:
            continue
        n += 1
        seed, step = r.meta["env_seed"], r.steps[0]
        ids = tok.apply_chat_template(conversation=[[{"role": "user", "content": obs[seed]}]],
                                      add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"][0]
        same_prompt += list(ids) == list(step.trace.prompt_token_ids)
        same_reward += abs(reward_fn(step.action, step.trace.completion_token_ids, seed) - r.total_reward) < 1e-9
    print(f"parity on ludic's warm-up rollouts: TRL-rendered prompt ids equal ludic's {same_prompt}/{n}; "
          f"TRL reward function equals ludic's reward {same_reward}/{n}")


if __name__ == "__main__":
    raise SystemExit(main())
