"""A small matmul before and after a second thread has run torch ops, with and without
`ludic_core.openmp.configure()`'s OpenMP settings (ludic_core/openmp.py).

In-process RL runs torch on two threads (the decode thread, the trainer's). Once both
have led an OpenMP team, libgomp manages more threads than CPUs and, by default, lets
idle helpers spin only 100 times before they sleep: each parallel op then pays a
wake-up. Each mode runs in a fresh interpreter, since libgomp reads its environment
once, when torch loads it:
- `torch first`: torch loads before `configure()` runs, so libgomp keeps its defaults (as in
  a program that never calls it: importing `ludic_core` sets nothing);
- `configured first`: `ludic_core.openmp.configure()` sets the wait policy before torch loads
  (what the `ludic` CLI, the flows and the benchmarks do).
Printed: the median microseconds of a [64, 128] x [128, 384] matmul on the main thread
alone, on a second thread, then on each again; the ratio is the last main-thread median
over the first. Meaningful with 2+ cores and torch's default threads. The last line compares the
two modes: the last main-thread median of `configured first` over that of `torch first`.

    .venv/bin/python benchmarks/openmp_threads.py
    .venv/bin/python benchmarks/openmp_threads.py --smoke   # CI: one round, medians of 20
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from ludic_core.openmp import SETTINGS  # imports no torch: the children load it

CHILD = r"""
import statistics, sys, time
from concurrent.futures import ThreadPoolExecutor
from ludic_core import openmp
if sys.argv[1] == "configured first":
    openmp.configure()
import torch

x, w = torch.randn(64, 128), torch.randn(384, 128)

def median_us(n=int(sys.argv[2])):
    ts = []
    with torch.no_grad():
        for _ in range(n):
            t = time.perf_counter()
            torch.nn.functional.linear(x, w)
            ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e6

other = ThreadPoolExecutor(1)
runs = [median_us(), other.submit(median_us).result(), median_us(), other.submit(median_us).result(), median_us()]
print(f"{sys.argv[1]:<18}{openmp.status():<12}{torch.get_num_threads():>8}"
      + "".join(f"{r:>9.0f}" for r in runs) + f"{runs[-1] / runs[0]:>8.2f}x")
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="CI: one round of each mode, medians of 20 matmuls")
    args = ap.parse_args()
    rounds, n = (1, 20) if args.smoke else (2, 400)
    env = {k: v for k, v in os.environ.items() if k not in SETTINGS}
    print(f"{'mode':<18}{'openmp':<12}{'threads':>8}{'main':>9}{'other':>9}{'main':>9}{'other':>9}{'main':>9}"
          f"{'ratio':>9}")
    last_main: dict[str, float] = {}
    for _ in range(rounds):
        for mode in ("torch first", "configured first"):
            row = subprocess.run([sys.executable, "-c", CHILD, mode, str(n)], env=env, check=True,
                                 stdout=subprocess.PIPE, text=True).stdout
            print(row, end="", flush=True)
            last_main[mode] = float(row.splitlines()[-1].split()[-2])  # its last main-thread median (us)
    print(f"(us per matmul, medians of {n}; ratio: the last main-thread median over the first)")
    print(f"ratio (configured first / torch first) main-thread us after a second thread: "
          f"{last_main['configured first'] / last_main['torch first']:.2f}x")


if __name__ == "__main__":
    main()
