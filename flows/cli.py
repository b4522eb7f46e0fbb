"""`ludic` command line.

`ludic demo` is the README's main command: the demo chain (rejection sampling
-> SFT -> RL on tic-tac-toe) as Prefect flows on the embedded Prefect API, CPU
only, a tiny model built offline, ending with a table of win+draw rates.
`ludic run FLOW --config FILE` runs any flow with a YAML/JSON config validated
by that flow's config model; `ludic model tiny` builds a model directory.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["main", "FLOWS"]

# flow name -> (module, flow function, config class)
FLOWS: dict[str, tuple[str, str, str]] = {
    "demo": ("flows.demo", "demo", "DemoConfig"),
    "rejection_sampling": ("flows.rejection_sampling", "rejection_sampling", "RejectionSamplingConfig"),
    "sft": ("flows.sft", "sft", "SFTFlowConfig"),
    "rl_train": ("flows.rl_train", "rl_train", "RLTrainConfig"),
    "evaluate": ("flows.evaluate", "evaluate", "EvaluateConfig"),
}


def load_flow(name: str) -> tuple[Any, Any]:
    import importlib

    if name not in FLOWS:
        raise ValueError(f"unknown flow {name!r}; choose one of {sorted(FLOWS)}")
    module, fn, cfg = FLOWS[name]
    mod = importlib.import_module(module)
    return getattr(mod, fn), getattr(mod, cfg)


def read_config_file(path: str) -> dict:
    text = Path(path).read_text()
    if path.endswith((".yaml", ".yml")):
        import yaml

        data = yaml.safe_load(text) or {}
    else:
        data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a flow config must be a mapping, got {type(data).__name__}")
    return data


def _print_table(rows: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="tic-tac-toe vs a random opponent (greedy)")
    for col in rows[0]:
        table.add_column(col, justify="left" if col == "stage" else "right")
    for row in rows:
        table.add_row(*[str(v) for v in row.values()])
    Console().print(table)


def _cmd_demo(args: argparse.Namespace) -> int:
    from flows.demo import DemoConfig, demo

    overrides = {k: v for k, v in {"run_dir": args.out, "sft_steps": args.sft_steps, "rl_steps": args.rl_steps,
                                   "teacher_games": args.teacher_games, "eval_games": args.eval_games}.items()
                 if v is not None}
    cfg = DemoConfig(**overrides)
    start = time.perf_counter()
    result = demo(cfg)
    _print_table(result["rows"])
    print(f"demo chain done in {time.perf_counter() - start:.0f} s; outputs under {cfg.run_dir}")
    for stage, path in result["lineage"].items():
        print(f"  {stage}: {path}")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    flow_fn, cfg_cls = load_flow(args.flow)
    cfg = cfg_cls.model_validate(read_config_file(args.config) if args.config else {})
    result = flow_fn(cfg)
    print(json.dumps(result, indent=2, default=str))
    return 0


def _cmd_model(args: argparse.Namespace) -> int:
    from ludic_core.models import build_tiny_model

    out = build_tiny_model(args.out, args.preset, seed=args.seed, overwrite=args.overwrite)
    print(f"built {args.preset} (seed {args.seed}) at {out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ludic", description="Ludic on Prefect")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="rejection sampling -> SFT -> RL on tic-tac-toe (embedded Prefect, CPU)")
    demo.add_argument("--out", help="run directory (default runs/demo)")
    demo.add_argument("--sft-steps", type=int)
    demo.add_argument("--rl-steps", type=int)
    demo.add_argument("--teacher-games", type=int)
    demo.add_argument("--eval-games", type=int)
    demo.set_defaults(func=_cmd_demo)
    run = sub.add_parser("run", help="run a flow with a YAML/JSON config file")
    run.add_argument("flow", choices=sorted(FLOWS))
    run.add_argument("--config", help="YAML or JSON file validated by the flow's config model")
    run.set_defaults(func=_cmd_run)
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
    except (ValueError, FileExistsError, FileNotFoundError) as exc:
        print(f"ludic: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
