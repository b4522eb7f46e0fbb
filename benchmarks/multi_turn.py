"""Multi-turn rollout throughput: full tic-tac-toe games through RolloutEngine + LocalChatClient.

64 games of the demo's env (the `tic_tac_toe` recipe: the built-in random opponent,
seats alternating X / O by env seed) played by the demo's agent (the observation as the
only message, <move>N</move> parsed, one malformed reply ends the game, at most 24 new
tokens a turn) at T=0.7, the way the demo's evaluation plays them (`evaluate_policy`:
`build_engine` + `episode_requests`, up to 9 turns a game), on the tiny model briefly
SFT'd on the teacher's games (benchmarks/_tic_tac_toe_policy.py: a random-weights model
ends every game on its first reply, which leaves no turns to batch). Games end at
different turns, so later turns have fewer live games: how the client batches them is
what is measured.

Contestants (one `make_client` builds both, so they differ only in that flag):
- "batched per turn": `continuous_batching=False`: requests that arrive while a batch
  decodes wait for it to finish (a plain batched `generate` per turn);
- "continuous": `continuous_batching=True`: arrivals join the running decode loop.
A LocalChatClient without that parameter runs the first alone (a note says so).
Why the comparison is fair: the same saved weights (each contestant its own copy),
the same 64 env seeds and sampling seeds every run (per-row seeded sampling, so both
play the same games unless batch composition moves a logit), the same engine settings;
each contestant is warmed up once, then runs are interleaved A B, B A, ... and medians
reported. Printed per contestant: episodes/s and turns/s (median run), the client's
decode batches and requests per batch (its `stats`, per run), and where the client
counts decode steps, completion tokens per decode step (the mean number of live rows,
i.e. the real batch size), and the replies' token counts. Nothing is asserted about
time. Measured with the default warm start: every reply is 14-16 tokens, so a turn's
replies finish together and the next turn's requests arrive together; both clients then
decode the same batches (the table's batches / decode steps say whether they did).
The first run also makes the warm-start model (about 1.5 min; shared with grpo_step.py
and cached), then the default run takes about 15 s.

    .venv/bin/python benchmarks/multi_turn.py [--preset tiny-1m] [--games 64] [--repeats 5]
    .venv/bin/python benchmarks/multi_turn.py --smoke   # CI: 2 games, one timed run, a 2-step warm start
"""

from __future__ import annotations

from ludic_core import openmp

openmp.configure()  # first: OpenMP's spin-wait, set before torch loads (ludic_core/openmp.py)

import argparse
import asyncio
import copy
import inspect
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _tic_tac_toe_policy import DEFAULT_SFT_STEPS, policy_dir, recipe, rl_agent  # noqa: E402

from ludic_core.inference import LocalChatClient  # noqa: E402

FIRST_SEED = 100_000  # the recipe's evaluation seeds


def supports_continuous() -> bool:
    return "continuous_batching" in inspect.signature(LocalChatClient.__init__).parameters


