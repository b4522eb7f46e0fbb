"""`ludic` command line: the README's main command and small utilities.

`ludic demo` runs on the embedded default: CPU, a tiny model built offline,
in-process inference. Until the Prefect demo chain lands it collects real
tic-tac-toe rollouts (token ids + log-probs) from a scripted teacher and from
the untrained tiny LLM and prints what they achieve.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

__all__ = ["main"]


def _cmd_model(args: argparse.Namespace) -> int:
    from ludic_core.models import build_tiny_model

    out = build_tiny_model(args.out, args.preset, seed=args.seed, overwrite=args.overwrite)
    print(f"built {args.preset} (seed {args.seed}) at {out}")
    return 0


def _collect(client, requests, *, jsonl: Path, group_size: int):
    from ludic_core.agents import Agent
    from ludic_core.context import SlidingWindowContext
    from ludic_core.envs import TicTacToeEnv
    from ludic_core.interaction import SingleAgentSyncProtocol
    from ludic_core.parsers import xml_tag_parser
    from ludic_core.rollout import GRPORequestStrategy, RolloutEngine

    engine = RolloutEngine(
        {"tic_tac_toe": TicTacToeEnv},
        # The board is the whole state: the latest observation is all the model needs.
        {"single_agent": lambda: SingleAgentSyncProtocol(
            Agent(client, parser=xml_tag_parser("move"), context=SlidingWindowContext(1))
        )},
        jsonl_path=jsonl,
    )
    start = time.perf_counter()
    rollouts = asyncio.run(engine.generate_rollouts(
        requests, max_steps=9, strategy=GRPORequestStrategy(group_size, seed=0)
    ))
    return rollouts, time.perf_counter() - start


def _cmd_demo(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from ludic_core.envs import scripted_tic_tac_toe_policy
    from ludic_core.eval import tic_tac_toe_metrics
    from ludic_core.inference import InferenceSpec, LocalChatClient, SamplingConfig, ScriptedChatClient
    from ludic_core.models import build_tiny_model
    from ludic_core.rollout import EnvSpec, ProtocolSpec, RolloutRequest

    console = Console()
    out = Path(args.out)
    model_dir = build_tiny_model(out / "models" / "tiny-1m", "tiny-1m", seed=0)
    console.print(f"tiny model at [bold]{model_dir}[/bold]")
    llm = LocalChatClient(model_dir)
    spec = InferenceSpec(sampling=SamplingConfig(temperature=1.0, max_tokens=24))
    requests = [
        RolloutRequest(
            env=EnvSpec(kind="tic_tac_toe", kwargs={"opponent": "random", "agent_mark": mark}),
            protocol=ProtocolSpec(kind="single_agent"), env_seed=i, inference=spec,
        )
        for i in range(args.games // (2 * args.group_size)) for mark in ("X", "O")
    ]
    players = {
        "minimax teacher (scripted)": ScriptedChatClient(
            scripted_tic_tac_toe_policy("minimax", seed=0), llm.tokenizer
        ),
        "random-legal (scripted)": ScriptedChatClient(scripted_tic_tac_toe_policy("random", seed=0)),
        "tiny LLM, untrained": llm,
    }
    table = Table(title="tic-tac-toe vs a random opponent (rollouts with token traces)")
    for col in ("player", "games", "legal moves", "win+draw", "tokens", "seconds"):
        table.add_column(col, justify="right" if col != "player" else "left")
    for name, client in players.items():
        slug = name.split(" ")[0].replace(",", "")
        rollouts, secs = _collect(client, requests, jsonl=out / "demo" / f"{slug}.jsonl",
                                  group_size=args.group_size)
        m = tic_tac_toe_metrics(rollouts)
        tokens = sum(len(s.trace.completion_token_ids) for r in rollouts for s in r.steps if s.trace)
        table.add_row(name, f"{int(m['games'])}", f"{m['legal_move_rate']:.2f}",
                      f"{m['win_draw_rate']:.2f}", str(tokens), f"{secs:.1f}")
    console.print(table)
    console.print(f"rollouts (JSONL, reloadable with ludic_core.rollout.read_rollouts) in {out / 'demo'}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ludic", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the main demo on the embedded default (CPU, tiny model)")
    demo.add_argument("--out", default="runs", help="where models and rollouts go")
    demo.add_argument("--games", type=int, default=128, help="games per player")
    demo.add_argument("--group-size", type=int, default=8, help="episodes per request (GRPO group)")
    demo.set_defaults(func=_cmd_demo)
    model = sub.add_parser("model", help="build models offline")
    model_sub = model.add_subparsers(dest="model_command", required=True)
    tiny = model_sub.add_parser("tiny", help="build a tiny random model + tokenizer directory")
    tiny.add_argument("--out", default="runs/models/tiny-1m")
    tiny.add_argument("--preset", default="tiny-1m")
    tiny.add_argument("--seed", type=int, default=0)
    tiny.add_argument("--overwrite", action="store_true")
    tiny.set_defaults(func=_cmd_model)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (ValueError, FileExistsError) as exc:
        print(f"ludic: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
