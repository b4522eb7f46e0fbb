"""`WarmBwrapSandbox`: the bubblewrap sandbox with a fork server per slot.

A cold sandbox starts bubblewrap and an interpreter per run (~30-60 ms here);
HumanEval's own harness forks a warm process (~15 ms) but isolates nothing.
Here each concurrent slot keeps one bubblewrap sandbox alive with `jail.py`
serving inside it, and every run is forked from it with the same isolation as
a cold run: a mount and IPC namespace and a /tmp of the run's own (its
`tmp_mb`), a memory cgroup limited to the run's `memory_mb`, uids of the
slot's own for the candidate and the judge, rlimits and the seccomp filter.
What a slot shares between runs is the read-only view and the memory of the
jail's spawner, which a run only reads and which never held a judge (every
run's leader is forked from it; `jail.py` says why); nothing a run makes
(files, IPC, processes, keys) reaches the next.

A slot whose jail dies or stops answering (wall limit + 5 s) is killed and
replaced; that run is reported as a failure, never retried silently.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from ludic_core.envs.code_exec import cgroup
from ludic_core.envs.code_exec.sandbox import (BwrapSandbox, ExecResult, Judge, Limits, SandboxError, jail_request,
                                               result_from_reply)
from ludic_core.envs.code_exec.uids import UidBlock

__all__ = ["WarmBwrapSandbox"]

_GRACE_S = 5.0


class _Slot:
    def __init__(self, sandbox: WarmBwrapSandbox, uids: list[int], limits: Limits) -> None:
        self.uids = uids
        self.cgroup: Path | None = cgroup.run_cgroup(uids[0])
        cfg = {"uids": uids, "private": True, "cgroup": "/jail/cgroup" if self.cgroup else None, "once": False,
               "tmp": "/tmp"}
        self.proc = subprocess.Popen(sandbox.command(limits, cfg, self.cgroup), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env={"PATH": "/usr/bin:/bin"},
                                     start_new_session=True, close_fds=True, text=True, bufsize=1)
        hello = self._read(30.0)
        try:
            ready = json.loads(hello).get("ready") if hello else False
        except ValueError:
            ready = False
        if not ready:
            self.kill()
            raise SandboxError(f"the warm sandbox did not start (bwrap exit status {self.proc.poll()})")

    def _read(self, timeout_s: float) -> str:
        """One reply line, or "" if none came in time (the server is then killed)."""
        box: list[str] = []
        reader = threading.Thread(target=lambda: box.append(self.proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout_s)
        if reader.is_alive():
            self.kill()
            reader.join(5)
            return ""
        return box[0] if box else ""

    def run(self, request: str, wall_s: float) -> object:
        try:
            self.proc.stdin.write(request + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return None
        line = self._read(wall_s + _GRACE_S)
        try:
            return json.loads(line) if line else None
        except ValueError:
            return None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        cgroup.remove(self.cgroup)


class WarmBwrapSandbox(BwrapSandbox):
    name = "bwrap-warm"

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        if not self.drop_uids:
            raise SandboxError("the warm sandbox gives each slot uids of its own, which needs root; "
                               "use BwrapSandbox (cold) as a normal user")
        if self.site_packages:
            raise SandboxError("the warm sandbox runs the standard library only (site_packages=False)")
        self._free: list[_Slot] = []
        self._all: list[_Slot] = []
        self._lock = threading.Lock()

    def run(self, program: str, *, limits: Limits, stdin: str = "", judge: Judge | None = None) -> ExecResult:
        slot = self._take(limits)
        start = time.monotonic()
        reply = slot.run(jail_request(program, limits, stdin, judge, 0, slot.cgroup is not None), limits.wall_s)
        if reply is None:  # the server died or hung: replace it, and say so
            self._drop(slot)
            return ExecResult(status="error", returncode=None, stdout="",
                              stderr="the sandbox's fork server stopped answering; it was replaced",
                              wall_s=time.monotonic() - start)
        self._give_back(slot)
        return result_from_reply(reply, judge is not None, time.monotonic() - start)

    def close(self) -> None:
        with self._lock:
            slots, self._all, self._free = list(self._all), [], []
        for slot in slots:
            slot.kill()
            UidBlock.release(slot.uids)

    def _take(self, limits: Limits) -> _Slot:
        with self._lock:
            while self._free:
                slot = self._free.pop()
                if slot.alive():
                    return slot
                self._all.remove(slot)
                UidBlock.release(slot.uids)
        uids = UidBlock.acquire(2)
        try:
            slot = _Slot(self, uids, limits)
        except BaseException:
            UidBlock.release(uids)
            raise
        with self._lock:
            self._all.append(slot)
        return slot

    def _give_back(self, slot: _Slot) -> None:
        with self._lock:
            self._free.append(slot)

    def _drop(self, slot: _Slot) -> None:
        slot.kill()
        with self._lock:
            if slot in self._all:
                self._all.remove(slot)
        UidBlock.release(slot.uids)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
