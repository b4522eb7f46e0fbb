"""OpenMP's spin-wait, set before torch loads it: one process, two threads running torch ops.

In-process RL runs torch ops on two threads: `LocalChatClient`'s decode thread and
the trainer's (and a user's own). Each leads its own OpenMP team, so libgomp (the
OpenMP runtime in torch's CPU wheels) soon manages more threads than there are
CPUs. It then lets a team's helper threads spin only 100 times before they sleep,
and every parallel op after a short pause pays a futex wake-up. On 2 cores a
[64, 128] x [128, 384] matmul took 50 us before a second thread had run torch
ops and 130-180 us after, on either thread (benchmarks/openmp_threads.py); a GRPO
step ran about 10% slower, multi-turn rollouts 15-25%.
With `OMP_WAIT_POLICY=active` that throttled spin is 1000 (libgomp's env.c), long
enough to bridge the gap between ops; `GOMP_SPINCOUNT=300000` keeps the
unthrottled spin at libgomp's own default (about 3 ms), so a process that runs
torch on one thread behaves as before.

libgomp reads its environment once, when torch loads it, so `configure()` must run
before anything imports torch, and it never overrides a value the user set.
Importing `ludic_core` does not call it (a process that only validates a config
keeps its environment): the entry points that decode beside a trainer do, first
thing. The `ludic` CLI and every flow-run process a Prefect worker starts do it
when they import `flows` (flows/__init__.py); the benchmarks at their top. A
program of your own that decodes and trains in one process calls it before
importing torch:

    from ludic_core import openmp
    openmp.configure()  # before torch: libgomp reads its environment once
    import torch

(or sets `SETTINGS` in its environment). Child processes inherit the setting.
Without it libgomp keeps its defaults; `status()` says which case holds, and
`LocalChatClient` logs it.
"""

from __future__ import annotations

import os
import sys
from typing import Literal

__all__ = ["SETTINGS", "configure", "status"]

#: The libgomp environment `configure()` sets where the user has not set it.
SETTINGS = {"OMP_WAIT_POLICY": "active", "GOMP_SPINCOUNT": "300000"}

_applied = False


def configure() -> bool:
    """Set `SETTINGS` in the environment (children inherit it) unless torch is already loaded;
    a variable the user set is left alone. True if this ran before torch loaded."""
    global _applied
    if "torch" in sys.modules:  # libgomp has read its environment already
        return _applied
    for name, value in SETTINGS.items():
        os.environ.setdefault(name, value)
    _applied = True
    return True


def status() -> Literal["configured", "user", "late"]:
    """'configured': libgomp reads `SETTINGS`; 'user': it reads values the user set; 'late':
    torch loaded before `configure()` ran (or it never ran), so libgomp keeps its throttled
    100-spin wait."""
    if _applied and all(os.environ.get(name) == value for name, value in SETTINGS.items()):
        return "configured"
    return "user" if _applied or "OMP_WAIT_POLICY" in os.environ else "late"
