"""`ludic` command line.

`ludic demo` is the README's main command: the demo chain (rejection sampling
-> SFT -> RL, tic-tac-toe by default, `--recipe arithmetic` too) as Prefect
flows on the embedded Prefect API, CPU only, a tiny model built offline,
ending with a table of evaluations. `ludic run FLOW --config FILE` runs any
flow with a YAML/JSON config validated by that flow's config model, and
checked (paths, env names) before Prefect starts; `ludic run FLOW --example`
prints a complete, commented config; `ludic model tiny` builds a model directory;
`ludic export --merge CHECKPOINT --out DIR` merges a LoRA run's adapter into its base;
`ludic serve --setup` installs vLLM into its own environment and `ludic serve
--model DIR` runs a vLLM server for a model directory until interrupted;
`ludic zombies` sets up the automation that marks dead runs Crashed.
`ludic run FLOW --deployment` triggers the flow's deployment on a Prefect
server instead and follows it; `ludic watch RUN` follows any run: both end with
the run's final state and the reason it failed (flows/remote.py).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from flows.config_files import read_config_file, validated
from ludic_core.recipes.recipe import RECIPES
from tasks.retries import clear_stop, request_stop, stop_requested

__all__ = ["main", "FLOWS"]

# flow name -> (module, flow function, config class)
FLOWS: dict[str, tuple[str, str, str]] = {
    "demo": ("flows.demo", "demo", "DemoConfig"),
    "rejection_sampling": ("flows.rejection_sampling", "rejection_sampling", "RejectionSamplingConfig"),
    "sft": ("flows.sft", "sft", "SupervisedFinetuneConfig"),
    "rl_train": ("flows.rl_train", "rl_train", "RLTrainConfig"),
    "pipeline_rl": ("flows.pipeline_rl", "pipeline_rl", "PipelineRLConfig"),
    "pipeline_trainer": ("flows.pipeline_parts", "pipeline_trainer", "PipelineTrainerConfig"),
    "pipeline_actor": ("flows.pipeline_parts", "pipeline_actor", "PipelineActorConfig"),
    "evaluate": ("flows.evaluate", "evaluate", "EvaluateConfig"),
    "train_node": ("flows.train_node", "train_node", "TrainNodeConfig"),
}


def load_flow(name: str) -> tuple[Any, Any]:
    import importlib

    if name not in FLOWS:
        raise ValueError(f"unknown flow {name!r}; choose one of {sorted(FLOWS)}")
    module, fn, cfg = FLOWS[name]
    mod = importlib.import_module(module)
    return getattr(mod, fn), getattr(mod, cfg)


def _print_table(rows: list[dict], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for col in rows[0]:
        table.add_column(col, justify="left" if col == "stage" else "right")
    for row in rows:
        table.add_row(*[str(v) for v in row.values()])
    Console().print(table)


def _json_object(text: str) -> dict[str, Any]:
    """A flag's JSON object (argparse names the flag and prints this message on failure)."""
    try:
        value = json.loads(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not JSON ({e}): {text!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"a JSON object is needed, got {type(value).__name__}: {text!r}")
    return value


def _cmd_demo(args: argparse.Namespace) -> int:
    from flows.demo import DemoConfig, demo

    overrides = {k: v for k, v in {"recipe": args.recipe, "run_dir": args.out, "sft_steps": args.sft_steps,
                                   "rl_steps": args.rl_steps, "teacher_episodes": args.teacher_episodes,
                                   "eval_episodes": args.eval_episodes, "teacher_kwargs": args.teacher_kwargs}.items()
                 if v is not None}
    cfg = validated(DemoConfig, overrides, "ludic demo")
    cfg.preflight()  # a run dir made with other settings, before the Prefect API starts
    embedded_api()
    start = time.perf_counter()
    result = demo(cfg)
    _print_table(result["rows"], f"{result['recipe']}: greedy evaluation ({result['eval_episodes']} episodes)")
    print(f"demo chain done in {time.perf_counter() - start:.0f} s; outputs under {cfg.out}")
    for stage, path in result["lineage"].items():
        print(f"  {stage}: {path}")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    if args.example:
        from flows.examples import example_config

        print(example_config(args.flow))
        return 0
    if args.deployment is not None:
        return _run_deployment(args)
    flow_fn, cfg_cls = load_flow(args.flow)
    cfg = validated(cfg_cls, read_config_file(args.config) if args.config else {}, args.config or "no --config")
    cfg.preflight()  # paths and env names, before the Prefect API starts
    embedded_api()
    result = flow_fn(cfg)
    print(json.dumps(result, indent=2, default=str))
    return 0


def _run_deployment(args: argparse.Namespace) -> int:
    """Trigger the flow's deployment (on PREFECT_API_URL's server) and follow the run to
    its end: its config file is checked here first, as the worker will read it (paths are
    the worker's, so they are not checked here); the exit code says how the run ended."""
    from flows.remote import trigger

    name = args.deployment or args.flow
    deployment = name if "/" in name else f"{args.flow}/{name}"
    data = None
    if args.config:
        data = read_config_file(args.config)
        validated(load_flow(args.flow)[1], data, args.config)
    run_id, run_name = trigger(deployment, data)
    print(f"started flow run {run_name!r} ({run_id}) of {deployment}; Ctrl-C stops following, not the run",
          flush=True)
    return _follow(run_id, deployment)


def _follow(run_id: Any, deployment: str | None) -> int:
    from flows.remote import follow, outcome

    try:
        return outcome(follow(run_id), deployment)
    except KeyboardInterrupt:
        print(f"\nstopped following; the run goes on: `ludic watch {run_id}`", file=sys.stderr)
        return 130


def _cmd_watch(args: argparse.Namespace) -> int:
    from flows.remote import find_run

    return _follow(find_run(args.run), None)


def embedded_api() -> None:
    """With no PREFECT_API_URL, start Prefect's embedded API server now (the one
    the flow's client would start) and give it a reaper: Prefect stops it at
    exit, but a SIGKILLed `ludic` would leave it running, holding its port."""
    from prefect.settings import PREFECT_API_URL

    if PREFECT_API_URL.value():
        return
    from prefect.server.api.server import SubprocessASGIServer

    from flows.embedded_server import patient_startup
    from ludic_core.lifetime import reap_when_parent_dies

    server = SubprocessASGIServer()  # the client's own: one per process
    with patient_startup():  # a busy machine's server may listen seconds before it answers
        server.start()
    if server.server_process is not None:
        reap_when_parent_dies(server.server_process.pid)


def _cmd_model(args: argparse.Namespace) -> int:
    from ludic_core.models import build_tiny_model

    out = build_tiny_model(args.out, args.preset, seed=args.seed, overwrite=args.overwrite)
    print(f"built {args.preset} (seed {args.seed}) at {out}")
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from ludic_core.training.export import export_merged

    out = export_merged(args.merge, args.out, base=args.base)
    print(f"merged {args.merge} into its base: a plain model directory at {out}")
    return 0


def _interrupt(signum: int, frame: Any) -> None:
    request_stop()  # recorded, so that a wrapped interrupt still reads as one and no task retries
    raise KeyboardInterrupt


def _serve_setup(args: argparse.Namespace) -> int:
    from ludic_core.vllm.preflight import VLLMEnvironmentError
    from ludic_core.vllm.setup import setup_vllm_env

    try:
        python = setup_vllm_env(args.env, build=args.build)
    except VLLMEnvironmentError as exc:  # installed, but it cannot serve here: say why
        print(f"ludic: error: {exc}", file=sys.stderr)
        return 2
    print(f"vLLM environment ready: {python}")
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    import os
    from ludic_core.inference.errors import InferenceServerError
    from ludic_core.vllm.preflight import VLLMEnvironmentError

    if args.setup:
        return _serve_setup(args)
    if not args.model:
        raise ValueError("--model DIR is required (or --setup to install vLLM)")
    from ludic_core.vllm.server import VLLMServerConfig, start_vllm_server

    python = args.python or (str(Path(args.env) / "bin" / "python") if args.env else None)
    cfg = VLLMServerConfig(python=python, build=args.build, host=args.host, port=args.port,
                           served_model_name=args.name, dtype=args.dtype, max_model_len=args.max_model_len,
                           log_dir=args.log_dir, max_lora_rank=args.lora_rank)
    given_key = os.environ.get("LUDIC_VLLM_API_KEY")
    try:
        server, key = start_vllm_server(args.model, cfg, api_key=given_key)
    except VLLMEnvironmentError as exc:  # checked before launching: nothing to stop
        print(f"ludic: error: {exc}", file=sys.stderr)
        return 2
    except InferenceServerError as exc:
        print(f"ludic: error: {exc}", file=sys.stderr)
        return 1
    info = {"base_url": server.base_url, "model": server.model_name, "pid": server.pid, "build": server.build,
            "log": server.log_path, "startup_s": round(server.startup_seconds, 1), "lora_rank": server.lora_rank}
    print(json.dumps(info), flush=True)
    print(f"vLLM ({server.build}) serving {args.model} as {server.model_name!r} at {server.base_url} "
          f"(healthy after {server.startup_seconds:.0f} s); Ctrl-C stops it", flush=True)
    print("API key: from $LUDIC_VLLM_API_KEY" if given_key else f"API key (generated): {key}", flush=True)
    try:
        while server.alive():
            time.sleep(1.0)
        print(f"ludic: error: the server exited; log {server.log_path}:\n{server.log_tail()}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        server.stop()


def _cmd_zombies(args: argparse.Namespace) -> int:
    from flows.zombies import ensure_zombie_automation

    automation_id, within_s, created = ensure_zombie_automation(args.within)
    print(f"{'created' if created else 'updated'} automation {automation_id}: a flow run with no heartbeat "
          f"for {within_s} s is marked Crashed")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ludic", description="Ludic on Prefect")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="rejection sampling -> SFT -> RL on a recipe (embedded Prefect, CPU)")
    demo.add_argument("--recipe", choices=list(RECIPES), help=f"default {RECIPES[0]}")
    demo.add_argument("--out", help="run directory (default runs/demo/RECIPE)")
    demo.add_argument("--sft-steps", type=int)
    demo.add_argument("--rl-steps", type=int)
    demo.add_argument("--teacher-episodes", type=int)
    demo.add_argument("--teacher-kwargs", type=_json_object, metavar="JSON",
                      help="the teacher's keyword arguments over the recipe's, e.g. '{\"fallback\": \"centre\"}'")
    demo.add_argument("--eval-episodes", type=int)
    demo.set_defaults(func=_cmd_demo)
    run = sub.add_parser("run", help="run a flow with a YAML/JSON config file")
    run.add_argument("flow", choices=sorted(FLOWS))
    run.add_argument("--config", help="YAML or JSON file validated by the flow's config model")
    run.add_argument("--example", action="store_true", help="print a complete, commented example config and exit")
    run.add_argument("--deployment", nargs="?", const="", metavar="NAME",
                     help="run it as a deployment on the server PREFECT_API_URL names (default FLOW/FLOW) and "
                          "follow it to its end, printing its logs and why it failed; --config replaces the "
                          "deployment's whole cfg, without it the deployment's own parameters are used")
    run.set_defaults(func=_cmd_run)
    watch = sub.add_parser("watch", help="follow a flow run (id or name) on PREFECT_API_URL's server to its end: "
                                         "its logs, then its final state and why it failed")
    watch.add_argument("run", help="flow run id or name (as `prefect deployment run` prints them)")
    watch.set_defaults(func=_cmd_watch)
    model = sub.add_parser("model", help="build models offline")
    model_sub = model.add_subparsers(dest="model_command", required=True)
    tiny = model_sub.add_parser("tiny", help="build a tiny random model + tokenizer directory")
    tiny.add_argument("--out", default="runs/models/tiny-1m")
    tiny.add_argument("--preset", default="tiny-1m")
    tiny.add_argument("--seed", type=int, default=0)
    tiny.add_argument("--overwrite", action="store_true")
    tiny.set_defaults(func=_cmd_model)
    export = sub.add_parser("export", help="turn a LoRA run's adapter checkpoint into a plain model directory")
    export.add_argument("--merge", required=True, metavar="CHECKPOINT",
                        help="adapter checkpoint: OUT/checkpoints/step_N (or its model/ dir, or the checkpoints "
                             "root for its latest)")
    export.add_argument("--out", required=True, help="new directory for the merged model (config, tokenizer, "
                                                     "safetensors)")
    export.add_argument("--base", help="the base model directory (default: the path the adapter records; its "
                                       "fingerprint is checked either way)")
    export.set_defaults(func=_cmd_export)
    serve = sub.add_parser("serve", help="run vLLM's OpenAI server for a model dir (or --setup to install vLLM)")
    serve.add_argument("--setup", action="store_true", help="install vLLM into its own environment and exit")
    serve.add_argument("--build", default="auto", choices=["auto", "cpu", "cuda"],
                       help="--setup: which build to install (auto: cuda when nvidia-smi exists); serving: "
                            "which build the environment must have (auto: whichever it has)")
    serve.add_argument("--env", help="the vLLM environment (default $LUDIC_VLLM_VENV or .venv-vllm)")
    serve.add_argument("--python", help="an interpreter that has vLLM (instead of --env)")
    serve.add_argument("--model", help="HF model directory to serve")
    serve.add_argument("--name", default="policy", help="served model name")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16", "auto"])
    serve.add_argument("--max-model-len", type=int)
    serve.add_argument("--log-dir", default="runs/vllm")
    serve.add_argument("--lora-rank", type=int, help="also serve LoRA adapters up to this rank, loaded and unloaded "
                                                     "at runtime (rounded up to a rank vLLM accepts: 8, 16, 32, ...)")
    serve.set_defaults(func=_cmd_serve)
    zombies = sub.add_parser("zombies", help="set up the automation that marks runs whose process died Crashed "
                                             "(on the server PREFECT_API_URL names)")
    zombies.add_argument("--within", type=int, help="seconds without a heartbeat (default: 3 x "
                                                    "PREFECT_FLOWS_HEARTBEAT_FREQUENCY)")
    zombies.set_defaults(func=_cmd_zombies)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if threading.current_thread() is threading.main_thread():
        # `kill PID` (a supervisor's stop) unwinds like Ctrl-C: Prefect marks the run and stops the
        # temporary API server it started (an atexit hook). Python's default for SIGTERM exits at
        # once, and that server, a child process, went on running.
        signal.signal(signal.SIGTERM, _interrupt)
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not where a shell ignores it
            signal.signal(signal.SIGINT, _interrupt)
    clear_stop()
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print("ludic: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if stop_requested():  # the signal landed where code wraps what it raises: a lazy import's class
            # body turns it into "RuntimeError: Error calling __set_name__"; it is still the stop
            print("ludic: interrupted", file=sys.stderr)
            return 130
        if isinstance(exc, (ValueError, FileExistsError, FileNotFoundError)):
            print(f"ludic: error: {exc}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    raise SystemExit(main())
