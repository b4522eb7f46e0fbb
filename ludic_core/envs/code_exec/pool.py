"""`SandboxPool`: bounded concurrent executions, with their rate and latency.

Executions are blocking subprocess waits, so they run on the pool's own
threads (`concurrency` of them): from async code (`arun`, what the env calls
inside the rollout engine's event loop) nothing blocks the loop, and from any
number of event loops or threads at most `concurrency` sandboxes run at once.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ludic_core.envs.code_exec.sandbox import ExecResult, Judge, Limits, Sandbox

__all__ = ["SandboxPool"]


class SandboxPool:
    def __init__(self, sandbox: Sandbox, concurrency: int = 4, limits: Limits | None = None) -> None:
        if concurrency < 1:
            raise ValueError(f"a sandbox pool needs concurrency >= 1, not {concurrency}")
        self.sandbox, self.concurrency, self.limits = sandbox, concurrency, limits or Limits()
        self._executor = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix=f"sandbox-{sandbox.name}")
        self._lock = threading.Lock()
        self._latencies: list[float] = []
        self._statuses: dict[str, int] = {}
        self._first: float | None = None
        self._last: float | None = None

    def run(self, program: str, *, limits: Limits | None = None, stdin: str = "",
            judge: Judge | None = None) -> ExecResult:
        """Blocking: waits for a free slot, then for the execution."""
        return self._executor.submit(self._timed, program, limits or self.limits, stdin, judge).result()

    async def arun(self, program: str, *, limits: Limits | None = None, stdin: str = "",
                   judge: Judge | None = None) -> ExecResult:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._timed, program, limits or self.limits, stdin, judge)

    def _timed(self, program: str, limits: Limits, stdin: str, judge: Judge | None) -> ExecResult:
        t0 = time.monotonic()
        result = self.sandbox.run(program, limits=limits, stdin=stdin, judge=judge)
        t1 = time.monotonic()
        with self._lock:
            self._first = t0 if self._first is None else min(self._first, t0)
            self._last = t1 if self._last is None else max(self._last, t1)
            self._latencies.append(t1 - t0)
            self._statuses[result.status] = self._statuses.get(result.status, 0) + 1
        return result

    def stats(self) -> dict[str, float]:
        """Executions, executions/s over the busy span, p50 / p99 latency (ms), and counts by status."""
        with self._lock:
            lat = sorted(self._latencies)
            span = (self._last - self._first) if lat else 0.0
            statuses = dict(self._statuses)
        if not lat:
            return {"executions": 0}
        return {"executions": len(lat), "per_s": len(lat) / max(span, 1e-9),
                "p50_ms": 1000 * _quantile(lat, 0.5), "p99_ms": 1000 * _quantile(lat, 0.99),
                **{f"status/{k}": float(v) for k, v in sorted(statuses.items())}}

    def reset_stats(self) -> None:
        with self._lock:
            self._latencies, self._statuses, self._first, self._last = [], {}, None, None

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        if hasattr(self.sandbox, "close"):  # a warm sandbox's servers
            self.sandbox.close()

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _quantile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank quantile of already sorted values."""
    rank = max(1, math.ceil(q * len(sorted_values) - 1e-9))
    return sorted_values[min(rank, len(sorted_values)) - 1]
