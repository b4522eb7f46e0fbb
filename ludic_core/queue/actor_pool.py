"""Actor rounds in long-lived worker processes, JSON lines over their pipes.

Why: a round is Python-bound decoding. Run in the trainer's process (a thread
beside the training stage) it contends for the GIL with the training step, so
overlapping the two buys little. A worker process imports torch once, loads the
newest published policy each round, and answers one JSON line per round (no
pickle on the pipe). A worker that dies mid-round (the OOM killer, `kill -9`)
fails that call with `ActorProcessDied` naming its pid and signal and is
replaced; the caller retries the round under the same index, and since a round
is one atomic write (`SAWStream.put_round`), nothing it half-did is trained.

    python -m ludic_core.queue.actor_pool --threads 1   # one worker (the pool starts these)
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import traceback
import uuid
from typing import IO, Any

from ludic_core.queue.actor import ActorSpec

__all__ = ["ActorPool", "ActorProcessDied", "ActorRoundFailed", "get_pool", "registered"]


class ActorProcessDied(RuntimeError):
    """The worker process exited while it played a round."""


class ActorRoundFailed(RuntimeError):
    """The round raised inside the worker (the worker lives on)."""


class ActorWorker:
    """One worker process; `run` is called by one thread at a time (the pool sees to it)."""

    def __init__(self, threads: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ludic_core.queue.actor_pool", "--threads", str(threads)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.round: int | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _pipes(self) -> tuple[IO[str], IO[str]]:
        stdin, stdout = self.proc.stdin, self.proc.stdout
        assert stdin is not None and stdout is not None  # started with stdin and stdout piped
        return stdin, stdout

    def alive(self) -> bool:
        return self.proc.poll() is None

    def run(self, spec: ActorSpec, round_index: int) -> dict[str, float]:
        self.round = round_index
        try:
            try:
                stdin, stdout = self._pipes()
                stdin.write(json.dumps({"spec": spec.model_dump(mode="json"), "round": round_index}) + "\n")
                stdin.flush()
                line = stdout.readline()
            except (BrokenPipeError, OSError):
                line = ""
            if not line:
                raise ActorProcessDied(f"actor process {self.pid} died during round {round_index} "
                                       f"({_exit_reason(self.proc.wait(timeout=30))})")
            reply = json.loads(line)
        finally:
            self.round = None
        if not reply.get("ok"):
            raise ActorRoundFailed(f"round {round_index} failed in actor process {self.pid}: "
                                   f"{reply.get('type')}: {reply.get('error')}\n{reply.get('traceback', '')}")
        return reply["out"]

    def stop(self, timeout_s: float = 10.0) -> None:
        """Close its stdin (it finishes the round it is in, then exits); kill it after `timeout_s`."""
        stdin, stdout = self._pipes()
        try:
            stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        stdout.close()


class ActorPool:
    """At most `size` worker processes, started on first use; `run` blocks for a
    free one. A dead worker is dropped and a fresh one is started on demand."""

    def __init__(self, size: int, threads: int = 1) -> None:
        if size < 1 or threads < 1:
            raise ValueError(f"an actor pool needs size >= 1 and threads >= 1, not {size} and {threads}")
        self.size, self.threads = size, threads
        self.name = f"actors-{uuid.uuid4().hex[:8]}"
        self._free: queue.Queue[ActorWorker] = queue.Queue()
        self._workers: list[ActorWorker] = []
        self._lock = threading.Lock()
        self._closed = False

    def run(self, spec: ActorSpec, round_index: int) -> dict[str, float]:
        worker = self._take()
        try:
            out = worker.run(spec, round_index)
        except ActorProcessDied:
            with self._lock:
                self._workers.remove(worker)
            raise
        except BaseException:
            self._give_back(worker)
            raise
        self._give_back(worker)
        return {**out, "actor_pid": float(worker.pid)}

    def in_flight(self) -> dict[int, int]:
        """pid -> the round it is playing, for the workers busy now."""
        with self._lock:
            return {w.pid: w.round for w in self._workers if w.round is not None}

    def close(self) -> None:
        with self._lock:
            self._closed = True
            workers, self._workers = list(self._workers), []
        for w in workers:
            w.stop()

    def __enter__(self) -> ActorPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _take(self) -> ActorWorker:
        while True:
            with self._lock:
                if self._closed:
                    raise RuntimeError(f"actor pool {self.name} is closed")
                try:
                    return self._free.get_nowait()
                except queue.Empty:
                    if len(self._workers) < self.size:  # room: under size, or a dead worker was dropped
                        worker = ActorWorker(self.threads)
                        self._workers.append(worker)
                        return worker
            try:
                return self._free.get(timeout=0.2)
            except queue.Empty:
                continue

    def _give_back(self, worker: ActorWorker) -> None:
        with self._lock:
            if worker in self._workers and worker.alive():
                self._free.put(worker)
            elif worker in self._workers:
                self._workers.remove(worker)


_POOLS: dict[str, ActorPool] = {}


class registered:
    """`with registered(pool):` makes `get_pool(pool.name)` find it, so a task
    (whose parameters are plain JSON) can name the pool it runs in."""

    def __init__(self, pool: ActorPool) -> None:
        self.pool = pool

    def __enter__(self) -> ActorPool:
        _POOLS[self.pool.name] = self.pool
        return self.pool

    def __exit__(self, *exc: Any) -> None:
        _POOLS.pop(self.pool.name, None)
        self.pool.close()


def get_pool(name: str) -> ActorPool:
    try:
        return _POOLS[name]
    except KeyError:
        raise LookupError(f"no actor pool named {name!r} in this process (it lives only as long as its flow run)") \
            from None


def _exit_reason(code: int) -> str:
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


def _serve(threads: int) -> None:
    """The worker's loop: a request line in, a reply line out, until stdin closes
    or the process that started it dies (then at once, mid-round: a round is one
    atomic write, so nothing half-done lands)."""
    import torch

    from ludic_core.lifetime import exit_when_orphaned

    exit_when_orphaned()

    torch.set_num_threads(threads)
    from ludic_core.queue.actor import run_actor_round

    # replies go on a private copy of stdout; whatever a library prints goes to stderr
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            out = run_actor_round(ActorSpec.model_validate(req["spec"]), int(req["round"]))
            reply: dict[str, Any] = {"ok": True, "out": out}
        except Exception as e:  # the round failed; the worker serves the next one
            reply = {"ok": False, "type": type(e).__name__, "error": str(e), "traceback": traceback.format_exc()}
        replies.write(json.dumps(reply) + "\n")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="one actor worker: JSON round requests on stdin, replies on stdout")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    _serve(ap.parse_args().threads)
