"""Score answers in a child process, under a deadline and a memory cap.

A task's `score_answer` is reasoning-gym's code run on the policy's text, and
some of it is not total: `coin_flip` turns "1e999999999" into an exact
`Fraction` (a billion-digit integer), sympy-based scorers spent 100+ s on
"1e999999". Neither raises; either would stall or OOM-kill the trainer. So the
text crosses as JSON lines (never pickle) to one long-lived child per process,
which regenerates the entry from (mix, task, index) and scores it; past the
deadline the child is killed and the answer scores 0 with the reason. The
child is not a sandbox: tasks whose scorer `eval`s the answer stay refused
(`tasks.EVAL_SCORERS`). The child runs under `lifetime.with_parent`, so one
stuck on an answer does not outlive the process that started it.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import select
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from typing import Any

from ludic_core.envs.reasoning_gym import tasks as rgt
from ludic_core.lifetime import with_parent

__all__ = ["score_answer", "warm_scorer", "stop_scorer", "SCORE_TIMEOUT_S", "CHILD_MEMORY_BYTES"]

SCORE_TIMEOUT_S = 10.0  # one answer, entry generation included (knight_swap takes ~2 s per entry)
_START_TIMEOUT_S = 120.0  # the child imports reasoning-gym (3-8 s on a busy 2-core machine)
CHILD_MEMORY_BYTES = 4 * 2**30  # address space of the child: a runaway integer fails with MemoryError


def _reply(req: dict[str, Any]) -> dict[str, Any]:
    try:
        mix = rgt.TaskMix(**{k: tuple(v) if isinstance(v, list) else v for k, v in req["mix"].items()})
        entry = rgt.entry(mix, req["task"], req["index"])
        score = rgt.dataset(mix, req["task"]).score_answer(answer=req["answer"], entry=entry)
    except BaseException as exc:  # noqa: BLE001 - MemoryError, RecursionError included: the answer's zero
        return {"error": f"score_answer raised {type(exc).__name__}: {str(exc)[:200]}"}
    if isinstance(score, bool) or not isinstance(score, numbers.Real) or not math.isfinite(score):
        return {"error": f"score_answer returned {score!r:.100}, not a finite number"}
    return {"score": float(score)}


def _serve() -> None:
    """The child: one JSON request per stdin line ({"mix", "task", "index", "answer"}),
    one JSON reply per stdout line ({"score"} or {"error"})."""
    import warnings

    warnings.simplefilter("ignore")  # reasoning-gym's generators warn on stderr, which the trainer shares
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (CHILD_MEMORY_BYTES, CHILD_MEMORY_BYTES))
    except (ImportError, ValueError, OSError):  # not on this platform: the deadline still holds
        pass
    out = os.fdopen(os.dup(1), "wb")  # the replies' own channel: what reasoning-gym prints goes to stderr
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    rgt.task_names()  # import reasoning-gym before saying ready: the deadline is for scoring
    out.write(b'{"ready": true}\n')
    out.flush()
    for line in sys.stdin.buffer:
        out.write(json.dumps(_reply(json.loads(line))).encode() + b"\n")
        out.flush()


class _Child:
    """The one scorer process of this process, started at first use and after each kill."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.proc: subprocess.Popen | None = None
        self.pending = b""
        self.ready = self.eof = False

    def spawn(self) -> None:
        """Start the child without waiting for it (it imports reasoning-gym meanwhile)."""
        if self.proc is None or self.proc.poll() is not None:
            self.stop()
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), "MPLBACKEND": "Agg"}
            cmd = with_parent([sys.executable, "-c", _CHILD_MAIN], forward=False)  # SIGTERM: no handler here
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, bufsize=0)
            self.pending, self.ready, self.eof = b"", False, False

    def _start(self) -> None:
        self.spawn()
        if not self.ready:
            if self._read_line(_START_TIMEOUT_S) is None:
                self.stop()
                raise RuntimeError(f"the reasoning-gym scorer process did not start within {_START_TIMEOUT_S:.0f} s")
            self.ready = True

    def _read_line(self, timeout: float) -> bytes | None:
        """One reply line, or None at the deadline or when the child is gone."""
        assert self.proc is not None and self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while b"\n" not in self.pending:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
                return None
            chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
            if not chunk:
                self.eof = True
                return None
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        return line

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            for pipe in (self.proc.stdin, self.proc.stdout):
                if pipe is not None:
                    pipe.close()
        self.proc = None

    def ask(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        with self.lock:
            self._start()
            assert self.proc is not None and self.proc.stdin is not None
            try:
                self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            except OSError as exc:  # the child died between two answers
                self.stop()
                return {"error": f"the scorer process died ({type(exc).__name__})"}
            line = self._read_line(timeout)
            if line is None:
                died = self.eof or self.proc.poll() is not None
                self.stop()
                if died:  # e.g. killed for memory
                    return {"error": "the scorer process died while scoring"}
                return {"error": f"score_answer took longer than {timeout:g} s (the scorer was killed)"}
            try:
                return json.loads(line)
            except ValueError:
                self.stop()
                return {"error": f"the scorer process replied {line[:100]!r}, not JSON"}


_CHILD_MAIN = f"from {__name__} import _serve; _serve()"
_CHILD = _Child()


def score_answer(mix: rgt.TaskMix, task: str, index: int, answer: str,
                 timeout: float = SCORE_TIMEOUT_S) -> tuple[float, str | None]:
    """(score in [0, 1], why it is 0 or None) for `answer` to entry `index` of `task`; never raises
    for anything the answer does (a scorer process that cannot start at all does raise)."""
    reply = _CHILD.ask({"mix": asdict(mix), "task": task, "index": index, "answer": answer}, timeout)
    if "error" in reply:
        return 0.0, str(reply["error"])
    return min(max(float(reply["score"]), 0.0), 1.0), None


def warm_scorer() -> None:
    """Start this process's scorer child now, so its import overlaps the first episode's decoding."""
    with _CHILD.lock:
        _CHILD.spawn()


def stop_scorer() -> None:
    """Kill this process's scorer child (the next score starts a fresh one)."""
    with _CHILD.lock:
        _CHILD.stop()