def make_client(model: Any, tok: Any, continuous: bool, *, max_batch_size: int = 64) -> LocalChatClient:
    """The one place a contestant's client is built: `continuous_batching=continuous` is
    passed only where LocalChatClient accepts it."""
    kwargs: dict[str, Any] = {"device": "cpu", "max_batch_size": max_batch_size}
    if supports_continuous():
        kwargs["continuous_batching"] = continuous
    return LocalChatClient(model, tok, **kwargs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", choices=["tiny-1m", "tiny-10m"], default="tiny-1m")
    ap.add_argument("--games", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5, help="timed runs per contestant (after one warm-up run)")
    ap.add_argument("--sft-steps", type=int, default=DEFAULT_SFT_STEPS,
                    help="warm-start SFT steps on the teacher's games (0: random weights); made once, cached")
    ap.add_argument("--model-dir", help="an existing HF model dir with the byte tokenizer (skips the warm start)")
    ap.add_argument("--smoke", action="store_true",
                    help="CI: 2 games, one timed run each, a 2-step SFT warm start (its replies rarely parse, so "
                         "games are short); proves the code path")
    args = ap.parse_args()
    if args.smoke:
        args.games, args.repeats, args.sft_steps = 2, 1, 2

    from ludic_core.compose.build import build_engine, episode_requests
    from ludic_core.models import load_model_and_tokenizer

    r = recipe()
    env, agent = r.env, rl_agent(r)
    model_dir = Path(args.model_dir) if args.model_dir else policy_dir(args.preset, args.sft_steps)
    model, tok = load_model_and_tokenizer(model_dir, dtype="float32")
    requests = episode_requests(env, agent, list(range(FIRST_SEED, FIRST_SEED + args.games)))

    names = {"batched per turn": False, "continuous": True}
    if not supports_continuous():
        print("note: LocalChatClient.__init__ takes no `continuous_batching`: running 'batched per turn' "
              "only (the client's one behaviour)")
        names = {"batched per turn": False}
    clients = {name: make_client(copy.deepcopy(model), tok, flag, max_batch_size=args.games)
               for name, flag in names.items()}
    engines = {name: build_engine(env, agent, c, max_concurrency=args.games) for name, c in clients.items()}

    runs: dict[str, list[dict[str, float]]] = {name: [] for name in names}

    def play(name: str) -> dict[str, float]:
        client = clients[name]
        before = dict(client.stats)
        t0 = time.perf_counter()
        rollouts = asyncio.run(engines[name].generate_rollouts(requests, max_steps=agent.max_turns))
        secs = time.perf_counter() - t0
        delta = {k: v - before.get(k, 0) for k, v in client.stats.items() if isinstance(v, (int, float))}
        steps = [st for ro in rollouts for st in ro.steps]
        lengths = [len(st.trace.completion_token_ids) for st in steps if st.trace]
        return {"s": secs, "episodes": len(rollouts), "turns": len(steps), "tokens": sum(lengths),
                "min_len": min(lengths, default=0), "max_len": max(lengths, default=0),
                "failed": sum(ro.failed for ro in rollouts),
                "batches": delta.get("batches", float("nan")), "requests": delta.get("requests", float("nan")),
                "decode_steps": delta.get("decode_steps", float("nan"))}

    order = list(names)
    for rep in range(args.repeats + 1):  # round 0 is the warm-up
        for name in order if rep % 2 == 0 else order[::-1]:
            run = play(name)
            if rep:
                runs[name].append(run)

    print(f"cpu, {torch.get_num_threads()} threads; torch {torch.__version__}; model {model_dir}; "
          f"{args.games} games vs the {env.kwargs.get('opponent')} opponent, T={agent.sampling.temperature}, "
          f"<= {agent.sampling.max_tokens} tokens a turn, <= {agent.max_turns} turns; "
          f"{args.repeats} timed runs each after a warm-up")
    print(f"{'client':<18}{'episodes/s':>11}{'turns/s':>9}{'median s':>9}{'turns':>7}{'batches':>8}"
          f"{'req/batch':>10}{'dec steps':>10}{'rows/step':>10}")
    eps = {}
    for name in names:
        rs = runs[name]
        med = statistics.median(x["s"] for x in rs)
        turns = statistics.median(x["turns"] for x in rs)
        batches = statistics.median(x["batches"] for x in rs)
        req_per_batch = statistics.median(x["requests"] / x["batches"] if x["batches"] else float("nan") for x in rs)
        dec = statistics.median(x["decode_steps"] for x in rs)
        rows = statistics.median(x["tokens"] / x["decode_steps"] if x["decode_steps"] else float("nan") for x in rs)
        eps[name] = args.games / med
        print(f"{name:<18}{args.games / med:>11.1f}{turns / med:>9.1f}{med:>9.3f}{turns:>7.0f}{batches:>8.0f}"
              f"{req_per_batch:>10.1f}{dec:>10.0f}{rows:>10.1f}")
        failed = sum(x["failed"] for x in rs)
        if failed:
            print(f"  ({failed} failed episodes over {len(rs)} runs)")
    lens = [x for n in names for x in runs[n]]
    print(f"reply tokens: mean {sum(x['tokens'] for x in lens) / max(sum(x['turns'] for x in lens), 1):.1f}, "
          f"min {min(x['min_len'] for x in lens)}, max {max(x['max_len'] for x in lens)}; turns per game "
          f"{statistics.median(x['turns'] for x in lens) / args.games:.2f}")
    if len(eps) == 2:
        a, b = eps["continuous"], eps["batched per turn"]
        print(f"ratio (continuous / batched per turn) episodes/s: {a / b:.2f}x")
    else:
        print("ratio (continuous / batched per turn) episodes/s: n/a, LocalChatClient has no continuous_batching")
    print("all run seconds: " + " | ".join(f"{n} " + " ".join(f"{x['s']:.2f}" for x in runs[n]) for n in names))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
