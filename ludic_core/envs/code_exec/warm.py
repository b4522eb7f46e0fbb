"""`WarmBwrapSandbox`: the bubblewrap sandbox with a fork server per slot.

A cold sandbox starts bubblewrap and two interpreters per run (~30-60 ms
here); HumanEval's own harness forks a warm process (~15 ms) but isolates
nothing. Here each concurrent slot keeps one bubblewrap sandbox alive with a
fork server inside (`zygote.py`, the standard library imported once) and every
run is a fresh process forked from it: the same namespaces, read-only root,
no network and rlimits as `BwrapSandbox`, under the slot's own unprivileged
uid; at the end every process of that uid is killed and /tmp is wiped, so no
run sees another's leftovers. What is shared between the runs of a slot is
the (read-only) view and the server's memory, which a child only reads.

A slot whose server dies or stops answering (wall limit + 5 s) is killed and
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

from ludic_core.envs.code_exec.sandbox import BwrapSandbox, ExecResult, Limits, SandboxError, Status, _rlimits

__all__ = ["WarmBwrapSandbox"]

_ZYGOTE = Path(__file__).with_name("zygote.py")
_GRACE_S = 5.0


class _Slot:
    def __init__(self, sandbox: WarmBwrapSandbox, uid: int, limits: Limits) -> None:
        self.uid = uid
        cmd = sandbox.root_view(limits) + [
            "--perms", "0700", "--tmpfs", "/io", "--ro-bind", str(_ZYGOTE), "/sandbox/zygote.py",
            "--", sandbox.python, "-I", "-S", "-B", "/sandbox/zygote.py", str(uid)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     env={"PATH": "/usr/bin:/bin"}, start_new_session=True, close_fds=True,
                                     text=True, bufsize=1)
        hello = self._read(30.0)
        if not hello or not json.loads(hello).get("ready"):
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

    def run(self, request: dict, wall_s: float) -> dict | None:
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return None
        line = self._read(wall_s + _GRACE_S)
        return json.loads(line) if line else None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()


class WarmBwrapSandbox(BwrapSandbox):
    name = "bwrap-warm"

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        if not self._uids.root:
            raise SandboxError("the warm sandbox gives each slot a uid of its own, which needs root; "
                               "use BwrapSandbox (cold) as a normal user")
        if self.site_packages:
            raise SandboxError("the warm sandbox runs the standard library only (site_packages=False)")
        self._free: list[_Slot] = []
        self._all: list[_Slot] = []
        self._lock = threading.Lock()

    def run(self, program: str, *, limits: Limits, stdin: str = "") -> ExecResult:
        slot = self._take(limits)
        request = {"program": program, "stdin": stdin, "wall_s": limits.wall_s, "output_chars": limits.output_chars,
                   "limits": _rlimits(limits, nproc_base=0)}
        start = time.monotonic()
        reply = slot.run(request, limits.wall_s)
        if reply is None:  # the server died or hung: replace it, and say so
            self._drop(slot)
            return ExecResult(status="error", returncode=None, stdout="",
                              stderr="the sandbox's fork server stopped answering; it was replaced",
                              wall_s=time.monotonic() - start)
        self._give_back(slot)
        code = reply["returncode"]
        if reply["timed_out"]:
            status: Status = "timeout"
        elif code == 0:
            status = "ok"
        elif code < 0:
            status = "killed"
        else:
            status = "error"
        return ExecResult(status=status, returncode=code, stdout=reply["stdout"], stderr=reply["stderr"],
                          wall_s=reply["wall_s"])

    def close(self) -> None:
        with self._lock:
            slots, self._all, self._free = list(self._all), [], []
        for slot in slots:
            slot.kill()
            self._uids.release(slot.uid)

    def _take(self, limits: Limits) -> _Slot:
        with self._lock:
            while self._free:
                slot = self._free.pop()
                if slot.alive():
                    return slot
                self._all.remove(slot)
                self._uids.release(slot.uid)
        uid = self._uids.acquire()
        try:
            slot = _Slot(self, uid, limits)
        except BaseException:
            self._uids.release(uid)
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
        self._uids.release(slot.uid)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
