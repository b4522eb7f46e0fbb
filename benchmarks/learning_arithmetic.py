"""GRPO on the offline arithmetic task: accuracy before and after.

A tiny model first learns the answer format (and what it can of the sums) by
short SFT on generated problems with their answers, then GRPO rewards correct
answers on the training problems. Accuracy is greedy on held-out problems.

    .venv/bin/python benchmarks/learning_arithmetic.py [--out runs/arith]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

from ludic_core.agents import Agent
from ludic_core.algorithms import make_grpo, make_sft
from ludic_core.batching.sources import OfflineBatchSource, RolloutBatchSource
from ludic_core.config import TrainerConfig
from ludic_core.envs import ArithmeticEnv, gsm8k_target_parser, generate_arithmetic_problems
from ludic_core.envs.arithmetic import ARITHMETIC_SYSPROMPT
from ludic_core.inference import InferenceSpec, LocalChatClient, SamplingConfig
from ludic_core.interaction import SingleAgentSyncProtocol
from ludic_core.logging import ConsoleLogger
from ludic_core.models import build_tiny_model, load_model_and_tokenizer
from ludic_core.parsers import xml_tag_parser
from ludic_core.publish import InProcessPublisher
from ludic_core.rollout import EnvSpec, GRPORequestStrategy, ProtocolSpec, RolloutEngine, RolloutRequest
from ludic_core.training.trainer import Trainer

TRAIN_SEED, TEST_SEED = 0, 1


def engine_for(client) -> RolloutEngine:
    return RolloutEngine({"arithmetic": ArithmeticEnv},
                         {"qa": lambda: SingleAgentSyncProtocol(Agent(client, parser=xml_tag_parser("answer")))})


def requests(n: int, *, problems: int, seed: int, start: int, temperature: float) -> list[RolloutRequest]:
    spec = InferenceSpec(sampling=SamplingConfig(temperature=temperature, max_tokens=20))
    env = EnvSpec(kind="arithmetic", kwargs={"n": problems, "seed": seed, "difficulty": "easy"})
    return [RolloutRequest(env=env, protocol=ProtocolSpec(kind="qa"), env_seed=start + i,
                           sampling_seed=start + i, inference=spec) for i in range(n)]


def accuracy(client, n: int) -> float:
    rs = asyncio.run(engine_for(client).generate_rollouts(
        requests(n, problems=n, seed=TEST_SEED, start=0, temperature=0.0), max_steps=1))
    return sum(r.total_reward > 0 for r in rs) / len(rs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/arith")
    ap.add_argument("--train-problems", type=int, default=4000)
    ap.add_argument("--sft-steps", type=int, default=400)
    ap.add_argument("--rl-steps", type=int, default=30)
    ap.add_argument("--eval", type=int, default=300)
    args = ap.parse_args()
    out = Path(args.out)
    model_dir = build_tiny_model(out / "models" / "tiny-1m", "tiny-1m", seed=0)
    policy, tok = load_model_and_tokenizer(model_dir)
    client = LocalChatClient(*load_model_and_tokenizer(model_dir))
    publisher = InProcessPublisher(client)
    rows = [("untrained", accuracy(client, args.eval), 0.0)]

    t = time.perf_counter()
    examples = [{"messages": [{"role": "system", "content": ARITHMETIC_SYSPROMPT},
                              {"role": "user", "content": p["question"]},
                              {"role": "assistant", "content": f"<answer>{gsm8k_target_parser(p['answer'])}</answer>"}]}
                for p in generate_arithmetic_problems(args.train_problems, seed=TRAIN_SEED)]
    sft = Trainer(policy, make_sft(), OfflineBatchSource.from_chat_examples(examples, tok, batch_size=64),
                  TrainerConfig(lr=2e-3, warmup_steps=10, schedule="cosine", total_steps=args.sft_steps),
                  tokenizer=tok, publisher=publisher, loggers=[ConsoleLogger(args.sft_steps, ("loss",), "SFT")])
    sft.train(args.sft_steps)
    sft.close()
    rows.append(("after SFT", accuracy(client, args.eval), time.perf_counter() - t))

    t = time.perf_counter()
    grpo = make_grpo(group_size=8)
    source = RolloutBatchSource(
        engine_for(client),
        lambda i: requests(8, problems=args.train_problems, seed=TRAIN_SEED, start=i * 8, temperature=1.0),
        grpo, max_steps=1, strategy=GRPORequestStrategy(8, seed=0))
    rl = Trainer(policy, grpo, source, TrainerConfig(lr=1e-4), tokenizer=tok, publisher=publisher,
                 loggers=[ConsoleLogger(args.rl_steps, ("loss", "reward_mean"), "GRPO")])
    rl.train(args.rl_steps)
    rl.close()
    rows.append(("after GRPO", accuracy(client, args.eval), time.perf_counter() - t))

    print(f"\n{'stage':<12}{'held-out accuracy':>18}{'stage s':>9}")
    for name, acc, secs in rows:
        print(f"{name:<12}{acc:>18.3f}{secs:>9.1f}")
    (out / "arithmetic.json").write_text(json.dumps(rows))


if __name__ == "__main__":
    main()
